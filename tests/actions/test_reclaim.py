"""reclaim: starving jobs of queues within their share take back from queues over theirs."""

from __future__ import annotations

import pytest

from busched.actions.reclaim import ReclaimAction
from busched.api.snapshot import Shard
from busched.api.task import TaskStatus
from tests.actions.evict_helpers import (
    RECLAIM_TIER,
    config,
    evicted,
    job,
    node,
    pending,
    pipelined,
    running,
    session,
    spec,
    state,
)

PCS = [{"name": "high", "value": 1000}, {"name": "low", "value": 10}]
QUEUES = [{"name": "q1"}, {"name": "q2"}]
# q2 deserves nearly everything; q3 may not be reclaimed from.
QUEUES3 = [{"name": "q1"}, {"name": "q2", "weight": 10}, {"name": "q3", "reclaimable": False}]


def run(cluster, tier=None, shard=None):
    ssn = session(cluster, config("reclaim", tier or RECLAIM_TIER), shard=shard)
    ReclaimAction().execute(ssn)
    return ssn


def _full_q1(n_tasks=4, cpu="4", extra_tasks=(), extra_jobs=(), queues=QUEUES):
    tasks = [running(f"v{i}", "pg1", "n1", "1", priority=i) for i in range(1, n_tasks + 1)]
    return spec([node("n1", cpu)], tasks + list(extra_tasks),
                [job("pg1", 0, phase="Running", priorityClassName="low"), *extra_jobs],
                queues=queues, priority_classes=PCS)


def test_takes_back_from_the_queue_over_its_share():
    c = _full_q1(extra_tasks=[pending("p", "pg2", "1")], extra_jobs=[job("pg2", 1, queue="q2")])
    ssn = run(c)
    assert evicted(ssn) == ["c1/v1"]  # the lowest-priority task of the overusing queue
    assert pipelined(ssn) == {"c1/p": "n1"}


def test_fit_checked_before_each_eviction():
    # Two cpus wanted: exactly two victims, lowest priorities first.
    c = _full_q1(extra_tasks=[pending("p", "pg2", "2")], extra_jobs=[job("pg2", 1, queue="q2")])
    assert evicted(run(c)) == ["c1/v1", "c1/v2"]


def test_nothing_evicted_when_the_task_already_fits():
    c = _full_q1(cpu="6", extra_tasks=[pending("p", "pg2", "2")], extra_jobs=[job("pg2", 1, queue="q2")])
    ssn = run(c)
    assert evicted(ssn) == []
    assert pipelined(ssn) == {"c1/p": "n1"}


def test_tasks_of_the_same_queue_are_not_reclaimed():
    c = _full_q1(extra_tasks=[pending("p", "pg2", "1")], extra_jobs=[job("pg2", 1, queue="q1")])
    ssn = run(c)
    assert evicted(ssn) == []
    assert pipelined(ssn) == {}


def test_non_reclaimable_queue_and_non_preemptable_tasks_are_protected():
    queues = [{"name": "q1", "reclaimable": False}, {"name": "q2"}]
    c = _full_q1(extra_tasks=[pending("p", "pg2", "1")], extra_jobs=[job("pg2", 1, queue="q2")], queues=queues)
    assert evicted(run(c)) == []
    c2 = spec([node("n1", "2")],
              [running("locked", "pg1", "n1", "1", labels={"volcano.sh/preemptable": "false"}),
               running("free", "pg1", "n1", "1", priority=50), pending("p", "pg2", "1")],
              [job("pg1", 0, phase="Running"), job("pg2", 1, queue="q2")], queues=QUEUES)
    assert evicted(run(c2)) == ["c1/free"]


def test_closed_queue_reclaims_nothing():
    queues = [{"name": "q1"}, {"name": "q2", "state": "Closed"}]
    c = _full_q1(extra_tasks=[pending("p", "pg2", "1")], extra_jobs=[job("pg2", 1, queue="q2")], queues=queues)
    assert evicted(run(c)) == []


