"""numa-aware: the cpu manager's hints and cpu choice, the topology policies, the spec and QoS
(cases transcribed from Volcano's numaaware/provider/cpumanager/cpu_mng_test.go and
numaaware/policy/*_test.go)."""

import random

import msgspec
import pytest

from busched.api import build, numa
from busched.api import objects as o
from busched.api.numa import CpuInfo
from busched.api.qos import BEST_EFFORT, BURSTABLE, GUARANTEED, pod_qos
from busched.api.resource import Resource
from busched.plugins.numaaware import normalize_reverse, numa_span
from busched.plugins.numaaware.cpumanager import Topology, allocate, take_by_topology, topology_hints
from busched.plugins.numaaware.policy import TopologyHint, bits_of, mask_of, merge, predicate

# cpu_mng_test.go's node: two sockets, one NUMA node each, two cores of two threads each
TOPO = Topology({0: CpuInfo(0, 0, 0), 1: CpuInfo(0, 0, 0), 2: CpuInfo(0, 0, 1), 3: CpuInfo(0, 0, 1),
                 4: CpuInfo(1, 1, 2), 5: CpuInfo(1, 1, 2), 6: CpuInfo(1, 1, 3), 7: CpuInfo(1, 1, 3)})
ALL = frozenset(range(8))


def H(*ids, preferred):  # noqa: N802
    return TopologyHint(mask_of(*ids), preferred)


@pytest.mark.parametrize("request_,free,expect", [
    (4, ALL, [H(0, preferred=True), H(1, preferred=True), H(0, 1, preferred=False)]),           # test-1
    (4, frozenset(range(1, 8)), [H(1, preferred=True), H(0, 1, preferred=False)]),                # test-2
    (5, ALL, [H(0, 1, preferred=True)]),                                                           # test-3
    (8, ALL, [H(0, 1, preferred=True)]),                                                           # test-4
    (9, ALL, []),                                                                                  # test-5
    (4, frozenset({2, 3, 4, 5}), [H(0, 1, preferred=False)]),                                      # test-6
])
def test_topology_hints(request_, free, expect):
    assert topology_hints(free, TOPO, request_) == expect


@pytest.mark.parametrize("request_,free,best,expect", [
    (4, ALL, H(0, preferred=True), {0, 1, 2, 3}),                        # test-1
    (4, frozenset(range(1, 8)), H(1, preferred=True), {4, 5, 6, 7}),     # test-2
    (5, ALL, H(0, 1, preferred=True), {0, 1, 2, 3, 4}),                  # test-3
    (5, frozenset(range(1, 8)), H(0, 1, preferred=True), {1, 4, 5, 6, 7}),  # test-4
    (8, frozenset(range(1, 8)), H(0, 1, preferred=True), set()),         # test-5: not enough
])
def test_allocate(request_, free, best, expect):
    assert allocate(request_, best, free, TOPO) == expect


@pytest.mark.parametrize("seed", range(40))
def test_hints_and_choices_hold_on_random_topologies(seed):
    rng = random.Random(seed)
    sockets, cores, threads = rng.randint(1, 3), rng.randint(1, 6), rng.randint(1, 2)
    per_numa = rng.choice([1, 2])  # NUMA nodes per socket
    cpus, i = {}, 0
    for s in range(sockets):
        for c in range(cores):
            for _ in range(threads):
                cpus[i] = CpuInfo(s * per_numa + c % per_numa, s, s * cores + c)
                i += 1
    topo = Topology(cpus)
    free = frozenset(c for c in cpus if rng.random() < 0.7)
    request = rng.randint(1, len(cpus))
    for h in topology_hints(free, topo, request):
        assert h.affinity is not None
        assert sum(1 for c in free if cpus[c].numa in bits_of(h.affinity)) >= request
    got = allocate(request, H(*sorted({cpus[c].numa for c in cpus}), preferred=True), free, topo)
    assert got <= free and len(got) == (request if request <= len(free) else 0)
    for name in ("best-effort", "restricted", "single-numa-node"):
        numa_nodes = sorted({c.numa for c in cpus.values()})
        best, admit = predicate(name, numa_nodes, [{"cpu": topology_hints(free, topo, request)}])
        if admit and name != "best-effort":
            assert best.preferred
            cpus_got = allocate(request, best, free, topo)
            assert {cpus[c].numa for c in cpus_got} <= set(bits_of(best.affinity))


def test_take_by_topology_takes_nothing_for_nothing_and_refuses_too_many():
    assert take_by_topology(TOPO, ALL, 0) == set()
    with pytest.raises(Exception, match="not enough"):
        take_by_topology(TOPO, frozenset({0, 1}), 3)


CPU_GPU_0 = [{"cpu": [H(0, 1, preferred=False), H(0, preferred=True)]},
             {"gpu": [H(0, 1, preferred=False), H(0, preferred=True)]}]
