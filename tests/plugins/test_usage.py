"""usage: thresholds at the limit, stale and missing metrics, arguments, the shadow estimate."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from busched.actions import ACTIONS
from busched.api.fit import Code, FitError
from busched.api.objects import ClusterSpec, JobSpec, NodeSpec, QueueSpec, TaskSpec
from busched.api.task import TaskStatus
from busched.builtin import open_session
from busched.cache.cache import Cache
from busched.framework.config import load_config
from busched.framework.session import Session
from busched.framework.statement import Statement
from busched.plugins.usage import CPU_EXTEND, MEMORY_EXTEND, UsageArgs, composite, estimate_task, in_shadow, node_score

NOW = 1_772_360_220.0  # 2026-03-01T10:17:00Z
GI = 1024 ** 3


def node(name: str, cpu: float | None = None, mem: float | None = None, age: float = 0.0,
         usage: bool = True, alloc_cpu: str = "4") -> dict[str, Any]:
    n: dict[str, Any] = {"name": name, "allocatable": {"cpu": alloc_cpu, "memory": "8Gi", "pods": "10"}}
    if usage:
        u: dict[str, Any] = {"time": NOW - age, "cpu": {}, "memory": {}}
        if cpu is not None:
            u["cpu"]["10m"] = cpu
        if mem is not None:
            u["memory"]["10m"] = mem
        n["usage"] = u
    return n


def task(name: str, node_name: str = "", phase: str = "Pending", cpu: str = "1", mem: str = "1Gi",
         **kw: Any) -> dict[str, Any]:
    t: dict[str, Any] = {"name": name, "namespace": "c1", "job": "pg1", "phase": phase,
                         "requests": {"cpu": cpu, "memory": mem} if cpu or mem else {}, **kw}
    if node_name:
        t["node"] = node_name
    return t


def config(args: dict[str, Any] | None = None, actions: str = "", predicate: bool = True) -> str:
    return (f'actions: "{actions}"\ntiers:\n- plugins:\n  - name: usage\n'
            f"    enablePredicate: {str(predicate).lower()}\n"
            f"    arguments: {json.dumps(args or {})}\n")


def open_with(nodes: list[dict[str, Any]], tasks: list[dict[str, Any]], conf: str = "",
              now: float = NOW) -> Session:
    spec = ClusterSpec(nodes=[msgspec.convert(n, NodeSpec) for n in nodes],
                       tasks=[msgspec.convert(t, TaskSpec) for t in tasks],
                       jobs=[JobSpec(name="pg1", namespace="c1", queue="q1")],
                       queues=[QueueSpec(name="q1")])
    c = Cache()
    c.load(spec)
    return open_session(c.snapshot(), load_config(conf or config()), now=now)


def predicate(ssn: Session, node_name: str, task_key: str = "c1/p1") -> FitError | None:
    t = next(t for j in ssn.jobs.values() for t in j.tasks.values() if t.key == task_key)
    try:
        ssn.predicate_fn(t, ssn.nodes[node_name])
    except FitError as e:
        return e
    return None


def score(ssn: Session, node_name: str, task_key: str = "c1/p1") -> float:
    t = next(t for j in ssn.jobs.values() for t in j.tasks.values() if t.key == task_key)
    return ssn.node_order_fn(t, ssn.nodes[node_name])


# -- predicate -------------------------------------------------------------------------------------
@pytest.mark.parametrize("cpu,mem,reason", [
    (80, 80, None),            # exactly at both thresholds: passes
    (80.0001, 10, CPU_EXTEND),
    (10, 80.0001, MEMORY_EXTEND),
    (95, 95, CPU_EXTEND),      # cpu is checked first
    (0, 0, None),
])
def test_thresholds_are_exceeded_only_above_the_limit(cpu, mem, reason):
    ssn = open_with([node("n1", cpu, mem)], [task("p1")])
    err = predicate(ssn, "n1")
    if reason is None:
        assert err is None
    else:
        assert err is not None and err.statuses[0].code == Code.UnschedulableAndUnresolvable
        assert err.statuses[0].reason == reason and err.statuses[0].plugin == "usage"


def test_configured_thresholds_and_the_mem_key():
    conf = config({"thresholds": {"cpu": 50, "mem": 60}})
    assert predicate(open_with([node("n1", 50, 60)], [task("p1")], conf), "n1") is None
    assert predicate(open_with([node("n1", 51, 10)], [task("p1")], conf), "n1") is not None
    assert predicate(open_with([node("n1", 10, 61)], [task("p1")], conf), "n1") is not None
    # Volcano reads "mem", not "memory": this one leaves the memory threshold at 80
    conf = config({"thresholds": {"cpu": 50, "memory": 10}})
    assert predicate(open_with([node("n1", 10, 79)], [task("p1")], conf), "n1") is None


@pytest.mark.parametrize("age,fresh", [(0, True), (299, True), (300, True), (300.001, False), (3600, False),
                                       (-60, True)])  # a clock behind the node's is still fresh
def test_metrics_older_than_five_minutes_are_ignored(age, fresh):
    ssn = open_with([node("n1", 99, 99, age=age)], [task("p1")])
    assert (predicate(ssn, "n1") is not None) == fresh
    assert (score(ssn, "n1") != 0.0) == fresh  # 99% load scores 5, not 0, while fresh
    if fresh:
        assert score(ssn, "n1") == pytest.approx(5.0)


def test_missing_metrics():
    # a node that never reported: stale, passes, scores 0
    ssn = open_with([node("n1", usage=False)], [task("p1")])
    assert predicate(ssn, "n1") is None and score(ssn, "n1") == 0.0
    # fresh, but without the 10m period: load 0 in that dimension (as Volcano's map lookup)
    ssn = open_with([node("n1", cpu=None, mem=90)], [task("p1")])
    assert predicate(ssn, "n1").statuses[0].reason == MEMORY_EXTEND
    assert score(ssn, "n1") == pytest.approx((1.0 + 0.1) / 2 * 100 * 5)
    ssn = open_with([node("n1", usage=True)], [task("p1")])
    assert score(ssn, "n1") == pytest.approx(500.0)


def test_go_zero_time_is_stale():
    n = node("n1", 99, 99)
    n["usage"]["time"] = "0001-01-01T00:00:00Z"
    ssn = open_with([n], [task("p1")])
    assert predicate(ssn, "n1") is None and score(ssn, "n1") == 0.0


def test_predicate_switch_off():
    ssn = open_with([node("n1", 99, 99)], [task("p1")], config(predicate=False))
    assert predicate(ssn, "n1") is None


# -- score -----------------------------------------------------------------------------------------
def test_weights():
    conf = config({"usage.weight": 2, "cpu.weight": 3, "memory.weight": 1})
    ssn = open_with([node("n1", 30, 50)], [task("p1")], conf)
    assert score(ssn, "n1") == pytest.approx((0.7 * 3 + 0.5 * 1) / 4 * 100 * 2)
    conf = config({"cpu.weight": 0, "memory.weight": 0})
    assert score(open_with([node("n1", 30, 50)], [task("p1")], conf), "n1") == 0.0
    conf = config({"usage.weight": 0})
    assert score(open_with([node("n1", 30, 50)], [task("p1")], conf), "n1") == 0.0


def test_arguments_as_volcano_reads_them():
    a = UsageArgs({})
    assert (a.usage_weight, a.cpu_weight, a.memory_weight) == (5, 1, 1)
    assert (a.cpu_threshold, a.mem_threshold) == (80.0, 80.0)
    assert (a.request_ratio, a.burst_ratio, a.risk_threshold, a.risk_factor) == (0.7, 0.0, 0.6, 1.2)
    assert (a.be_cpu, a.be_memory) == (250.0, 200 * 1024 * 1024)
    # strings, floats and bools are not integers; negative weights and out-of-range values keep defaults
    a = UsageArgs({"usage.weight": "7", "cpu.weight": 2.0, "memory.weight": True,
                   "thresholds": {"cpu": "85", "mem": 75.0}})
    assert (a.usage_weight, a.cpu_weight, a.memory_weight, a.cpu_threshold, a.mem_threshold) == (5, 1, 1, 80, 80)
    a = UsageArgs({"usage.weight": -1, "cpu.weight": -1, "memory.weight": -1, "thresholds": {"cpu": -1, "mem": 101}})
    assert (a.usage_weight, a.cpu_weight, a.memory_weight, a.cpu_threshold, a.mem_threshold) == (5, 1, 1, 80, 80)
    a = UsageArgs({"thresholds": {"cpu": 0, "mem": 100}})
    assert (a.cpu_threshold, a.mem_threshold) == (0, 100)
    a = UsageArgs({"estimator": {"request_ratio": 0.8, "burst_ratio": 0.3, "risk_threshold": 1,
                                 "risk_factor": 1.5, "be_cpu": "500m", "be_mem": "300Mi"}})
    assert (a.request_ratio, a.burst_ratio, a.risk_threshold, a.risk_factor) == (0.8, 0.3, 1.0, 1.5)
    assert (a.be_cpu, a.be_memory) == (500.0, 300 * 1024 * 1024)
    a = UsageArgs({"estimator": {"request_ratio": 1.5, "burst_ratio": -0.1, "risk_threshold": 2.0,
                                 "risk_factor": 0.5, "be_cpu": "-1", "be_mem": "bad"}})
    assert (a.request_ratio, a.burst_ratio, a.risk_threshold, a.risk_factor) == (0.7, 0.0, 0.6, 1.2)
    assert (a.be_cpu, a.be_memory) == (250.0, 200 * 1024 * 1024)
    a = UsageArgs({"estimator": {"be_cpu": 500, "be_mem": 200, "request_ratio": "0.8"}})
    assert (a.be_cpu, a.be_memory, a.request_ratio) == (500.0, 200 * 1024 * 1024, 0.7)
    a = UsageArgs({"thresholds": "80", "estimator": [1]})  # not sections: defaults
    assert (a.cpu_threshold, a.request_ratio) == (80.0, 0.7)


def test_formulas():
    assert composite(50, 1000, 4000) == pytest.approx(0.75)
    assert composite(90, 4000, 4000) == 1.0 and composite(10, 0, 0) == 0.0
    assert node_score(0.3, 0.5, UsageArgs({})) == pytest.approx(300)


# -- the shadow estimate ---------------------------------------------------------------------------
@pytest.mark.parametrize("status,start,shadowed", [
    ("Allocated", 0, True), ("Binding", 0, True), ("Bound", 0, True),
    ("Running", 0, True),            # start not known: still invisible to the metrics
    ("Running", NOW - 10, True), ("Running", NOW - 30, False), ("Running", NOW - 600, False),
    ("Pipelined", 0, False), ("Releasing", 0, False), ("Succeeded", 0, False),
])
def test_which_tasks_are_in_the_shadow(status, start, shadowed):
    kw: dict[str, Any] = {"status": status}
    if start:
        kw["startTime"] = start
    ssn = open_with([node("n1", 0, 0)], [task("p1"), task("r1", "n1", "Running", **kw)])
    t = ssn.jobs["c1/pg1"].tasks["c1-r1"]
    assert in_shadow(t, NOW) == shadowed
    expected = (1.0 - 0.7 * 1000 / 4000 + 1.0 - 0.7 * GI / (8 * GI)) / 2 * 500 if shadowed else 500.0
    assert score(ssn, "n1") == pytest.approx(expected)


def test_estimates_and_risk_factor():
    a = UsageArgs({})
    ssn = open_with([node("n1", 0, 0)], [task("p1"), task("b1", "n1", "Running", cpu="", mem="")])
    be = ssn.nodes["n1"].tasks["c1-b1"]
    assert be.best_effort and estimate_task(be, a, 1.0) == (250.0, 200 * 1024 * 1024)
    assert estimate_task(be, a, 1.2) == pytest.approx((300.0, 240 * 1024 * 1024))
    p1 = next(t for t in ssn.jobs["c1/pg1"].tasks.values() if t.name == "p1")
    # with no limit the estimate is clamped to the request: the risk factor cannot exceed it
    assert estimate_task(p1, UsageArgs({"estimator": {"request_ratio": 1.0}}), 1.2) == (1000.0, GI)


def test_allocations_in_the_session_are_counted_once_and_taken_back_exactly():
    ssn = open_with([node("n1", 0, 0), node("n2", 0, 0)], [task("p1"), task("p2")])
    p1, p2 = (ssn.jobs["c1/pg1"].tasks[u] for u in ("c1-p1", "c1-p2"))
    before = score(ssn, "n1", "c1/p2")
    assert before == pytest.approx(500.0)
    stmt = Statement(ssn)
    stmt.allocate(p1, "n1")
    after = score(ssn, "n1", "c1/p2")
    cpu, mem = 0.7 * 1000 / 4000, 0.7 * GI / (8 * GI)
    assert after == pytest.approx((1 - cpu + 1 - mem) / 2 * 500)
    assert score(ssn, "n2", "c1/p2") == pytest.approx(500.0)
    stmt.discard()
    assert p1.status == TaskStatus.Pending
    assert score(ssn, "n1", "c1/p2") == pytest.approx(500.0)
    ssn.pipeline(p2, "n2")
    assert score(ssn, "n2", "c1/p1") == pytest.approx(after)


def test_risk_factor_applies_from_the_risk_threshold():
    # n1: composite 0.6 exactly (the risk threshold) -> an allocation is estimated at 1.2x
    ssn = open_with([node("n1", 60, 60)], [task("p1"), task("p2")])
    p1 = ssn.jobs["c1/pg1"].tasks["c1-p1"]
    Statement(ssn).allocate(p1, "n1")
    cpu = 0.6 + 0.7 * 1.2 * 1000 / 4000
    mem = 0.6 + 0.7 * 1.2 * GI / (8 * GI)
    assert score(ssn, "n1", "c1/p2") == pytest.approx((1 - cpu + 1 - mem) / 2 * 500)
    # below it: 1x
    ssn = open_with([node("n1", 59, 59)], [task("p1"), task("p2")])
    Statement(ssn).allocate(ssn.jobs["c1/pg1"].tasks["c1-p1"], "n1")
    cpu = 0.59 + 0.7 * 1000 / 4000
    mem = 0.59 + 0.7 * GI / (8 * GI)
    assert score(ssn, "n1", "c1/p2") == pytest.approx((1 - cpu + 1 - mem) / 2 * 500)


def test_allocate_prefers_the_less_loaded_node_and_skips_the_hot_one():
    conf = config(actions="allocate")
    spec_nodes = [node("hot", 90, 10), node("busy", 60, 60), node("idle", 10, 10)]
    ssn = open_with(spec_nodes, [task("p1")], conf)
    ACTIONS["allocate"]().execute(ssn)
    assert ssn.jobs["c1/pg1"].tasks["c1-p1"].node_name == "idle"
