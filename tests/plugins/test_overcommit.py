"""overcommit: enqueue admission against total * factor - used."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from busched.api.job import QUEUE_ALLOCATION_GATE
from busched.api.objects import ClusterSpec
from busched.api.resource import Resource
from busched.builtin import open_session
from busched.cache.cache import Cache
from busched.framework.config import parse_config
from busched.framework.session import Session

GI = 1024**3


def session(c: dict[str, Any], arguments: dict[str, Any] | None = None) -> Session:
    cache = Cache()
    cache.load(msgspec.convert(c, ClusterSpec))
    plugin: dict[str, Any] = {"name": "overcommit"}
    if arguments is not None:
        plugin["arguments"] = arguments
    return open_session(cache.snapshot(), parse_config({"actions": "", "tiers": [{"plugins": [plugin]}]}))


def base(jobs: list[dict[str, Any]], tasks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "queues": [{"name": "q"}],
        "nodes": [{"name": "n1", "allocatable": {"cpu": "2", "memory": "4Gi"}},
                  {"name": "n2", "allocatable": {"cpu": "4", "memory": "16Gi"}}],
        "jobs": [{"namespace": "ns", "queue": "q", "minMember": 1, **j} for j in jobs],
        "tasks": tasks or [],
    }


def enq(ssn: Session, job: str) -> bool:
    return ssn.job_enqueueable(ssn.jobs[job])


def test_default_factor_admits_up_to_one_point_two_times_total():
    # total cpu 6 -> 7.2 with the default factor
    ssn = session(base([{"name": "fits", "minResources": {"cpu": "7", "memory": "1Gi"}},
                        {"name": "big", "minResources": {"cpu": "7500m", "memory": "1Gi"}}], []))
    assert enq(ssn, "ns/fits")
    assert not enq(ssn, "ns/big")


def test_factor_argument_and_invalid_factor_falls_back_to_default():
    c = base([{"name": "j", "minResources": {"cpu": "11"}}])
    assert enq(session(c, {"overcommit-factor": 2}), "ns/j")  # 12 >= 11, int accepted
    assert not enq(session(c, {"overcommit-factor": 1.5}), "ns/j")  # 9 < 11
    assert not enq(session(c, {"overcommit-factor": 0.8}), "ns/j")  # < 1: default 1.2 -> 7.2
    ssn = session(c, {"overcommit-factor": 0.8})
    assert ssn.plugins["overcommit"].factor == pytest.approx(1.2)


def test_used_resources_reduce_idle():
    tasks = [{"name": "r", "namespace": "ns", "job": "run", "node": "n2", "phase": "Running",
              "requests": {"cpu": "4", "memory": "1Gi"}}]
    ssn = session(base([{"name": "run", "phase": "Running"}, {"name": "j", "minResources": {"cpu": "4"}}], tasks))
    assert not enq(ssn, "ns/j")  # 7.2 - 4 = 3.2 < 4
    ssn2 = session(base([{"name": "run", "phase": "Running"}, {"name": "j", "minResources": {"cpu": "3"}}], tasks))
    assert enq(ssn2, "ns/j")


def test_only_requested_dimensions_are_compared():
    tasks = [{"name": "r", "namespace": "ns", "job": "run", "node": "n2", "phase": "Running",
              "requests": {"cpu": "4"}}]
    ssn = session(base([{"name": "run", "phase": "Running", "minResources": {"cpu": "8"}},
                        {"name": "mem", "minResources": {"memory": "1Gi"}},
                        {"name": "cpu", "minResources": {"cpu": "100m"}}], tasks))
    # cpu is over: inqueue 8 - 4 = 4 > idle 7.2 - 4, yet a memory-only job is admitted
    assert not enq(ssn, "ns/cpu")
    assert enq(ssn, "ns/mem")


def test_job_without_min_resources_is_always_admitted():
    ssn = session(base([{"name": "huge", "minResources": {"cpu": "100"}, "phase": "Inqueue"}, {"name": "free"}]))
    assert enq(ssn, "ns/free")


def test_inqueue_jobs_at_open_and_enqueued_jobs_count():
    ssn = session(base([{"name": "inq", "phase": "Inqueue", "minResources": {"cpu": "4"}},
                        {"name": "a", "minResources": {"cpu": "3"}},
                        {"name": "b", "minResources": {"cpu": "1"}}]))
    assert enq(ssn, "ns/a")  # 4 + 3 <= 7.2
    ssn.job_enqueued(ssn.jobs["ns/a"])
    assert not enq(ssn, "ns/b")  # 4 + 3 + 1 > 7.2
    assert ssn.plugins["overcommit"].inqueue.cpu == pytest.approx(7000)


def test_running_job_reserves_only_what_it_has_not_yet_got():
    tasks = [{"name": "r", "namespace": "ns", "job": "run", "node": "n2", "phase": "Running",
              "requests": {"cpu": "1"}}]
    ssn = session(base([{"name": "run", "phase": "Running", "minResources": {"cpu": "3"}}], tasks))
    # used 1, inqueue 3 - 1 = 2
    assert ssn.plugins["overcommit"].inqueue.cpu == pytest.approx(2000)
    assert ssn.plugins["overcommit"].idle.cpu == pytest.approx(6000 * 1.2 - 1000)


def test_inqueue_resource_helper():
    ssn = session(base([{"name": "j", "minResources": {"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": "2",
                                                       "pods": "3"}}]))
    job = ssn.jobs["ns/j"]
    got = job.inqueue_resource(Resource(500, 4 * GI, {"pods": 1.0}))
    assert got.cpu == 1500 and got.memory == 0
    assert got.scalars == {"nvidia.com/gpu": 2000.0, "pods": 2.0}


def test_scheduling_gated_tasks_are_deducted_except_queue_allocation_gate():
    tasks = [{"name": "g", "namespace": "ns", "job": "j", "requests": {"cpu": "1"}, "schedulingGates": ["x"]},
             {"name": "v", "namespace": "ns", "job": "j", "requests": {"cpu": "1"},
              "schedulingGates": [QUEUE_ALLOCATION_GATE]}]
    ssn = session(base([{"name": "j", "minResources": {"cpu": "3"}}], tasks))
    job = ssn.jobs["ns/j"]
    assert job.deduct_sch_gated(job.get_min_resources()).cpu == pytest.approx(2000)
    assert job.deduct_sch_gated(Resource(500)).cpu == 0.0