CPU_0_GPU_1 = [{"cpu": [H(0, 1, preferred=False), H(0, preferred=True)]},
               {"gpu": [H(0, 1, preferred=False), H(1, preferred=True)]}]


def test_restricted_and_best_effort_merge_to_the_common_preferred_node():
    for name in ("restricted", "best-effort"):
        assert predicate(name, [0, 1], CPU_GPU_0) == (H(0, preferred=True), True)


def test_conflicting_preferences_merge_to_the_narrowest_not_preferred():
    # no combination is preferred: the narrowest (then lowest) one; restricted refuses, best-effort admits
    assert predicate("restricted", [0, 1], CPU_0_GPU_1) == (H(0, preferred=False), False)
    assert predicate("best-effort", [0, 1], CPU_0_GPU_1) == (H(0, preferred=False), True)


def test_single_numa_node_keeps_only_single_node_preferred_hints():
    assert predicate("single-numa-node", [0, 1], CPU_GPU_0) == (H(0, preferred=True), True)
    hint, admit = predicate("single-numa-node", [0, 1], [{"cpu": [H(0, 1, preferred=True)]}])
    assert not admit and hint == H(0, 1, preferred=False)


def test_none_and_unknown_policies_admit_without_affinity():
    for name in ("none", "something-else"):
        assert predicate(name, [0, 1], CPU_0_GPU_1) == (TopologyHint(None, False), True)


def test_no_preference_and_no_possible_placement():
    assert predicate("restricted", [0, 1], [None]) == (H(0, 1, preferred=True), True)
    assert predicate("restricted", [0, 1], [{"cpu": []}]) == (H(0, 1, preferred=False), False)


def test_merge_prefers_the_narrower_then_lower_mask():
    assert merge([0, 1, 2], [[H(1, 2, preferred=True), H(0, 1, preferred=True), H(2, preferred=True)]]) \
        == H(2, preferred=True)
    assert merge([0, 1], [[H(1, preferred=True), H(0, preferred=True)]]) == H(0, preferred=True)


def test_score_counts_numa_nodes_spanned_fewer_is_better():
    topo = numa.NumaTopology(cpus=dict(TOPO.cpus))
    assert numa_span({0, 1, 4}, topo) == 2 and numa_span(set(), topo) == 0
    assert normalize_reverse([1, 2, 0]) == [50, 0, 100]
    assert normalize_reverse([0, 0]) == [100, 100]


