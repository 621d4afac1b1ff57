"""Admission: every spec is checked completely (shape while it decodes, bounds and quantities by
`build.validate`), with the same code at the scheduler and in `busched apply`."""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

import msgspec
import pytest

from busched.api import build, k8s_specs, limits
from busched.api.objects import ClusterSpec, JobSpec, NodeSpec, QueueSpec, TaskSpec
from busched.bus import messages as m
from busched.bus.apply import ClusterFileError, apply_cluster, check_cluster, load_cluster, load_cluster_file
from busched.cache.cache import Cache
from busched.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "conformance" / "cases"  # the repository's copy (scripts/sync_conformance.py)


def decode_task(task: dict[str, Any]) -> Any:
    return m.decode(msgspec.json.encode({"type": "task.upsert", "version": 1, "task": {"name": "t", **task}}))


def shape_error(kind: str, spec: dict[str, Any]) -> str:
    with pytest.raises(msgspec.ValidationError) as e:
        m.decode(msgspec.json.encode({"type": f"{kind}.upsert", "version": 1, kind: spec}))
    return str(e.value)


# -- shapes ---------------------------------------------------------------------------------------------
BAD_SHAPES = [
    ("task", {"name": "t", "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": "x"}}}}, "$.task.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                                      ".nodeSelectorTerms"),
    ("task", {"name": "t", "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "Above"}]}]}}}}, "operator"),
    ("task", {"name": "t", "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}},
     "$.task.affinity.podAntiAffinity"),
    ("task", {"name": "t", "affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 101, "podAffinityTerm": {"topologyKey": "h"}}]}}}, "weight"),
    ("task", {"name": "t", "affinity": {"nodeAffinity": {}, "colour": 1}}, "colour"),
    ("task", {"name": "t", "tolerations": [{"key": "k", "effect": "Sometimes"}]}, "$.task.tolerations[0].effect"),
    ("task", {"name": "t", "tolerations": {"key": "k"}}, "$.task.tolerations"),
    ("task", {"name": "t", "topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": "z",
                                                          "whenUnsatisfiable": "DoNotSchedule"}]}, "maxSkew"),
    ("task", {"name": "t", "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z",
                                                          "whenUnsatisfiable": "Maybe"}]}, "whenUnsatisfiable"),
    ("task", {"name": "t", "topologySpreadConstraints": [{"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}]},
     "topologyKey"),
    ("task", {"name": "t", "priority": 2**31}, "$.task.priority"),
    ("task", {"name": "t", "hostPorts": [70000]}, "$.task.hostPorts[0]"),
    ("task", {"name": "t", "labels": {"k": "v" * 64}}, "$.task.labels"),
    ("task", {"name": "t", "labels": {"k" * 318: "v"}}, "$.task.labels"),
    ("task", {"name": "t", "labels": {f"k{i}": "v" for i in range(limits.MAX_LABELS + 1)}}, "$.task.labels"),
    ("task", {"name": "t", "tolerations": [{}] * (limits.MAX_ITEMS + 1)}, "$.task.tolerations"),
    ("task", {"name": "t", "requests": {"cpu": "1" * 65}}, "$.task.requests"),
    ("node", {"name": "n", "taints": [{"key": "k", "effect": "Never"}]}, "$.node.taints[0].effect"),
    ("node", {"name": "n", "taints": [{"effect": "NoSchedule"}]}, "key"),
    ("job", {"name": "j", "minMember": 10**18}, "$.job.minMember"),
    ("job", {"name": "j", "minMember": -1}, "$.job.minMember"),
    ("job", {"name": "j", "minTaskMember": {"a": -1}}, "$.job.minTaskMember"),
    ("job", {"name": "j", "networkTopology": {"mode": "sometimes"}}, "$.job.networkTopology.mode"),
    ("job", {"name": "j", "subGroupPolicy": [{"name": "p", "subGroupSize": "two"}]}, "subGroupSize"),
    ("job", {"name": "j", "conditions": [{"status": "True"}]}, "type"),
    ("queue", {"name": "q", "weight": 10**30}, "$.queue.weight"),
    ("queue", {"name": "q", "weight": -1}, "$.queue.weight"),
    ("queue", {"name": "q", "affinity": {"nodeGroupAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": "g"}}},
     "$.queue.affinity.nodeGroupAffinity"),
    ("priorityClass", {"name": "pc", "value": -(2**31) - 1}, "$.priorityClass.value"),
    ("hyperNode", {"name": "h", "tier": -1}, "$.hyperNode.tier"),
]


@pytest.mark.parametrize("kind,spec,where", BAD_SHAPES, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(BAD_SHAPES)])
def test_bad_shapes_are_refused_while_decoding_naming_the_field(kind: str, spec: dict[str, Any], where: str) -> None:
    assert where in shape_error(kind, spec)


def test_deep_nesting_is_a_validation_error_not_a_recursion_error() -> None:
    deep = b'{"a":' * 10_000 + b"1" + b"}" * 10_000
    for field in (b"affinity", b"labels", b"requests"):
        payload = b'{"type":"task.upsert","version":1,"task":{"name":"t","' + field + b'":' + deep + b"}}"
        with pytest.raises(msgspec.ValidationError):
            m.decode(payload)
    nested_list = b"[" * 10_000 + b"]" * 10_000
    with pytest.raises(msgspec.ValidationError):
        m.decode(b'{"type":"job.upsert","version":1,"job":{"name":"j","subGroupPolicy":' + nested_list + b"}}")


# -- bounds the types cannot say: build.validate ---------------------------------------------------------
BAD_OBJECTS = [
    ("task", TaskSpec(name="t", namespace="bad", requests={"cpu": "-8"}),
     'task bad/t: requests.cpu: must not be negative (got "-8")'),
    ("task", TaskSpec(name="t", namespace="bad", requests={"memory": 1e30}),
     "task bad/t: requests.memory: must not exceed 2^62 (got 1e+30)"),
    ("task", TaskSpec(name="t", namespace="bad", requests={"cpu": "10000001"}),
     'task bad/t: requests.cpu: must not exceed 10^7 cores (got "10000001")'),
    ("task", TaskSpec(name="t", namespace="bad", requests={"nvidia.com/gpu": "-1"}),
     'task bad/t: requests.nvidia.com/gpu: must not be negative (got "-1")'),
    ("task", TaskSpec(name="t", namespace="bad", requests={"memory": "1e999999999"}),
     "task bad/t: requests.memory: quantity '1e999999999': exponent out of range"),
    ("task", TaskSpec(name="t", namespace="bad", annotations={"volcano.sh/task-priority": str(10**30)}),
     "task bad/t: annotations.volcano.sh/task-priority: must be a 32-bit integer"),
    ("task", TaskSpec(name="t", namespace="bad", annotations={f"k{i}": "x" * 60_000 for i in range(5)}),
     "task bad/t: annotations: "),
    ("node", NodeSpec(name="n", allocatable={"cpu": "-8"}), 'node n: allocatable.cpu: must not be negative (got "-8")'),
    ("node", NodeSpec(name="n", capacity={"pods": -1}), "node n: capacity.pods: must not be negative (got -1)"),
    # (Kubernetes: a node's name is a DNS subdomain, 253 characters; a node ledger names its node, and refuses more)
    ("node", NodeSpec(name="n" * 254), f"node {'n' * 250}...: name: 254 characters, more than 253"),
    ("job", JobSpec(name="j", namespace="bad", min_resources={"cpu": "-1"}),
     'job bad/j: minResources.cpu: must not be negative (got "-1")'),
    ("queue", QueueSpec(name="q", capability={"memory": "-1Gi"}),
     'queue q: capability.memory: must not be negative (got "-1Gi")'),
]


@pytest.mark.parametrize("kind,spec,message", BAD_OBJECTS, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(BAD_OBJECTS)])
def test_bad_objects_are_refused_naming_object_and_field(kind: str, spec: Any, message: str) -> None:
    with pytest.raises(build.SpecError) as e:
        build.validate(kind, spec)
    assert message in str(e.value)
    with pytest.raises(build.SpecError) as e:  # the scheduler's cache refuses it with the same words
        Cache().upsert(kind, spec)
    assert message in str(e.value)


