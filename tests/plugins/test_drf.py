"""drf: dominant resource fairness job order, preemption, shares kept current; hierarchical DRF."""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest

from busched.api.objects import ClusterSpec
from busched.api.resource import Resource
from busched.builtin import open_session
from busched.cache.cache import Cache
from busched.framework import points
from busched.framework.config import parse_config
from busched.framework.session import Session
from busched.framework.shares import calculate_share, calculate_share_reference, share_of
from busched.framework.statement import Statement


def session(c: dict[str, Any], plugins: list[dict[str, Any]] | None = None) -> Session:
    cache = Cache()
    cache.load(msgspec.convert(c, ClusterSpec))
    tiers = [{"plugins": plugins or [{"name": "drf"}]}]
    return open_session(cache.snapshot(), parse_config({"actions": "", "tiers": tiers}))


def running(name: str, job: str, cpu: str, mem: str) -> dict[str, Any]:
    return {"name": name, "namespace": "ns", "job": job, "node": "n1", "phase": "Running",
            "requests": {"cpu": cpu, "memory": mem}}


def pending(name: str, job: str, cpu: str, mem: str) -> dict[str, Any]:
    return {"name": name, "namespace": "ns", "job": job, "requests": {"cpu": cpu, "memory": mem}}


def flat() -> dict[str, Any]:
    # total cpu 10, memory 10Gi: A holds cpu 4 (share .4), B memory 3Gi (share .3), C nothing
    return {
        "queues": [{"name": "q"}],
        "nodes": [{"name": "n1", "allocatable": {"cpu": "10", "memory": "10Gi", "pods": 100}}],
        "jobs": [{"name": n, "namespace": "ns", "queue": "q", "phase": "Running"} for n in ("a", "b", "c")],
        "tasks": [running("a1", "a", "2", "1Gi"), running("a2", "a", "2", "1Gi"), running("b1", "b", "1", "3Gi"),
                  pending("c1", "c", "1", "1Gi")],
    }


def test_share_helpers():
    assert share_of(0, 0) == 0.0
    assert share_of(1, 0) == 1.0
    assert share_of(1, 4) == 0.25
    total = Resource(10000, 100.0, {"pods": 10.0})
    assert calculate_share(Resource(2000, 50.0), total) == ("memory", 0.5)
    assert calculate_share(Resource(), total) == ("", 0.0)


def test_calculate_share_matches_reference():
    """The field-by-field walk gives what the walk over ``total.names()`` gives, ties and zeros included."""
    rng = random.Random(7)
    values = [0.0, 0.05, 0.1, 1.0, 3.0, 1000.0, 4096.0]
    names = ["pods", "nvidia.com/gpu", "example.com/foo"]
    for _ in range(3000):
        def res() -> Resource:
            scalars = {n: rng.choice(values) for n in names if rng.random() < 0.5}
            return Resource(rng.choice(values), rng.choice(values), scalars)
        allocated, total = res(), res()
        assert calculate_share(allocated, total) == calculate_share_reference(allocated, total)


def test_shares_at_open_and_job_order():
    ssn = session(flat())
    drf = ssn.plugins["drf"]
    assert drf.share("ns/a") == pytest.approx(0.4)
    assert drf.share("ns/b") == pytest.approx(0.3)
    assert drf.share("ns/c") == 0.0
    a, b, c = (ssn.jobs[f"ns/{x}"] for x in "abc")
    assert ssn.job_order_fn(c, b) and ssn.job_order_fn(b, a)
    assert not ssn.job_order_fn(a, b)
    assert drf._job_order(a, a) == 0


def test_preemptable_keeps_victim_share_at_least_preemptor_share():
    ssn = session(flat())
    jobs = ssn.jobs
    preemptor = jobs["ns/c"].tasks["ns-c1"]  # share after allocation: cpu 1/10 = .1
    cands = [jobs["ns/a"].tasks["ns-a1"], jobs["ns/a"].tasks["ns-a2"], jobs["ns/b"].tasks["ns-b1"]]
    victims = ssn.preemptable(preemptor, cands)
    # a after losing a1: .2 >= .1 -> victim; after also losing a2: 0 < .1 -> kept; b after losing b1: 0
    assert [v.uid for v in victims] == ["ns-a1"]


def test_preemptable_equal_shares_within_delta_are_victims():
    c = flat()
    c["tasks"] = [running("a1", "a", "1", "0"), running("a2", "a", "1", "0"), pending("c1", "c", "1", "0")]
    ssn = session(c)
    victims = ssn.preemptable(ssn.jobs["ns/c"].tasks["ns-c1"], [ssn.jobs["ns/a"].tasks["ns-a1"]])
    assert [v.uid for v in victims] == ["ns-a1"]  # .1 == .1


def test_event_handlers_track_allocation_and_undo():
    ssn = session(flat())
    drf = ssn.plugins["drf"]
    task = ssn.jobs["ns/c"].tasks["ns-c1"]
    stmt = Statement(ssn)
    stmt.allocate(task, "n1")
    assert drf.share("ns/c") == pytest.approx(0.1)
    stmt.discard()
    assert drf.share("ns/c") == 0.0
    a1 = ssn.jobs["ns/a"].tasks["ns-a1"]
    stmt.evict(a1, "test")
    assert drf.share("ns/a") == pytest.approx(0.2)


def test_hierarchy_is_off_unless_enabled():
    off = session(flat())
    assert not off.has(points.QUEUE_ORDER) and not off.has(points.RECLAIMABLE)
    on = session(flat(), [{"name": "drf", "enableHierarchy": True}])
    assert on.has(points.QUEUE_ORDER) and on.has(points.RECLAIMABLE)


