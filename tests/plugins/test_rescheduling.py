"""rescheduling: arguments, the run interval on the session clock, lowNodeUtilization victims."""

from __future__ import annotations

from typing import Any

import pytest

from busched.actions import ACTIONS
from busched.api.task import TaskStatus
from busched.builtin import open_session
from busched.cache.cache import Cache
from busched.framework.config import load_config
from busched.framework.session import Session
from busched.plugins.rescheduling import LowNodeUtilizationConf, node_utilization, parse_arguments
from tests.helpers import cluster

LNU = """
      strategies:
      - name: lowNodeUtilization
        params:
          thresholds: {{cpu: {low}, memory: {low}}}
          targetThresholds: {{cpu: {target}, memory: {target}}}"""


def conf(low: int = 30, target: int = 50, interval: str = "5m", strategies: str | None = None) -> str:
    body = LNU.format(low=low, target=target) if strategies is None else strategies
    return f"actions: shuffle\ntiers:\n- plugins:\n  - name: rescheduling\n    arguments:\n" \
           f"      interval: {interval}{body}\n"


def open_at(spec, config: str, now: float, state: dict | None = None) -> Session:
    c = Cache()
    c.load(spec)
    snap = c.snapshot()
    snap.others["plugin_state"] = {"rescheduling": {"last_run_at": 0.0}} if state is None else state
    return open_session(snap, load_config(config), now=now)


def pod(name: str, node: str, cpu: str = "1", priority: int = 1, best_effort: bool = False,
        job: str = "j1", phase: str = "Running", ns: str = "default") -> dict[str, Any]:
    req = {} if best_effort else {"cpu": cpu, "memory": f"{cpu}Gi"}
    return {"name": name, "namespace": ns, "job": job, "node": node, "phase": phase, "requests": req,
            "priority": priority}


def fill(node: str, n: int, prefix: str | None = None, priority: int = 1) -> list[dict[str, Any]]:
    return [pod(f"{prefix or node}-{i}", node, priority=priority) for i in range(n)]


def spec_of(tasks, nodes=("low", "mid", "high"), jobs=("j1",)):
    return cluster([(n, "10", "10Gi") for n in nodes], tasks, [{"name": j, "queue": "q1"} for j in jobs])


def shuffle(ssn: Session) -> list[str]:
    ACTIONS["shuffle"]().execute(ssn)
    return [d.task.split("/")[1] for d in ssn.decisions if d.kind == "evict"]


# -- arguments ------------------------------------------------------------------------------------------
def test_parse_arguments_defaults_and_overrides():
    assert parse_arguments({}) == (300.0, [("lowNodeUtilization", None)])
    assert parse_arguments({"interval": "90s"})[0] == 90.0
    assert parse_arguments({"interval": "soon"})[0] == 300.0
    assert parse_arguments({"interval": 60})[0] == 300.0
    assert parse_arguments({"strategies": "lowNodeUtilization"})[1] == [("lowNodeUtilization", None)]
    assert parse_arguments({"strategies": []})[1] == [("lowNodeUtilization", None)]
    got = parse_arguments({"strategies": [{"name": "other"}, {"name": "lowNodeUtilization", "params": {"a": 1}},
                                          {"name": 3}, {"name": "x", "params": 5}]})[1]
    assert got == [("other", None), ("lowNodeUtilization", {"a": 1})]


def test_threshold_parse_as_volcano():
    c = LowNodeUtilizationConf.parse({"thresholds": {"cpu": 20, "pods": 5}, "targetThresholds": {"memory": 70}})
    assert c.thresholds == {"cpu": 20.0, "memory": 100.0, "pods": 100.0}
    assert c.target_thresholds == {"cpu": 100.0, "memory": 70.0, "pods": 100.0}
    # thresholds that are not a map abandon the whole parse, targetThresholds included
    c = LowNodeUtilizationConf.parse({"thresholds": [20], "targetThresholds": {"cpu": 70}})
    assert c.thresholds["cpu"] == 100.0 and c.target_thresholds["cpu"] == 100.0
    assert LowNodeUtilizationConf.parse({"thresholds": {"cpu": "20"}}).thresholds["cpu"] == 100.0


def test_node_utilization_is_used_over_allocatable():
    ssn = open_at(spec_of(fill("high", 8) + fill("low", 1)), conf(), 1000.0)
    assert node_utilization(ssn.nodes["high"]) == {"cpu": 80.0, "memory": 80.0}
    assert node_utilization(ssn.nodes["mid"]) == {"cpu": 0.0, "memory": 0.0}


# -- lowNodeUtilization ----------------------------------------------------------------------------------------
def test_evicts_lowest_priority_until_high_node_drops_below_target():
    tasks = [pod(f"h{i}", "high", priority=p) for i, p in enumerate([5, 1, 9, 3, 7, 2, 8, 4])]
    tasks += fill("low", 1) + fill("mid", 4)
    ssn = open_at(spec_of(tasks), conf(low=30), 1000.0)
    # room on low: (50 - 10)% of 10 cpu = 4 cpu; high goes 80 -> 70 -> 60 -> 50 (still >= 50) -> 40
    assert shuffle(ssn) == ["h1", "h5", "h3", "h7"]