def test_bounds_themselves_are_accepted() -> None:
    build.validate("task", TaskSpec(name="t", requests={"cpu": "10000000", "memory": 2**62, "pods": 0},
                                    priority=2**31 - 1))
    build.validate("node", NodeSpec(name="n", allocatable={"cpu": 0, "memory": "4Ei"}))
    build.validate("node", NodeSpec(name="n" * 253))
    build.validate("queue", msgspec.convert({"name": "q", "weight": 2**31 - 1}, QueueSpec))


# -- every shape the scenarios use is accepted and reads the same ------------------------------------------
def scenario_files() -> list[str]:
    return sorted(glob.glob(str(CASES / "**" / "*.yaml"), recursive=True)
                  + glob.glob(str(ROOT / "tests" / "scenarios" / "**" / "*.yaml"), recursive=True))


def test_every_scenario_cluster_is_accepted_and_converts_to_the_dicts_it_wrote() -> None:
    files = scenario_files()
    assert files
    for f in files:
        doc = msgspec.yaml.decode(Path(f).read_bytes())
        cluster = load_cluster(doc, f)
        check_cluster(cluster, f)
        raw = (doc.get("cluster") or {})
        for t_raw, t in zip(raw.get("tasks") or [], cluster.tasks):
            info = build.task_info(t, {})
            for key, got in (("affinity", info.affinity), ("tolerations", info.tolerations),
                             ("topologySpreadConstraints", info.topology_spread_constraints)):
                if key in t_raw:
                    assert got == t_raw[key], (f, key)
        for j_raw, j in zip(raw.get("jobs") or [], cluster.jobs):
            info = build.job_info(j, {})
            if "networkTopology" in j_raw:
                assert info.network_topology == j_raw["networkTopology"], f
            if "subGroupPolicy" in j_raw:
                assert info.subgroup_policy == j_raw["subGroupPolicy"], f


