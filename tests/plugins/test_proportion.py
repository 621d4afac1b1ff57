"""proportion: weighted water-filling of deserved, queue order, overuse, admission and reclaim."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from busched.api.objects import ClusterSpec
from busched.api.resource import Resource, exceeded_part
from busched.api.resource import res_max as go_max
from busched.builtin import open_session
from busched.cache.cache import Cache
from busched.framework.config import parse_config
from busched.framework.session import Session
from busched.framework.statement import Statement

GI = 1024**3


def session(c: dict[str, Any]) -> Session:
    cache = Cache()
    cache.load(msgspec.convert(c, ClusterSpec))
    config = parse_config({"actions": "", "tiers": [{"plugins": [{"name": "proportion"}]}]})
    return open_session(cache.snapshot(), config)


def task(name: str, job: str, cpu: str = "0", mem: str = "0", node: str = "") -> dict[str, Any]:
    t: dict[str, Any] = {"name": name, "namespace": "ns", "job": job, "requests": {"cpu": cpu, "memory": mem}}
    if node:
        t.update(node=node, phase="Running")
    return t


def cluster(queues: list[dict[str, Any]], jobs: list[dict[str, Any]], tasks: list[dict[str, Any]],
            cpu: str = "12", mem: str = "12Gi") -> dict[str, Any]:
    return {
        "queues": queues,
        "nodes": [{"name": "n1", "allocatable": {"cpu": cpu, "memory": mem, "pods": 100}}],
        "jobs": [{"namespace": "ns", "minMember": 1, "phase": "Running", **j} for j in jobs],
        "tasks": tasks,
    }


def deserved(ssn: Session, q: str) -> tuple[float, float]:
    d = ssn.plugins["proportion"].queue_opts[q].deserved
    return d.cpu, d.memory


def two_big(q1: dict[str, Any], q2: dict[str, Any]) -> Session:
    return session(cluster([{"name": "q1", **q1}, {"name": "q2", **q2}],
                           [{"name": "j1", "queue": "q1"}, {"name": "j2", "queue": "q2"}],
                           [task("t1", "j1", "12", "12Gi"), task("t2", "j2", "12", "12Gi")]))


# -- helpers ----------------------------------------------------------------------------------
def test_exceeded_part_keeps_only_exceeding_scalars():
    got = exceeded_part(Resource(3000, 10, {"a": 5.0, "b": 1.0}), Resource(1000, 20, {"b": 2.0, "c": 1.0}))
    assert (got.cpu, got.memory) == (2000, 0)
    assert got.scalars == {"a": 5.0}


def test_go_max_drops_negative_scalars():
    got = go_max(Resource(1, 5, {"a": -1.0, "b": 2.0}), Resource(3, 4, {"b": 1.0, "c": 0.0}))
    assert (got.cpu, got.memory) == (3, 5)
    assert got.scalars == {"b": 2.0, "c": 0.0}


# -- deserved -----------------------------------------------------------------------------------
def test_deserved_splits_by_weight():
    ssn = two_big({"weight": 1}, {"weight": 2})
    assert deserved(ssn, "q1") == pytest.approx((4000, 4 * GI))
    assert deserved(ssn, "q2") == pytest.approx((8000, 8 * GI))


def test_capability_caps_and_the_rest_goes_to_others():
    ssn = two_big({"capability": {"cpu": "2"}}, {})
    # q1 stops at cpu 2 (memory unbounded), q2 takes the cpu q1 could not
    assert deserved(ssn, "q1") == pytest.approx((2000, 6 * GI))
    assert deserved(ssn, "q2") == pytest.approx((10000, 6 * GI))


def test_guarantee_raises_deserved_and_shrinks_others_real_capability():
    ssn = two_big({"guarantee": {"cpu": "8"}}, {})
    assert deserved(ssn, "q1") == pytest.approx((8000, 6 * GI))
    assert deserved(ssn, "q2") == pytest.approx((4000, 6 * GI))
    assert ssn.plugins["proportion"].queue_opts["q2"].real_capability.cpu == pytest.approx(4000)


def test_request_caps_deserved_and_the_rest_is_redistributed():
    ssn = session(cluster([{"name": "q1"}, {"name": "q2"}],
                          [{"name": "j1", "queue": "q1"}, {"name": "j2", "queue": "q2"}],
                          [task("t1", "j1", "2", "2Gi"), task("t2", "j2", "12", "12Gi")]))
    assert deserved(ssn, "q1") == pytest.approx((2000, 2 * GI))
    assert deserved(ssn, "q2") == pytest.approx((10000, 10 * GI))


def test_queue_without_jobs_gets_no_attribute():
    c = cluster([{"name": "q1"}, {"name": "empty"}], [{"name": "j1", "queue": "q1"}], [task("t1", "j1", "1", "1Gi")])
    ssn = session(c)
    assert set(ssn.plugins["proportion"].queue_opts) == {"q1"}
    assert not ssn.overused(ssn.queues["empty"])


# -- queue order ----------------------------------------------------------------------------------
def test_queue_order_priority_then_share():
    c = cluster([{"name": "q1", "priority": 5}, {"name": "q2", "priority": 1}, {"name": "q3", "priority": 1}],
                [{"name": "j1", "queue": "q1"}, {"name": "j2", "queue": "q2"}, {"name": "j3", "queue": "q3"}],
                [task("r1", "j1", "3", "3Gi", node="n1"), task("r2", "j2", "2", "2Gi", node="n1"),
                 task("p2", "j2", "4", "4Gi"), task("p3", "j3", "4", "4Gi")])
    ssn = session(c)
    q1, q2, q3 = (ssn.queues[q] for q in ("q1", "q2", "q3"))
    assert ssn.queue_order_fn(q1, q2) and ssn.queue_order_fn(q1, q3)  # priority first
    assert ssn.queue_order_fn(q3, q2)  # same priority: q3 has share 0, q2 > 0
    assert ssn.plugins["proportion"].queue_opts["q2"].share > 0


# -- overused / reclaimable ------------------------------------------------------------------------
def overloaded() -> Session:
    c = cluster([{"name": "q1"}, {"name": "q2"}], [{"name": "j1", "queue": "q1"}, {"name": "j2", "queue": "q2"}],
                [task(f"r{i}", "j1", "1", "1Gi", node="n1") for i in range(4)] + [task("p", "j2", "2", "2Gi")],
                cpu="4", mem="4Gi")
    return session(c)


def test_overused_when_allocated_reaches_deserved():
    ssn = overloaded()
    assert deserved(ssn, "q1") == pytest.approx((2000, 2 * GI))
    assert ssn.overused(ssn.queues["q1"])
    assert not ssn.overused(ssn.queues["q2"])


def test_reclaimable_takes_victims_until_queue_is_back_within_deserved():
    ssn = overloaded()
    reclaimer = ssn.jobs["ns/j2"].tasks["ns-p"]
    cands = sorted(ssn.jobs["ns/j1"].tasks.values(), key=lambda t: t.uid)
    victims = ssn.reclaimable(reclaimer, cands)
    assert [v.uid for v in victims] == ["ns-r0", "ns-r1"]


# -- allocatable -------------------------------------------------------------------------------------
def allocatable_case(state: str = "Open") -> Session:
    c = cluster([{"name": "q1", "state": state}, {"name": "q2"}],
                [{"name": "j1", "queue": "q1"}, {"name": "j2", "queue": "q2"}],
                [task("r", "j1", "4", "1Gi", node="n1"), task("c", "j1", cpu="1"), task("m", "j1", mem="1Gi"),
                 task("big", "j2", "8", "8Gi")], cpu="8", mem="8Gi")
    return session(c)


def test_allocatable_compares_only_requested_dimensions():
    ssn = allocatable_case()
    assert deserved(ssn, "q1") == pytest.approx((4000, 2 * GI))
    q1, j1 = ssn.queues["q1"], ssn.jobs["ns/j1"]
    assert not ssn.allocatable(q1, j1.tasks["ns-c"])  # cpu 4 + 1 > 4
    assert ssn.allocatable(q1, j1.tasks["ns-m"])  # memory 1 + 1 <= 2, cpu not asked for
    assert not ssn.preemptive(q1, [j1.tasks["ns-m"], j1.tasks["ns-c"]])
    assert ssn.preemptive(q1, [j1.tasks["ns-m"]])


def test_closed_queue_is_not_allocatable():
    ssn = allocatable_case("Closed")
    assert not ssn.allocatable(ssn.queues["q1"], ssn.jobs["ns/j1"].tasks["ns-m"])


# -- enqueue ----------------------------------------------------------------------------------------
def enqueue_case() -> Session:
    c = cluster([{"name": "q1", "capability": {"cpu": "2", "memory": "2Gi"}}, {"name": "q3", "state": "Closed"}],
                [{"name": "run", "queue": "q1", "minResources": {"cpu": "1", "memory": "1Gi"}},
                 {"name": "pj1", "queue": "q1", "phase": "Pending", "minResources": {"cpu": "1"}},
                 {"name": "pj2", "queue": "q1", "phase": "Pending", "minResources": {"cpu": "1"}},
                 {"name": "pjm", "queue": "q1", "phase": "Pending", "minResources": {"memory": "512Mi"}},
                 {"name": "free", "queue": "q1", "phase": "Pending"},
                 {"name": "closed", "queue": "q3", "phase": "Pending"}],
                [task("r", "run", "1", "1Gi", node="n1")], cpu="4", mem="4Gi")
    return session(c)


def test_enqueue_against_real_capability_with_accounting():
    ssn = enqueue_case()
    j = ssn.jobs
    assert ssn.job_enqueueable(j["ns/pj1"])  # 1 held + 1 <= 2
    ssn.job_enqueued(j["ns/pj1"])
    assert ssn.plugins["proportion"].queue_opts["q1"].inqueue.cpu == pytest.approx(1000)
    assert not ssn.job_enqueueable(j["ns/pj2"])  # 1 held + 1 inqueue + 1 > 2
    assert ssn.job_enqueueable(j["ns/pjm"])  # memory only: 1Gi + 512Mi <= 2Gi
    assert ssn.job_enqueueable(j["ns/free"])  # no minResources


def test_closed_queue_rejects_enqueue():
    ssn = enqueue_case()
    assert not ssn.job_enqueueable(ssn.jobs["ns/closed"])


def test_inqueue_job_reserves_only_what_is_not_yet_allocated():
    c = cluster([{"name": "q1"}], [{"name": "inq", "queue": "q1", "phase": "Inqueue", "minMember": 2,
                                    "minResources": {"cpu": "2", "memory": "2Gi"}}],
                [task("r", "inq", "1", "1Gi", node="n1"), task("p", "inq", "1", "1Gi")])
    ssn = session(c)
    inq = ssn.plugins["proportion"].queue_opts["q1"].inqueue
    assert (inq.cpu, inq.memory) == (1000, GI)


# -- events ----------------------------------------------------------------------------------------
def test_event_handlers_update_allocated_and_share():
    ssn = two_big({}, {})
    attr = ssn.plugins["proportion"].queue_opts["q1"]
    assert attr.share == 0.0
    stmt = Statement(ssn)
    t = ssn.jobs["ns/j1"].tasks["ns-t1"]
    stmt.allocate(t, "n1")
    assert attr.allocated.cpu == pytest.approx(12000)
    assert attr.share == pytest.approx(2.0)  # 12 / 6
    stmt.discard()
    assert attr.allocated.cpu == 0 and attr.share == 0.0


def test_task_allocatable_is_queue_allocatable_of_one():
    """The one-task check reads the sums off; it answers as queue_allocatable(q, [task]) does."""
    import random
    from types import SimpleNamespace

    from busched.api.queue import QueueState
    from busched.api.task import TaskInfo
    from busched.plugins.proportion import ProportionPlugin

    rng = random.Random(11)
    values = [0.0, 0.5, 1.0, 2.0, 1000.0, 1000.5]
    names = ["pods", "nvidia.com/gpu"]

    def res() -> Resource:
        return Resource(rng.choice(values), rng.choice(values),
                        {n: rng.choice(values) for n in names if rng.random() < 0.5})

    plugin = ProportionPlugin()
    q = SimpleNamespace(uid="q", state=QueueState.Open)
    for _ in range(3000):
        plugin.queue_opts = {"q": SimpleNamespace(allocated=res(), deserved=res())}
        r = res()
        t = TaskInfo(uid="ns-t", name="t", namespace="ns", job="ns/j", resreq=r, init_resreq=r.clone())
        assert plugin.task_allocatable(q, t) == plugin.queue_allocatable(q, [t])