def test_overused_queue_reclaims_nothing():
    # q2 already holds more than its half: with overused on, it may not reclaim.
    c = spec([node("n1", "4")],
             [running("a", "pg1", "n1", "1"), running("b", "pg2", "n1", "3"), pending("p", "pg3", "1")],
             [job("pg1", 0, phase="Running"), job("pg2", 0, queue="q2", phase="Running"),
              job("pg3", 1, queue="q2")], queues=QUEUES)
    tier = [dict(p) for p in RECLAIM_TIER]
    tier[2]["enabledOverused"] = True
    assert evicted(run(c, tier)) == []


def test_only_the_node_where_reclaim_succeeds_commits_its_evictions():
    # n1's victim frees too little for the 3-cpu task: rolled back; n2's victim is enough.
    c = spec([node("n1", "2"), node("n2", "3")],
             [running("small", "pg1", "n1", "1"), running("locked", "pg-q3", "n1", "1"),
              running("big", "pg1", "n2", "3"), pending("p", "pg2", "3")],
             [job("pg1", 0, phase="Running"), job("pg-q3", 0, queue="q3", phase="Running"),
              job("pg2", 1, queue="q2")], queues=QUEUES3)
    ssn = run(c)
    assert evicted(ssn) == ["c1/big"]
    assert pipelined(ssn) == {"c1/p": "n2"}
    n1 = ssn.nodes["n1"]
    assert ssn.jobs["c1/pg1"].tasks["c1-small"].status == TaskStatus.Running
    assert n1.releasing.cpu == 0 and n1.idle.cpu == 0


def test_gang_that_cannot_pipeline_leaves_everything_as_it_was():
    # pg2 needs both tasks; q1 can only give up one cpu before it is within its share.
    c = spec([node("n1", "4")],
             [running("v1", "pg1", "n1", "1"), running("v2", "pg1", "n1", "1"),
              running("v3", "pg1", "n1", "1"), running("w", "pg-q2", "n1", "1"),
              pending("p1", "pg2", "1"), pending("p2", "pg2", "1")],
             [job("pg1", 0, phase="Running"), job("pg-q2", 0, queue="q2", phase="Running"),
              job("pg2", 2, queue="q2")], queues=QUEUES)
    tier = [dict(p) for p in RECLAIM_TIER]
    tier[1]["enableJobPipelined"] = True
    ssn = session(c, config("reclaim", tier))
    before = state(ssn)
    ReclaimAction().execute(ssn)
    assert evicted(ssn) == []
    assert state(ssn) == before


def test_preemption_policy_never_task_is_skipped_next_task_reclaims():
    c = _full_q1(extra_tasks=[pending("a-never", "pg2", "1", preemptionPolicy="Never"), pending("b", "pg2", "1")],
                 extra_jobs=[job("pg2", 2, queue="q2")])
    ssn = run(c)
    assert evicted(ssn) == ["c1/v1"]
    assert pipelined(ssn) == {"c1/b": "n1"}
    assert ssn.jobs["c1/pg2"].tasks["c1-a-never"].status == TaskStatus.Pending


@pytest.mark.parametrize("mode,expected", [("hard", ["c1/v1"]), ("soft", ["c1/v1"])])
def test_shard_nodes_first(mode, expected):
    c = spec([node("n2", "2"), node("n1", "2")],
             [running("v2", "pg1", "n2", "2"), running("v1", "pg1", "n1", "2"), pending("p", "pg2", "1")],
             [job("pg1", 1, phase="Running"), job("pg2", 1, queue="q2")], queues=QUEUES)
    ssn = run(c, shard=Shard(mode=mode, name="s", nodes=frozenset({"n1"})))
    assert evicted(ssn) == expected


def test_hard_shard_never_reclaims_outside():
    c = spec([node("n1", "2"), node("n2", "2")],
             [running("keep", "pg-q3", "n1", "2"), running("v2", "pg1", "n2", "2"), pending("p", "pg2", "1")],
             [job("pg1", 0, phase="Running"), job("pg-q3", 0, queue="q3", phase="Running"),
              job("pg2", 1, queue="q2")], queues=QUEUES3)
    assert evicted(run(c, shard=Shard(mode="hard", name="s", nodes=frozenset({"n1"})))) == []
    assert evicted(run(c, shard=Shard(mode="soft", name="s", nodes=frozenset({"n1"})))) == ["c1/v2"]