def test_absent_and_empty_selectors_stay_apart() -> None:
    term = {"topologyKey": "h", "labelSelector": {}}
    t = decode_task({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term, {
        "topologyKey": "h"}]}}}).task
    got = build.task_info(t, {}).affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert got == [{"labelSelector": {}, "topologyKey": "h"}, {"topologyKey": "h"}]
    assert k8s_specs.plain(None) is None


def test_a_task_without_affinity_costs_no_conversion(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(build, "_to_builtins", lambda v: calls.append(v) or msgspec.to_builtins(v))
    build.task_info(decode_task({"requests": {"cpu": "1"}}).task, {})
    assert not calls
    build.task_info(decode_task({"affinity": {"nodeAffinity": {}}}).task, {})
    assert len(calls) == 1


# -- busched apply -----------------------------------------------------------------------------------------
BAD_FILE = """
cluster:
  nodes: [{name: n1, allocatable: {cpu: "8"}}]
  tasks:
  - {name: good, namespace: ok, requests: {cpu: "1"}}
  - {name: t, namespace: bad, requests: {cpu: "-8"}}
"""


def test_apply_refuses_a_file_with_an_invalid_object_before_publishing(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    f = tmp_path / "bad.yaml"
    f.write_text(BAD_FILE)
    # no server at this address: refusing must come first (exit 2, nothing tried)
    rc = main(["apply", "-f", str(f), "--nats", "nats://127.0.0.1:1"])
    assert rc == 2
    err = capsys.readouterr().err
    assert 'task bad/t: requests.cpu: must not be negative (got "-8")' in err
    shape = tmp_path / "shape.yaml"
    shape.write_text("tasks: [{name: t, affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "
                     "{nodeSelectorTerms: x}}}}]\n")
    assert main(["apply", "-f", str(shape), "--nats", "nats://127.0.0.1:1"]) == 2
    assert "tasks[0].affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms" \
        in capsys.readouterr().err


async def test_apply_cluster_publishes_nothing_from_an_invalid_cluster() -> None:
    class NoBus:
        async def ensure_streams(self) -> None:
            raise AssertionError("nothing may be published")

    cluster = load_cluster_file("bad.yaml", BAD_FILE.encode())
    with pytest.raises(ClusterFileError, match=r'task bad/t: requests.cpu: must not be negative \(got "-8"\)'):
        await apply_cluster(NoBus(), cluster)  # type: ignore[arg-type]


def test_delete_needs_no_valid_objects() -> None:
    cluster = load_cluster_file("bad.yaml", BAD_FILE.encode())
    assert isinstance(cluster, ClusterSpec) and len(cluster.tasks) == 2
