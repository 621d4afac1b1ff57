"""resource-strategy-fit: per-resource Least/MostAllocated scores, sra, and the proportional predicate."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from busched.api.fit import Code, FitError
from busched.api.node import NodeInfo
from busched.api.objects import ClusterSpec
from busched.api.resource import Resource
from busched.api.task import TaskInfo
from busched.builtin import open_session
from busched.cache.cache import Cache
from busched.framework import points
from busched.framework.config import parse_config
from busched.framework.session import Session
from busched.plugins.resource_strategy_fit import (
    LEAST_ALLOCATED,
    MOST_ALLOCATED,
    ArgumentError,
    ResourceStrategyFitPlugin,
    check_proportional,
    parse_arguments,
)


def session(nodes: list[dict[str, Any]], tasks: list[dict[str, Any]],
            arguments: dict[str, Any] | None = None) -> Session:
    c = {"queues": [{"name": "q"}], "nodes": nodes,
         "jobs": [{"name": "j", "namespace": "ns", "queue": "q", "phase": "Running"}],
         "tasks": [{"namespace": "ns", "job": "j", **t} for t in tasks]}
    cache = Cache()
    cache.load(msgspec.convert(c, ClusterSpec))
    plugin: dict[str, Any] = {"name": "resource-strategy-fit"}
    if arguments is not None:
        plugin["arguments"] = arguments
    return open_session(cache.snapshot(), parse_config({"actions": "", "tiers": [{"plugins": [plugin]}]}))


def score(ssn: Session, task: str, node: str) -> float:
    return ssn.node_order_fn(ssn.jobs["ns/j"].tasks[f"ns-{task}"], ssn.nodes[node])


def node(name: str, **alloc: Any) -> dict[str, Any]:
    return {"name": name, "allocatable": {"pods": 10, **alloc}}


# -- arguments --------------------------------------------------------------------------------------
def test_defaults_are_least_allocated_cpu_and_memory_weight_10():
    cfg, sra, prop = parse_arguments({})
    assert cfg.weight == 10
    assert {k: (v.type, v.weight) for k, v in cfg.resources.items()} == {
        "cpu": (LEAST_ALLOCATED, 1), "memory": (LEAST_ALLOCATED, 1)}
    assert sra.weight == 0 and prop is None


def test_invalid_entries_are_normalised_or_dropped():
    cfg, _, _ = parse_arguments({"resourceStrategyFitWeight": -3, "resources": {
        "cpu": {"type": "Weird", "weight": 0}, "*": {"type": MOST_ALLOCATED, "weight": 1},
        "a*b*": {"type": MOST_ALLOCATED, "weight": 1}, "vendor/*": {"Type": MOST_ALLOCATED, "Weight": 4}}})
    assert cfg.weight == 10
    assert {k: (v.type, v.weight) for k, v in cfg.resources.items()} == {
        "cpu": (LEAST_ALLOCATED, 1), "vendor/*": (MOST_ALLOCATED, 4)}


def test_sra_and_proportional_need_enable():
    _, sra, prop = parse_arguments({"sra": {"resources": "x/y", "weight": 5},
                                    "proportional": {"resources": "x/y"}})
    assert sra.weight == 0 and prop is None
    _, sra, prop = parse_arguments({
        "sra": {"enable": True, "resources": "a/t4, a/a10", "weight": 5, "resourceWeight": {"a/t4": 2, "a/a10": -1}},
        "proportional": {"enable": True, "resources": "a/t4",
                         "resourceProportion": {"a/t4.cpu": 4, "a/t4.memory": -2}}})
    assert (sra.weight, sra.resources, sra.weight_sum) == (5, {"a/t4": 2, "a/a10": 1}, 3)
    assert prop == {"a/t4": (4.0, 1.0)}


def test_undecodable_argument_is_an_error():
    with pytest.raises(ArgumentError, match="resources.cpu.weight"):
        parse_arguments({"resources": {"cpu": {"type": LEAST_ALLOCATED, "weight": "two"}}})
    with pytest.raises(ArgumentError, match="sra.enable"):
        parse_arguments({"sra": {"enable": "yes"}})


# -- strategy score ---------------------------------------------------------------------------------
def test_least_allocated_default_score():
    ssn = session([node("n1", cpu="4", memory="4Gi")],
                  [{"name": "r", "node": "n1", "phase": "Running", "requests": {"cpu": "1"}},
                   {"name": "p", "requests": {"cpu": "1", "memory": "1Gi"}}])
    # cpu (4-2)/4 = .5, memory (4-1)/4 = .75 -> mean .625 * 100 * 10
    assert score(ssn, "p", "n1") == pytest.approx(625.0)


def test_most_and_least_allocated_mixed_weights():
    args = {"resourceStrategyFitWeight": 10, "resources": {
        "nvidia.com/gpu": {"type": MOST_ALLOCATED, "weight": 1},
        "example.com/foo": {"type": LEAST_ALLOCATED, "weight": 2}}}
    ssn = session([node("n5", cpu="4", memory="4Gi", **{"nvidia.com/gpu": "10", "example.com/foo": "5"}),
                   node("n6", cpu="4", memory="4Gi", **{"example.com/foo": "10"})],
                  [{"name": "p", "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "4",
                                              "example.com/foo": "4"}}], args)
    # n5: gpu 4/10 * 1 + foo 1/5 * 2 = .8 over weight 3; n6: gpu capacity 0 -> 0, foo 6/10 * 2 = 1.2
    assert score(ssn, "p", "n5") == pytest.approx(0.8 / 3 * 1000)
    assert score(ssn, "p", "n6") == pytest.approx(1.2 / 3 * 1000)


def test_exact_entry_beats_wildcard_and_longest_prefix_wins():
    args = {"resources": {"vendor.com/*": {"type": MOST_ALLOCATED, "weight": 1},
                          "vendor.*": {"type": LEAST_ALLOCATED, "weight": 1},
                          "vendor.com/special": {"type": LEAST_ALLOCATED, "weight": 1}}}
    nodes = [node("n1", cpu="4", memory="4Gi", **{"vendor.com/gpu": "4", "vendor.com/special": "4"})]
    tasks = [{"name": "g", "requests": {"vendor.com/gpu": "1"}}, {"name": "s", "requests": {"vendor.com/special": "1"}}]
    ssn = session(nodes, tasks, args)
    assert score(ssn, "g", "n1") == pytest.approx(250.0)  # MostAllocated 1/4
    assert score(ssn, "s", "n1") == pytest.approx(750.0)  # LeastAllocated 3/4


def test_overflow_scores_zero():
    ssn = session([node("n1", cpu="2", memory="4Gi")],
                  [{"name": "r", "node": "n1", "phase": "Running", "requests": {"cpu": "2"}},
                   {"name": "p", "requests": {"cpu": "1", "memory": "1Gi"}}])
    assert score(ssn, "p", "n1") == 0.0


def test_pod_level_strategy_annotations():
    ann = {"volcano.sh/resource-strategy-scoring-type": MOST_ALLOCATED,
           "volcano.sh/resource-strategy-weight": '{"cpu": 1}'}
    bad = {"volcano.sh/resource-strategy-scoring-type": MOST_ALLOCATED}
    broken = {**ann, "volcano.sh/resource-strategy-weight": "{cpu"}
    tasks = [{"name": n, "annotations": a, "requests": {"cpu": "2", "memory": "1Gi"}}
             for n, a in (("ann", ann), ("bad", bad), ("broken", broken))]
    ssn = session([node("n1", cpu="4", memory="4Gi")], tasks)
    assert score(ssn, "ann", "n1") == pytest.approx(500.0)  # cpu only, MostAllocated 2/4
    assert score(ssn, "bad", "n1") == 0.0
    assert score(ssn, "broken", "n1") == 0.0


# -- sra --------------------------------------------------------------------------------------------
SRA_NODES = [node("n1", cpu="32", memory="64Gi"), node("n2", cpu="8", memory="16Gi", **{"nvidia.com/t4": "16"}),
             node("n3", cpu="8", memory="16Gi", **{"nvidia.com/a10": "16"}),
             node("n4", cpu="8", memory="16Gi", **{"nvidia.com/t4": "8", "nvidia.com/a10": "16"})]


def test_sra_keeps_plain_tasks_off_scarce_nodes():
    args = {"resourceStrategyFitWeight": 0, "sra": {"enable": True, "resources": "nvidia.com/t4, nvidia.com/a10",
                                                    "weight": 5, "resourceWeight": {"nvidia.com/t4": 2,
                                                                                    "nvidia.com/a10": 3}}}
    ssn = session(SRA_NODES, [{"name": "p1", "requests": {"cpu": "1", "memory": "1Gi"}},
                              {"name": "p2", "requests": {"cpu": "1", "nvidia.com/t4": "2"}}], args)
    assert [score(ssn, "p1", n) for n in ("n1", "n2", "n3", "n4")] == pytest.approx([500, 300, 200, 0])
    # a node lacking what the task requests scores 0
    assert [score(ssn, "p2", n) for n in ("n1", "n2", "n3", "n4")] == pytest.approx([0, 300, 0, 0])


def test_zero_weights_register_no_node_order():
    ssn = session(SRA_NODES, [{"name": "p", "requests": {"cpu": "1"}}], {"resourceStrategyFitWeight": 0})
    assert not ssn.has(points.NODE_ORDER) and not ssn.has(points.PREDICATE)
    assert isinstance(ssn.plugins["resource-strategy-fit"], ResourceStrategyFitPlugin)


# -- proportional -------------------------------------------------------------------------------------
def test_proportional_predicate_reserves_cpu_and_memory_for_idle_gpus():
    args = {"proportional": {"enable": True, "resources": "nvidia.com/gpu",
                             "resourceProportion": {"nvidia.com/gpu.cpu": 1, "nvidia.com/gpu.memory": 1}}}
    nodes = [node("g", cpu="4", memory="4G", **{"nvidia.com/gpu": "2"}), node("c", cpu="4", memory="4G")]
    tasks = [{"name": "small", "requests": {"cpu": "1", "memory": "1G"}},
             {"name": "cpu", "requests": {"cpu": "3", "memory": "1G"}},
             {"name": "mem", "requests": {"cpu": "1", "memory": "3G"}},
             {"name": "gpu", "requests": {"cpu": "4", "memory": "4G", "nvidia.com/gpu": "1"}}]
    ssn = session(nodes, tasks, args)
    tk = ssn.jobs["ns/j"].tasks
    ssn.predicate_fn(tk["ns-small"], ssn.nodes["g"])  # 3 cpu / 3G left >= 2 cpu / 2G reserved
    ssn.predicate_fn(tk["ns-gpu"], ssn.nodes["g"])  # asks for the gpu itself
    ssn.predicate_fn(tk["ns-cpu"], ssn.nodes["c"])  # no gpu on the node
    for name in ("ns-cpu", "ns-mem"):
        with pytest.raises(FitError) as e:
            ssn.predicate_fn(tk[name], ssn.nodes["g"])
        assert e.value.code == Code.UnschedulableAndUnresolvable
        assert "nvidia.com/gpu" in str(e.value)


@pytest.mark.parametrize("task_req,node_idle,fails", [
    (("4", "4G", "0"), ("30", "30G", "6"), False),  # 26 cpu left >= 6 gpus * 4
    (("10", "10G", "0"), ("30", "30G", "6"), True),  # 20 cpu left < 24 reserved
    (("10", "10G", "1"), ("30", "30G", "6"), False),  # the task wants a gpu itself
    (("10", "10G", "0"), ("26", "26G", "2"), False),  # 16 left >= 2 * 4
])
def test_check_proportional_table(task_req: tuple[str, str, str], node_idle: tuple[str, str, str], fails: bool):
    def res(cpu: str, mem: str, gpu: str) -> Resource:
        return Resource.from_list({"cpu": cpu, "memory": mem, "nvidia.com/gpu": gpu})

    req = res(*task_req)
    t = TaskInfo(uid="ns-t", name="t", namespace="ns", job="ns/j", resreq=req, init_resreq=req.clone())
    n = NodeInfo.new("n", res(*node_idle))
    reason = check_proportional(t, n, {"nvidia.com/gpu": (4.0, 4.0)})
    assert (reason is not None) == fails
