"""nodeorder: Volcano's node scores (kube-scheduler Score plugins, normalised, times weight)."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import pytest

from busched.api.objects import ClusterSpec
from busched.builtin import open_session
from busched.cache.cache import Cache
from busched.framework.config import parse_config
from busched.framework.session import Session
from busched.framework.statement import Statement
from busched.plugins.nodeorder import DEFAULT_WEIGHTS, weights_from

HOST = "kubernetes.io/hostname"
ALL_OFF = {k: 0 for k in DEFAULT_WEIGHTS}


def node(name: str, cpu: str = "4", memory: str = "8Gi", **kw: Any) -> dict[str, Any]:
    extra = kw.pop("alloc", {})
    return {"name": name, "allocatable": {"cpu": cpu, "memory": memory, "pods": 10, **extra}, **kw}


def task(name: str, node_name: str = "", requests: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    t = {"name": name, "namespace": "ns", "job": "j",
         "requests": {"cpu": "1", "memory": "1G"} if requests is None else requests, **kw}
    if node_name:
        t.update(node=node_name, phase="Running")
    return t


def session(nodes: list[dict[str, Any]], tasks: list[dict[str, Any]], weights: dict[str, Any] | None = None,
            with_predicates: bool = False) -> Session:
    spec = {"queues": [{"name": "q"}], "nodes": nodes, "tasks": tasks,
            "jobs": [{"name": "j", "namespace": "ns", "queue": "q", "phase": "Running"}]}
    cache = Cache()
    cache.load(msgspec.convert(spec, ClusterSpec))
    plugins = [{"name": "nodeorder", "arguments": {**ALL_OFF, **(weights or {})}}]
    if with_predicates:
        plugins.insert(0, {"name": "predicates"})
    return open_session(cache.snapshot(), parse_config({"actions": "", "tiers": [{"plugins": plugins}]}))


def scores(ssn: Session, name: str = "p") -> dict[str, float]:
    t = ssn.jobs["ns/j"].tasks[f"ns-{name}"]
    batch = ssn.batch_node_order_fn(t, ssn.node_list)
    return {n.name: batch.get(n.name, 0.0) + ssn.node_order_fn(t, n) for n in ssn.node_list}


def test_weights_defaults_and_only_integers_override():
    assert weights_from(None) == DEFAULT_WEIGHTS
    assert DEFAULT_WEIGHTS["tainttoleration.weight"] == 3 and DEFAULT_WEIGHTS["mostrequested.weight"] == 0
    w = weights_from({"nodeaffinity.weight": 5, "podaffinity.weight": True, "leastrequested.weight": 2.0,
                      "imagelocality.weight": "4"})
    assert (w["nodeaffinity.weight"], w["podaffinity.weight"], w["leastrequested.weight"],
            w["imagelocality.weight"]) == (5, 2, 1, 1)


def test_least_allocated():
    # n1: cpu (2000-1000)*100/2000 = 50, memory (4Gi-1G)*100/4Gi = 76 -> (50*50 + 76*50) / 100 = 63
    ssn = session([node("n1", "2", "4Gi"), node("n2", "4", "8Gi")], [task("p")], {"leastrequested.weight": 2})
    assert scores(ssn) == {"n1": 126.0, "n2": 162.0}


def test_least_allocated_uses_default_requests_for_best_effort_pods():
    # 100m of 1000m and 200Mi of 1000Mi requested: (90 + 80) / 2 = 85
    ssn = session([node("n1", "1", "1000Mi")], [task("p", requests={})], {"leastrequested.weight": 1})
    assert scores(ssn) == {"n1": 85.0}


def test_most_allocated_counts_running_pods():
    # n1 holds a 1-cpu/1G pod: cpu 2000/2000 -> 100, memory 2G/4Gi -> 46; (100 + 46) / 2 = 73
    ssn = session([node("n1", "2", "4Gi"), node("n2", "4", "8Gi")], [task("r", "n1"), task("p")],
                  {"mostrequested.weight": 1})
    assert scores(ssn) == {"n1": 73.0, "n2": 18.0}


def test_balanced_allocation_and_best_effort_skip():
    ssn = session([node("n1", "2", "2Gi"), node("n2", "4", "2Gi")],
                  [task("p", requests={"cpu": "1", "memory": "1Gi"}), task("be", requests={})],
                  {"balancedresource.weight": 10})
    assert scores(ssn) == {"n1": 1000.0, "n2": 870.0}  # fractions .5/.5 and .25/.5 -> std .125
    assert scores(ssn, "be") == {"n1": 0.0, "n2": 0.0}


def test_balanced_allocation_with_gpu():
    # fractions cpu .25, memory .25, gpu .5: mean 1/3, std = sqrt(((1/12)^2 * 2 + (1/6)^2) / 3)
    ssn = session([node("n1", "4", "4Gi", alloc={"nvidia.com/gpu": 2})],
                  [task("p", requests={"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 1})],
                  {"balancedresource.weight": 1})
    std = math.sqrt(((1 / 12) ** 2 * 2 + (1 / 6) ** 2) / 3)
    assert scores(ssn) == {"n1": float(int((1 - std) * 100))}


def test_node_affinity_preferred_weights_scaled_by_best():
    pref = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 80, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}},
        {"weight": 20, "preference": {"matchExpressions": [{"key": "ssd", "operator": "Exists"}]}},
        {"weight": 0, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}}]}}
    ssn = session([node("n1", labels={"zone": "a", "ssd": ""}), node("n2", labels={"zone": "a"}),
                   node("n3", labels={"zone": "b", "ssd": ""}), node("n4", labels={"zone": "b"})],
                  [task("p", affinity=pref), task("plain")], {"nodeaffinity.weight": 2})
    assert scores(ssn) == {"n1": 200.0, "n2": 160.0, "n3": 40.0, "n4": 0.0}
    assert scores(ssn, "plain") == {"n1": 0.0, "n2": 0.0, "n3": 0.0, "n4": 0.0}


def test_taint_toleration_prefers_fewer_intolerable_prefer_no_schedule_taints():
    prefer = {"key": "k", "value": "v", "effect": "PreferNoSchedule"}
    ssn = session([node("n1"), node("n2", taints=[prefer]),
                   node("n3", taints=[prefer, {"key": "o", "effect": "PreferNoSchedule"}])],
                  [task("p"), task("tol", tolerations=[{"key": "k", "operator": "Exists"}])],
                  {"tainttoleration.weight": 3})
    assert scores(ssn) == {"n1": 300.0, "n2": 150.0, "n3": 0.0}
    assert scores(ssn, "tol") == {"n1": 300.0, "n2": 300.0, "n3": 0.0}


def preferred(kind: str, weight: int, labels: dict[str, str], key: str = HOST) -> dict[str, Any]:
    return {kind: {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": weight, "podAffinityTerm": {"labelSelector": {"matchLabels": labels}, "topologyKey": key}}]}}


def test_pod_affinity_preferred_terms_min_max_scaled():
    nodes = [node(n, labels={HOST: n}) for n in ("n1", "n2", "n3")]
    base = [task("s1", "n1", labels={"svc": "s1"}), task("s2", "n2", labels={"svc": "s2"})]
    ssn = session(nodes, [*base, task("p", affinity=preferred("podAffinity", 100, {"svc": "s1"})),
                          task("q", affinity=preferred("podAntiAffinity", 50, {"svc": "s2"}))],
                  {"podaffinity.weight": 2})
    assert scores(ssn, "p") == {"n1": 200.0, "n2": 0.0, "n3": 0.0}
    assert scores(ssn, "q") == {"n1": 200.0, "n2": 0.0, "n3": 200.0}


def test_pod_affinity_existing_pods_preferences_apply_to_the_incoming_pod():
    nodes = [node(n, labels={HOST: n}) for n in ("n1", "n2")]
    ssn = session(nodes, [task("shy", "n1", affinity=preferred("podAntiAffinity", 10, {"app": "noisy"})),
                          task("p", labels={"app": "noisy"}), task("quiet", labels={"app": "calm"})],
                  {"podaffinity.weight": 1})
    assert scores(ssn, "p") == {"n1": 0.0, "n2": 100.0}
    assert scores(ssn, "quiet") == {"n1": 0.0, "n2": 0.0}  # nothing matched: skipped


def test_pod_topology_spread_scores():
    # zone1 holds 2 matching pods, zone2 1, zone3 none; weight log(3 + 2): raw 3, 2, 0 -> 0, 33, 100
    nodes = [node(f"n{i}", labels={"zone": f"zone{i}"}) for i in (1, 2, 3)] + [node("n4")]
    tsc = [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "foo"}}}]
    tasks = [task("a", "n1", labels={"app": "foo"}), task("b", "n1", labels={"app": "foo"}),
             task("c", "n2", labels={"app": "foo"}), task("p", labels={"app": "foo"}, topologySpreadConstraints=tsc)]
    ssn = session(nodes, tasks, {"podtopologyspread.weight": 10})
    assert scores(ssn) == {"n1": 0.0, "n2": 330.0, "n3": 1000.0, "n4": 0.0}  # n4 lacks the key


def test_pod_topology_spread_by_hostname_counts_the_node_itself():
    nodes = [node(n, labels={HOST: n}) for n in ("n1", "n2")]
    tsc = [{"maxSkew": 2, "topologyKey": HOST, "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "foo"}}}]
    tasks = [task("a", "n1", labels={"app": "foo"}), task("p", labels={"app": "foo"}, topologySpreadConstraints=tsc)]
    # raw: n1 round(1 * log 4 + 1) = 2, n2 round(0 + 1) = 1 -> 100 * (2 + 1 - s) / 2
    assert scores(session(nodes, tasks, {"podtopologyspread.weight": 1})) == {"n1": 50.0, "n2": 100.0}


def test_image_locality_uses_sizes_and_spread_at_node_arrival():
    mb = 1024 * 1024
    nodes = [node("n1", images={"nginx:latest": 500 * mb}), node("n2", images={"nginx:latest": 500 * mb}),
             node("n3")]
    ssn = session(nodes, [task("p", images=["nginx"]), task("none")], {"imagelocality.weight": 1})
    # n1 saw the image on 1 of 3 nodes, n2 on 2 of 3: 100 * (size * spread - 23MB) / (1000MB - 23MB)
    want1 = 100 * (int(500 * mb * (1 / 3)) - 23 * mb) // (977 * mb)
    want2 = 100 * (int(500 * mb * (2 / 3)) - 23 * mb) // (977 * mb)
    assert scores(ssn) == {"n1": float(want1), "n2": float(want2), "n3": 0.0}
    assert want1 < want2
    assert scores(ssn, "none") == {"n1": 0.0, "n2": 0.0, "n3": 0.0}


def test_default_weights_add_up():
    # leastrequested 1 (63 / 81), balancedresource 1, tainttoleration 3 * 100; the rest skip.
    ssn = session([node("n1", "2", "4Gi"), node("n2", "4", "8Gi")], [task("p")], DEFAULT_WEIGHTS)
    bal1 = int((1 - abs(0.5 - 1e9 / 4294967296) / 2) * 100)
    bal2 = int((1 - abs(0.25 - 1e9 / 8589934592) / 2) * 100)
    assert scores(ssn) == {"n1": 63.0 + bal1 + 300, "n2": 81.0 + bal2 + 300}


@pytest.mark.parametrize("with_predicates,want", [(False, 50.0), (True, 0.0)])
def test_scores_see_session_allocations_only_through_predicates(with_predicates, want):
    # Volcano's node view is kept current by the predicates plugin's event handlers alone.
    ssn = session([node("n1", "2", "2Gi")], [task("a", requests={"cpu": "1", "memory": "1Gi"}),
                                              task("p", requests={"cpu": "1", "memory": "1Gi"})],
                  {"leastrequested.weight": 1}, with_predicates)
    stmt = Statement(ssn)
    stmt.allocate(ssn.jobs["ns/j"].tasks["ns-a"], "n1")
    assert scores(ssn) == {"n1": want}