def hdrf_cluster(a_tasks: list[dict[str, Any]], b_tasks: list[dict[str, Any]]) -> dict[str, Any]:
    def q(name: str, path: str, weights: str) -> dict[str, Any]:
        return {"name": name, "annotations": {"volcano.sh/hierarchy": path, "volcano.sh/hierarchy-weights": weights}}

    return {
        "queues": [q("qa", "root/a", "1/1"), q("qb", "root/b", "1/2")],
        "nodes": [{"name": "n1", "allocatable": {"cpu": "10", "memory": "10Gi", "pods": 100}}],
        "jobs": [{"name": "ja", "namespace": "ns", "queue": "qa", "phase": "Running"},
                 {"name": "jb", "namespace": "ns", "queue": "qb", "phase": "Running"}],
        "tasks": a_tasks + b_tasks,
    }


HDRF = [{"name": "drf", "enableHierarchy": True}]


def test_hierarchical_queue_order_divides_share_by_level_weight():
    c = hdrf_cluster([running("a1", "ja", "2", "0"), pending("a2", "ja", "2", "0")],
                     [running("b1", "jb", "3", "0"), pending("b2", "jb", "2", "0")])
    ssn = session(c, HDRF)
    qa, qb = ssn.queues["qa"], ssn.queues["qb"]
    # a: .2 / 1 ; b: .3 / 2 = .15 -> b first, although its plain share is larger
    assert ssn.queue_order_fn(qb, qa)
    assert not ssn.queue_order_fn(qa, qb)


def test_saturated_queue_goes_last():
    # qa's job holds all it asks for: saturated, so it sorts after qb despite the lower share
    c = hdrf_cluster([running("a1", "ja", "1", "0")],
                     [running("b1", "jb", "8", "0"), pending("b2", "jb", "1", "0")])
    ssn = session(c, HDRF)
    assert ssn.queue_order_fn(ssn.queues["qb"], ssn.queues["qa"])


def test_hierarchical_reclaimable_evaluates_each_candidate_alone():
    c = hdrf_cluster([running("a1", "ja", "2", "0"), running("a2", "ja", "2", "0"), pending("a3", "ja", "2", "0")],
                     [running("b1", "jb", "1", "0"), pending("b2", "jb", "1", "0"), pending("b3", "jb", "1", "0")])
    ssn = session(c, HDRF)
    reclaimer = ssn.jobs["ns/jb"].tasks["ns-b2"]
    cands = [ssn.jobs["ns/ja"].tasks["ns-a1"], ssn.jobs["ns/ja"].tasks["ns-a2"]]
    # with the reclaimer b is .2 / 2 = .1; a without one task is .2 -> both candidates are victims
    # (b still wants b3, so it is not saturated)
    victims = ssn.reclaimable(reclaimer, cands)
    assert sorted(v.uid for v in victims) == ["ns-a1", "ns-a2"]
    # the tree is left as it was
    assert ssn.queue_order_fn(ssn.queues["qb"], ssn.queues["qa"])
    assert ssn.plugins["drf"].total_allocated.cpu == pytest.approx(5000)


def test_reclaimer_queue_that_would_be_saturated_takes_nothing():
    # with b2 the job holds all it asks for: saturated queues sort last, so nothing is reclaimed
    c = hdrf_cluster([running("a1", "ja", "2", "0"), running("a2", "ja", "2", "0"), pending("a3", "ja", "2", "0")],
                     [running("b1", "jb", "1", "0"), pending("b2", "jb", "1", "0")])
    ssn = session(c, HDRF)
    assert ssn.reclaimable(ssn.jobs["ns/jb"].tasks["ns-b2"], [ssn.jobs["ns/ja"].tasks["ns-a1"]]) == []


def test_hierarchical_reclaim_refuses_when_reclaimer_queue_would_lead():
    c = hdrf_cluster([running("a1", "ja", "1", "0"), pending("a2", "ja", "1", "0")],
                     [running("b1", "jb", "6", "0"), pending("b2", "jb", "2", "0"), pending("b3", "jb", "1", "0")])
    # with b2, b would be at .8 / 2 = .4 against a's 0 without a1: b would lead, so no victim
    ssn = session(c, HDRF)
    victims = ssn.reclaimable(ssn.jobs["ns/jb"].tasks["ns-b2"], [ssn.jobs["ns/ja"].tasks["ns-a1"]])
    assert victims == []


def test_same_allocation_shares_one_attr_until_one_changes():
    """Untouched jobs with equal allocations share one attr at open (the fast path): each share is
    what the job's own attr gives, and an allocation to one job changes only that job's share."""
    c = flat()
    c["jobs"] += [{"name": n, "namespace": "ns", "queue": "q", "phase": "Running"} for n in ("d", "e")]
    c["tasks"] += [running("d1", "d", "1", "3Gi"), running("e1", "e", "1", "3Gi")]
    ssn = session(c)
    drf = ssn.plugins["drf"]
    attrs = drf.job_attrs
    assert attrs["ns/b"] is attrs["ns/d"] is attrs["ns/e"]
    for uid, job in ssn.jobs.items():
        own = drf._attr_of(job)
        assert (attrs[uid].share, attrs[uid].dominant) == (own.share, own.dominant)
        assert attrs[uid].allocated.to_dict() == own.allocated.to_dict()
    task = next(iter(ssn.jobs["ns/d"].tasks.values()))
    drf._on_event(ssn, task, +1)
    assert drf.share("ns/d") == pytest.approx(0.6)
    assert drf.share("ns/b") == drf.share("ns/e") == pytest.approx(0.3)