def test_room_on_low_nodes_running_out_stops_eviction():
    tasks = [pod(f"h{i}", "high", priority=i) for i in range(8)] + fill("low", 2) + fill("mid", 4)
    ssn = open_at(spec_of(tasks), conf(low=30), 1000.0)
    # room: (50 - 20)% of 10 cpu = exactly 3 cpu; after 3 victims it is zero
    assert shuffle(ssn) == ["h0", "h1", "h2"]


def test_only_a_room_of_exactly_zero_stops_eviction():
    tasks = [pod(f"h{i}", "high", priority=i) for i in range(8)] + [pod("l0", "low", cpu="2.5")] + fill("mid", 4)
    ssn = open_at(spec_of(tasks), conf(low=30), 1000.0)
    # room 2.5 cpu: 1.5, 0.5, -0.5 (Volcano only stops at zero), then the node is at 40% < 50
    assert shuffle(ssn) == ["h0", "h1", "h2", "h3"]


def test_best_effort_goes_first_among_equal_priority():
    tasks = [pod("g", "high", priority=1), pod("be", "high", priority=1, best_effort=True),
             pod("lo", "high", priority=0)] + fill("high", 6, "f", priority=3) + fill("low", 1)
    ssn = open_at(spec_of(tasks), conf(low=30, target=60), 1000.0)
    # 7 cpu used on high (70%): lo, then be (frees nothing), then g -> 60%, then f-0 -> 50% < 60
    assert shuffle(ssn) == ["lo", "be", "g", "f-0"]


def test_highest_node_first():
    tasks = fill("h9", 9) + fill("h7", 7) + fill("low", 2)
    ssn = open_at(spec_of(tasks, nodes=("low", "h7", "h9")), conf(low=30), 1000.0)
    # room 3 cpu: all taken from the 90% node, though it stays above target
    assert shuffle(ssn) == ["h9-0", "h9-1", "h9-2"]


@pytest.mark.parametrize("tasks,nodes", [
    (fill("a", 8) + fill("b", 8), ("a", "b")),  # no low node
    (fill("a", 1) + fill("b", 1), ("a", "b")),  # every node is low
    (fill("a", 1) + fill("b", 4), ("a", "b")),  # no node above target
])
def test_nothing_without_both_low_and_high_nodes(tasks, nodes):
    assert shuffle(open_at(spec_of(tasks, nodes=nodes), conf(low=30), 1000.0)) == []


def test_unschedulable_node_is_never_low():
    spec = spec_of(fill("high", 8) + fill("low", 1), nodes=("low", "high"))
    spec.nodes[0].unschedulable = True
    assert shuffle(open_at(spec, conf(low=30), 1000.0)) == []
    spec.nodes[0].unschedulable = False
    assert shuffle(open_at(spec, conf(low=30), 1000.0)) != []


def test_only_candidate_tasks_matched_by_name():
    tasks = fill("high", 6) + [pod("done", "high", priority=0, phase="Succeeded")] + \
        [pod("high-7", "high", priority=0, job="j2")] + fill("low", 1)
    ssn = open_at(spec_of(tasks, jobs=("j1", "j2")), conf(low=30), 1000.0)
    candidates = [t for t in ssn.jobs["default/j1"].tasks.values()
                  if t.name != "high-0" and t.status == TaskStatus.Running]
    got = [t.name for t in ssn.victim_tasks(candidates)]
    # 70% used (the finished "done" holds nothing); "done" and high-7 (another job) are no candidates,
    # nor is high-0: they are passed over, and the rest go in order until the node is below target:
    # 60, 50 (still >= 50), 40
    assert got == ["high-1", "high-2", "high-3"]
    # the name alone matches: a candidate of another namespace with a high pod's name is taken
    ssn = open_at(spec_of(tasks + [pod("high-0", "low", ns="other")], jobs=("j1", "j2")), conf(low=30), 1000.0)
    other = next(t for t in ssn.nodes["low"].tasks.values() if t.namespace == "other")
    got = ssn.victim_tasks([other])
    assert got == [other]


def test_default_thresholds_do_nothing():
    ssn = open_at(spec_of(fill("high", 10) + fill("low", 1)), conf(strategies=""), 1000.0)
    assert shuffle(ssn) == []  # 100% is not above the default target of 100%


def test_unknown_strategy_registers_nothing():
    ssn = open_at(spec_of(fill("high", 8) + fill("low", 1)),
                  conf(strategies="\n      strategies:\n      - name: removeDuplicates"), 1000.0)
    assert shuffle(ssn) == []


# -- interval ------------------------------------------------------------------------------------------------
def test_runs_once_per_interval_from_the_first_session():
    spec = spec_of(fill("high", 8) + fill("low", 1))
    state: dict = {}
    assert shuffle(open_at(spec, conf(low=30), 1000.0, state)) == []  # the scheduler's start
    assert shuffle(open_at(spec, conf(low=30), 1300.0, state)) == []  # exactly 5m later: not yet
    assert shuffle(open_at(spec, conf(low=30), 1300.5, state)) != []
    assert state["rescheduling"]["last_run_at"] == 1300.5
    assert shuffle(open_at(spec, conf(low=30), 1400.0, state)) == []
    assert shuffle(open_at(spec, conf(low=30, interval="1m"), 1400.0, state)) != []