def test_cpusets_parse_and_format():
    assert numa.parse_cpuset("0-3,8, 10-11") == frozenset({0, 1, 2, 3, 8, 10, 11})
    assert numa.parse_cpuset("") == frozenset()
    assert numa.format_cpuset({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    for bad in ("3-1", "a", "0-99999999", "1,,2", "-1"):
        with pytest.raises(numa.NumaError):
            numa.parse_cpuset(bad)


def _node(topology):
    return msgspec.convert({"name": "n1", "allocatable": {"cpu": "8"}, "numaTopology": topology}, o.NodeSpec)


def test_node_topology_converts_with_volcano_field_names():
    n = build.node_info(_node({
        "policies": {"CPUManagerPolicy": "static", "TopologyManagerPolicy": "single-numa-node"},
        "resReserved": {"cpu": "1500m"}, "numares": {"cpu": {"allocatable": "0-7", "capacity": 8}},
        "cpuDetail": {"0": {"numa": 0, "socket": 0, "core": 0}, "4": {"numa": 1, "socket": 1, "core": 2}},
        "podAllocations": [{"uid": "ns-t", "containerAllocations": [{"name": "c", "allocations": {"cpu": "0-1"}}]}],
    }))
    t = n.numa
    assert t is not None and t.cpu_manager_policy == "static" and t.topology_policy == "single-numa-node"
    assert t.free == {"cpu": ALL} and t.capacity == {"cpu": 8} and t.reserved_cpu == 1500
    assert t.numa_nodes() == [0, 1] and t.assigned("ns-t", "", "") and not t.assigned("ns-u", "ns", "u")
    assert n.clone().numa is t


@pytest.mark.parametrize("topology,words", [
    ({"numares": {"cpu": {"allocatable": "0-99999"}}}, "numares.cpu.allocatable"),
    ({"cpuDetail": {"20000": {"numa": 0}}}, "cpuDetail"),
    ({"resReserved": {"cpu": "lots"}}, "resReserved.cpu"),
    ({"cpuDetail": {str(i): {"numa": i} for i in range(9)}}, "more than 8 NUMA nodes"),
])
def test_bad_topologies_are_refused_naming_the_field(topology, words):
    with pytest.raises(build.SpecError, match=words):
        build.node_info(_node(topology))


@pytest.mark.parametrize("topology", [
    {"cpuDetail": {"0": {"numa": 64}}},                      # NUMA ids fit a 64-bit mask
    {"policies": {"MemoryManagerPolicy": "x"}},               # only Volcano's two policy names
    {"cpuDetail": {"x": {"numa": 0}}},                        # cpu ids are numbers
    {"numares": {"cpu": {"capacity": -1}}},
])
def test_out_of_bounds_topologies_do_not_decode(topology):
    with pytest.raises(msgspec.ValidationError):
        _node(topology)


def test_qos_classes():
    r = Resource.from_list
    assert pod_qos(r({}), None) == BEST_EFFORT
    assert pod_qos(r({"cpu": "2"}), None) == BURSTABLE
    assert pod_qos(r({"cpu": "2", "memory": "1Gi"}), r({"cpu": "2", "memory": "1Gi"})) == GUARANTEED
    assert pod_qos(r({}), r({"cpu": "2", "memory": "1Gi"})) == GUARANTEED  # requests default to limits
    assert pod_qos(r({"cpu": "1", "memory": "1Gi"}), r({"cpu": "2", "memory": "1Gi"})) == BURSTABLE
    assert pod_qos(r({"cpu": "2"}), r({"cpu": "2"})) == BURSTABLE  # no memory limit


def test_task_qos_and_policy_from_the_spec():
    t = build.task_info(o.TaskSpec(name="t", namespace="ns", requests={"cpu": "2", "memory": "1Gi"},
                                   limits={"cpu": "2", "memory": "1Gi"},
                                   annotations={numa.NUMA_POLICY_KEY: "restricted"}), {})
    assert t.qos == GUARANTEED and numa.task_policy(t.annotations) == "restricted"
    with pytest.raises(build.SpecError, match="numa-topology-policy"):
        build.task_info(o.TaskSpec(name="t", annotations={numa.NUMA_POLICY_KEY: "tight"}), {})


CONF = """actions: "allocate"
tiers:
- plugins:
  - name: numa-aware
"""


def _topology(free: str, reported: tuple[str, ...] = ()) -> dict:
    return {"policies": {"CPUManagerPolicy": "static", "TopologyManagerPolicy": "single-numa-node"},
            "numares": {"cpu": {"allocatable": free, "capacity": 8}},
            "cpuDetail": {str(i): {"numa": i // 4, "socket": i // 4, "core": i // 2} for i in range(8)},
            "podAllocations": [{"uid": u} for u in reported]}


def _task(name: str, node: str = "") -> o.TaskSpec:
    return msgspec.convert({"name": name, "namespace": "c1", "job": name, "node": node,
                            "phase": "Running" if node else "Pending",
                            "requests": {"cpu": "4", "memory": "1Gi"}, "limits": {"cpu": "4", "memory": "1Gi"},
                            "annotations": {numa.NUMA_POLICY_KEY: "single-numa-node"}}, o.TaskSpec)


def _cycle(cache) -> list[tuple[str, str]]:
    from busched.builtin import run_cycle
    from busched.framework.config import load_config
    ssn = run_cycle(cache.snapshot(), load_config(CONF))
    return [(d.task, d.node) for d in ssn.decisions if d.kind == "bind"]


def test_cpus_stay_taken_across_cycles_until_the_node_reports_them():
    from busched.cache.cache import Cache
    c = Cache()
    c.load(o.ClusterSpec(
        nodes=[msgspec.convert({"name": "n1", "allocatable": {"cpu": "32", "memory": "64Gi", "pods": 110},
                                "numaTopology": _topology("0-7")}, o.NodeSpec)],
        queues=[o.QueueSpec(name="default")],
        jobs=[o.JobSpec(name=n, namespace="c1", min_member=1) for n in ("p1", "p2", "p3")],
        tasks=[_task("p1")]))
    assert _cycle(c) == [("c1/p1", "n1")]
    # the bind is running, the node has not reported its cpus yet: NUMA node 0 stays taken
    c.upsert("task", _task("p1", "n1"))
    c.upsert("task", _task("p2"))
    c.upsert("task", _task("p3"))
    assert _cycle(c) == [("c1/p2", "n1")]  # p3 finds no NUMA node with 4 free cpus
    # p1 has finished; the node reports p2 placed (on NUMA node 1) and 0-3 free: the report is believed
    from busched.cache.cache import object_key
    assert c.delete("task", object_key("task", _task("p1")))
    c.upsert("task", _task("p2", "n1"))
    c.upsert("node", msgspec.convert({"name": "n1", "allocatable": {"cpu": "32", "memory": "64Gi", "pods": 110},
                                      "numaTopology": _topology("0-3", ("c1-p2",))}, o.NodeSpec))
    assert _cycle(c) == [("c1/p3", "n1")]
