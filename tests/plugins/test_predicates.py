"""predicates: the kube-scheduler filters Volcano runs, and the k8s matching helpers behind them."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from busched.api import k8s
from busched.api.fit import Code, FitError
from busched.api.objects import ClusterSpec
from busched.builtin import open_session
from busched.cache.cache import Cache
from busched.framework.arguments import Arguments
from busched.framework.config import parse_config
from busched.framework.session import Session
from busched.framework.statement import Statement
from busched.plugins.predicates import PredicatesPlugin

HOST = "kubernetes.io/hostname"


# -- helpers -------------------------------------------------------------------------------------------
def node(name: str, pods: int = 10, **kw: Any) -> dict[str, Any]:
    labels = {HOST: name, **kw.pop("labels", {})}
    return {"name": name, "allocatable": {"cpu": "8", "memory": "16Gi", "pods": pods}, "labels": labels, **kw}


def task(name: str, node_name: str = "", **kw: Any) -> dict[str, Any]:
    t = {"name": name, "namespace": "ns", "job": "j", "requests": {"cpu": "1", "memory": "1Gi"}, **kw}
    if node_name:
        t.update(node=node_name, phase=kw.get("phase", "Running"))
    return t


def session(nodes: list[dict[str, Any]], tasks: list[dict[str, Any]], args: dict[str, Any] | None = None,
            extra_plugins: tuple[str, ...] = ()) -> Session:
    spec = {"queues": [{"name": "q"}], "nodes": nodes, "tasks": tasks,
            "jobs": [{"name": "j", "namespace": "ns", "queue": "q", "phase": "Running"}]}
    cache = Cache()
    cache.load(msgspec.convert(spec, ClusterSpec))
    plugins = [{"name": "predicates", "arguments": args or {}}, *({"name": p} for p in extra_plugins)]
    return open_session(cache.snapshot(), parse_config({"actions": "", "tiers": [{"plugins": plugins}]}))


def the_task(ssn: Session, name: str):
    return ssn.jobs["ns/j"].tasks[f"ns-{name}"]


def status(ssn: Session, name: str, node_name: str, pre: bool = True) -> str:
    t = the_task(ssn, name)
    if pre:
        ssn.pre_predicate_fn(t)
    try:
        ssn.predicate_fn(t, ssn.nodes[node_name])
    except FitError as e:
        return e.code.name
    return "Success"


def reasons(ssn: Session, name: str, node_name: str) -> list[str]:
    t = the_task(ssn, name)
    ssn.pre_predicate_fn(t)
    with pytest.raises(FitError) as e:
        ssn.predicate_fn(t, ssn.nodes[node_name])
    return e.value.reasons()


ANTI_WORKER = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchExpressions": [{"key": "role", "operator": "In", "values": ["worker"]}]},
     "topologyKey": HOST}]}}


# -- k8s helpers ---------------------------------------------------------------------------------------
def test_label_selector_nil_selects_nothing_and_empty_selects_everything():
    assert not k8s.selector_matches(k8s.parse_label_selector(None), {"a": "1"})
    assert k8s.selector_matches(k8s.parse_label_selector({}), {"a": "1"})


@pytest.mark.parametrize("op,values,labels,want", [
    ("In", ["x", "y"], {"k": "y"}, True),
    ("In", ["x"], {}, False),
    ("NotIn", ["x"], {}, True),  # a missing label is not in the set
    ("NotIn", ["x"], {"k": "x"}, False),
    ("Exists", [], {"k": ""}, True),
    ("DoesNotExist", [], {"k": "v"}, False),
])
def test_label_selector_operators(op, values, labels, want):
    sel = k8s.parse_label_selector({"matchExpressions": [{"key": "k", "operator": op, "values": values}]})
    assert k8s.selector_matches(sel, labels) is want


def test_invalid_label_selector_is_rejected():
    bad = {"matchExpressions": [{"key": "k", "operator": "In", "values": []}]}
    assert not k8s.label_selector_valid(bad)
    assert k8s.parse_label_selector(bad) is None
    assert not k8s.label_selector_valid({"matchExpressions": [{"key": "k", "operator": "Gt", "values": ["1"]}]})


def test_node_selector_terms_gt_lt_fields_and_empty_terms():
    def req(*terms: dict[str, Any]) -> dict[str, Any]:
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}

    gt = {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["3"]}]}
    assert k8s.required_node_affinity_matches({}, req(gt), "n1", {"gen": "4"})
    assert not k8s.required_node_affinity_matches({}, req(gt), "n1", {"gen": "3"})
    assert not k8s.required_node_affinity_matches({}, req(gt), "n1", {"gen": "four"})
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
    assert k8s.required_node_affinity_matches({}, req(by_name), "n2", {})
    assert not k8s.required_node_affinity_matches({}, req(by_name), "n1", {})
    assert not k8s.required_node_affinity_matches({}, req({}), "n1", {})  # an empty term selects nothing
    assert k8s.required_node_affinity_matches({}, req({}, gt), "n1", {"gen": "9"})  # terms are ORed
    assert not k8s.required_node_affinity_matches({"zone": "a"}, req(gt), "n1", {"gen": "9", "zone": "b"})


def test_node_affinity_name_conflict():
    def pin(*names: str) -> dict[str, Any]:
        return {"matchFields": [{"key": "metadata.name", "operator": "In", "values": list(names)}]}

    def aff(*terms: dict[str, Any]) -> dict[str, Any]:
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}

    both = {"matchFields": pin("a")["matchFields"] + pin("b")["matchFields"]}
    assert k8s.node_affinity_name_conflict(aff(both))
    assert not k8s.node_affinity_name_conflict(aff(both, pin("c")))
    assert not k8s.node_affinity_name_conflict(aff(both, {"matchExpressions": [{"key": "x", "operator": "Exists"}]}))


def test_tolerations():
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    assert k8s.tolerates({"key": "k", "value": "v"}, taint)  # empty effect and operator: Equal, any effect
    assert not k8s.tolerates({"key": "k", "value": "w"}, taint)
    assert k8s.tolerates({"operator": "Exists"}, taint)  # empty key with Exists tolerates everything
    assert not k8s.tolerates({"key": "k", "operator": "Exists", "effect": "NoExecute"}, taint)
    prefer = {"key": "p", "effect": "PreferNoSchedule"}
    assert k8s.find_untolerated_taint([prefer], []) is None
    assert k8s.find_untolerated_taint([prefer, taint], []) == taint


def test_ports_conflict_and_go_division():
    assert k8s.ports_conflict([("0.0.0.0", "TCP", 80)], [("10.0.0.1", "TCP", 80)])
    assert not k8s.ports_conflict([("10.0.0.2", "TCP", 80)], [("10.0.0.1", "TCP", 80)])
    assert not k8s.ports_conflict([("0.0.0.0", "UDP", 80)], [("0.0.0.0", "TCP", 80)])
    assert not k8s.ports_conflict([("0.0.0.0", "TCP", 0)], [("0.0.0.0", "TCP", 0)])
    assert k8s.go_div(-7, 2) == -3 and k8s.go_div(7, 2) == 3


def test_get_bool_reads_bools_and_bool_strings_only():
    assert Arguments({"k": False}).get_bool("k", True) is False
    assert Arguments({"k": "false"}).get_bool("k", True) is False
    assert Arguments({"k": 0}).get_bool("k", True) is True  # not a bool: the default stands
    assert Arguments({}).get_bool("k", True) is True


# -- node filters --------------------------------------------------------------------------------------
def test_unschedulable_node_unless_tolerated():
    ssn = session([node("n1", unschedulable=True)],
                  [task("a"),
                   task("b", tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}])])
    assert status(ssn, "a", "n1") == "UnschedulableAndUnresolvable"
    assert status(ssn, "b", "n1") == "Success"


def test_node_selector_and_required_affinity():
    ssn = session([node("n1", labels={"zone": "a"}), node("n2", labels={"zone": "b"})],
                  [task("p", nodeSelector={"zone": "a"})])
    assert status(ssn, "p", "n1") == "Success"
    assert status(ssn, "p", "n2") == "UnschedulableAndUnresolvable"
    assert reasons(ssn, "p", "n2") == ["node(s) didn't match Pod's node affinity/selector"]


def test_node_affinity_switch_off_ignores_selectors():
    ssn = session([node("n1")], [task("p", nodeSelector={"zone": "a"})], {"predicate.NodeAffinityEnable": False})
    assert status(ssn, "p", "n1") == "Success"


def test_taints_no_schedule_and_no_execute_block_prefer_does_not():
    ssn = session([node("n1", taints=[{"key": "gpu", "value": "yes", "effect": "NoExecute"}]),
                   node("n2", taints=[{"key": "x", "effect": "PreferNoSchedule"}])],
                  [task("p"), task("q", tolerations=[{"key": "gpu", "operator": "Equal", "value": "yes"}])])
    assert status(ssn, "p", "n1") == "UnschedulableAndUnresolvable"
    assert reasons(ssn, "p", "n1") == ["node(s) had untolerated taint {gpu: yes}"]
    assert status(ssn, "q", "n1") == "Success"
    assert status(ssn, "p", "n2") == "Success"


def test_pod_count_status_comes_first_and_sets_the_code():
    ssn = session([node("n1", pods=1, labels={"zone": "a"})],
                  [task("run", "n1"), task("p", nodeSelector={"zone": "b"})])
    t = the_task(ssn, "p")
    with pytest.raises(FitError) as e:
        ssn.predicate_fn(t, ssn.nodes["n1"])
    assert [s.code for s in e.value.statuses] == [Code.Unschedulable, Code.UnschedulableAndUnresolvable]
    assert e.value.reasons()[0] == "node(s) pod number exceeded"


def test_node_without_pods_allocatable_fits_nothing():
    n = node("n1")
    n["allocatable"] = {"cpu": "8", "memory": "16Gi"}
    ssn = session([n], [task("p")])
    assert status(ssn, "p", "n1") == "Unschedulable"


def test_host_ports():
    ssn = session([node("n1"), node("n2")], [task("run", "n1", hostPorts=[8080]), task("p", hostPorts=[8080])])
    assert status(ssn, "p", "n1") == "Unschedulable"
    assert status(ssn, "p", "n2") == "Success"


# -- inter-pod affinity ------------------------------------------------------------------------------------
def test_required_anti_affinity_of_incoming_and_of_existing_pods():
    ssn = session([node("n1"), node("n2"), node("n3")],
                  [task("w1", "n1", labels={"role": "worker"}),
                   task("guard", "n2", labels={"role": "other"}, affinity=ANTI_WORKER),
                   task("new", labels={"role": "worker"}, affinity=ANTI_WORKER),
                   task("plain", labels={"role": "worker"})])
    assert status(ssn, "new", "n1") == "Unschedulable"  # its own anti-affinity
    assert reasons(ssn, "plain", "n2") == ["node(s) didn't satisfy existing pods anti-affinity rules"]
    assert status(ssn, "new", "n3") == "Success"


def test_required_affinity_needs_a_matching_pod_unless_it_is_the_first():
    aff = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"}]}}
    nodes = [node("n1", labels={"zone": "a"}), node("n2", labels={"zone": "b"}), node("n3")]
    ssn = session(nodes, [task("db", "n1", labels={"app": "db"}), task("web", affinity=aff)])
    assert status(ssn, "web", "n1") == "Success"
    assert status(ssn, "web", "n2") == "UnschedulableAndUnresolvable"
    assert status(ssn, "web", "n3") == "UnschedulableAndUnresolvable"  # no zone label
    # The first pod of a self-affine group goes wherever the topology key exists.
    ssn = session(nodes, [task("db1", labels={"app": "db"}, affinity=aff)])
    assert status(ssn, "db1", "n2") == "Success"
    assert status(ssn, "db1", "n3") == "UnschedulableAndUnresolvable"


def test_namespaces_of_affinity_terms():
    other_ns = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"role": "worker"}}, "topologyKey": HOST, "namespaces": ["elsewhere"]}]}}
    all_ns = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"role": "worker"}}, "topologyKey": HOST, "namespaceSelector": {}}]}}
    ssn = session([node("n1")], [task("w1", "n1", labels={"role": "worker"}),
                                 task("a", affinity=other_ns), task("b", affinity=all_ns)])
    assert status(ssn, "a", "n1") == "Success"
    assert status(ssn, "b", "n1") == "Unschedulable"


def test_affinity_counts_are_taken_at_pre_predicate():
    ssn = session([node("n1")], [task("w1", "n1", labels={"role": "worker"}),
                                 task("new", labels={"role": "worker"}, affinity=ANTI_WORKER)])
    t, n1 = the_task(ssn, "new"), ssn.nodes["n1"]
    ssn.pre_predicate_fn(t)
    stmt = Statement(ssn)
    stmt.evict(the_task(ssn, "w1"), "test")
    with pytest.raises(FitError):  # the eviction is not seen until the next pre-predicate
        ssn.predicate_fn(t, n1)
    ssn.pre_predicate_fn(t)
    ssn.predicate_fn(t, n1)
    stmt.discard()
    ssn.pre_predicate_fn(t)
    with pytest.raises(FitError):
        ssn.predicate_fn(t, n1)


def test_tasks_allocated_in_session_count_and_discard_forgets_them():
    ssn = session([node("n1", pods=2)], [task("a", labels={"role": "worker"}),
                                         task("b", labels={"role": "worker"}, affinity=ANTI_WORKER)])
    stmt = Statement(ssn)
    stmt.allocate(the_task(ssn, "a"), "n1")
    assert status(ssn, "b", "n1") == "Unschedulable"
    stmt.discard()
    assert status(ssn, "b", "n1") == "Success"


def test_pod_affinity_switch_off():
    ssn = session([node("n1")], [task("w1", "n1", labels={"role": "worker"}),
                                 task("new", labels={"role": "worker"}, affinity=ANTI_WORKER)],
                  {"predicate.PodAffinityEnable": "false"})
    assert status(ssn, "new", "n1") == "Success"


# -- topology spread -----------------------------------------------------------------------------------
def spread(max_skew: int = 1, key: str = "zone", **kw: Any) -> list[dict[str, Any]]:
    return [{"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {"app": "foo"}}, **kw}]


def test_topology_spread_skew_and_missing_label():
    nodes = [node("n1", labels={"zone": "a"}), node("n2", labels={"zone": "b"}), node("n3")]
    tasks = [task("r1", "n1", labels={"app": "foo"}), task("r2", "n1", labels={"app": "foo"}),
             task("p", labels={"app": "foo"}, topologySpreadConstraints=spread())]
    ssn = session(nodes, tasks)
    assert status(ssn, "p", "n1") == "Unschedulable"  # 2 + 1 - 0 > 1
    assert status(ssn, "p", "n2") == "Success"
    assert status(ssn, "p", "n3") == "UnschedulableAndUnresolvable"
    assert reasons(ssn, "p", "n3") == ["node(s) didn't match pod topology spread constraints (missing required label)"]


def test_topology_spread_schedule_anyway_is_not_a_filter():
    tsc = spread()
    tsc[0]["whenUnsatisfiable"] = "ScheduleAnyway"
    ssn = session([node("n1", labels={"zone": "a"}), node("n2", labels={"zone": "b"})],
                  [task("r1", "n1", labels={"app": "foo"}), task("r2", "n1", labels={"app": "foo"}),
                   task("p", labels={"app": "foo"}, topologySpreadConstraints=tsc)])
    assert status(ssn, "p", "n1") == "Success"


def test_topology_spread_min_domains_and_terminating_pods():
    nodes = [node("n1", labels={"zone": "a"}), node("n2", labels={"zone": "b"})]
    tasks = [task("r1", "n1", labels={"app": "foo"}), task("r2", "n2", labels={"app": "foo"}),
             task("p", labels={"app": "foo"}, topologySpreadConstraints=spread(minDomains=3))]
    # Two domains < minDomains 3: the global minimum is 0, so 1 + 1 - 0 > 1 everywhere.
    assert status(session(nodes, tasks), "p", "n1") == "Unschedulable"
    tasks = [task("r1", "n1", labels={"app": "foo"}, deleting=True),
             task("p", labels={"app": "foo"}, topologySpreadConstraints=spread())]
    assert status(session(nodes, tasks), "p", "n1") == "Success"  # a pod being deleted is not counted


def test_topology_spread_node_affinity_policy():
    nodes = [node("n1", labels={"zone": "a", "pool": "x"}), node("n2", labels={"zone": "b"})]
    tasks = [task("r1", "n1", labels={"app": "foo"}), task("r2", "n1", labels={"app": "foo"}),
             task("p", labels={"app": "foo"}, nodeSelector={"pool": "x"}, topologySpreadConstraints=spread())]
    # Honor (default): n2 does not match the selector, so zone b is no domain and the minimum is zone a's 2.
    assert status(session(nodes, tasks), "p", "n1") == "Success"
    tasks[2]["topologySpreadConstraints"] = spread(nodeAffinityPolicy="Ignore")
    assert status(session(nodes, tasks), "p", "n1") == "Unschedulable"


# -- pre-predicate, cache ------------------------------------------------------------------------------
def test_pre_predicate_rejects_conflicting_node_names_and_bad_selectors():
    conflict = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]},
                         {"key": "metadata.name", "operator": "In", "values": ["b"]}]}]}}}
    bad = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": {
        # an In without values: well-formed on the wire (an unknown operator is refused at admission), but not a
        # selector that parses
        "labelSelector": {"matchExpressions": [{"key": "k", "operator": "In"}]}, "topologyKey": HOST}}]}}
    ssn = session([node("n1")], [task("a", affinity=conflict), task("b", affinity=bad), task("c")])
    for name in ("a", "b"):
        with pytest.raises(FitError) as e:
            ssn.pre_predicate_fn(the_task(ssn, name))
        assert e.value.code == Code.Error
    ssn.pre_predicate_fn(the_task(ssn, "c"))


def test_cache_answers_for_the_same_pod_template():
    tmpl = {"volcano.sh/template-uid": "t1"}
    ssn = session([node("n1", labels={"zone": "a"})],
                  [task("a", annotations=tmpl, nodeSelector={"zone": "b"}),
                   task("b", annotations=tmpl, nodeSelector={"zone": "b"}),
                   task("c", nodeSelector={"zone": "b"})], {"predicate.CacheEnable": True})
    assert status(ssn, "a", "n1") == "UnschedulableAndUnresolvable"
    assert status(ssn, "b", "n1") == "Error"  # the cached verdict
    assert status(ssn, "c", "n1") == "UnschedulableAndUnresolvable"  # no template: never cached


def test_plugin_defaults():
    p = PredicatesPlugin({})
    assert (p.node_affinity, p.node_ports, p.taint_toleration, p.pod_affinity, p.topology_spread) == (True,) * 5
    assert p.cache_enable is False


@pytest.mark.parametrize("existing_anti", [False, True])
def test_pre_predicate_shortcut_gives_the_computed_states(existing_anti):
    """A task with no affinity and no spread, with no pod anywhere carrying anti-affinity, gets
    (None, None) without computing them; every other task gets what computing them gives."""
    running = task("w0", "n1", labels={"role": "worker"}, **({"affinity": ANTI_WORKER} if existing_anti else {}))
    ssn = session([node("n1"), node("n2", labels={"zone": "a"})],
                  [running, task("plain"), task("labelled", labels={"role": "worker"}),
                   task("anti", affinity=ANTI_WORKER), task("spreads", topologySpreadConstraints=spread())])
    plugin = ssn.plugins["predicates"]
    states = {}
    for name in ("plain", "labelled", "anti", "spreads"):
        t = the_task(ssn, name)
        ssn.pre_predicate_fn(t)
        states[name] = plugin._states[t.uid]
        assert states[name] == plugin._compute_states(t), name
    assert states["plain"] == (None, None)
    assert (states["labelled"][0] is not None) == existing_anti  # the running pod's anti-affinity matches it
    assert states["anti"][0] is not None and states["spreads"][1] is not None
