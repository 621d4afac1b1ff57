"""`queue_totals.usage_alike` (one-task pending jobs' totals shared by the jobs made alike, only the requested
total added when the others are zeros) against `job_usage` (each job its own, all four added): the
same totals to the bit, scalar order included, and the same queue sums through `_add_one`, over
random written jobs of which many are alike."""

from __future__ import annotations

import random
import types

import pytest

from busched.api.job import JobInfo
from busched.api.resource import GO_INFINITY, Resource
from busched.api.task import TaskInfo, TaskStatus
from busched.framework import queue_totals, shares

_SCALARS = ("pods", "nvidia.com/gpu")


def _res(rng: random.Random) -> Resource:
    # few values, so that jobs come out alike
    scalars = {n: rng.choice((1.0, 0.5, GO_INFINITY)) for n in rng.sample(_SCALARS, rng.choice((0, 0, 1, 2)))}
    return Resource(rng.choice((0.0, 1000.0, 333.3, -0.0)), rng.choice((2.0**30, 1.0 / 3, 0.0)), scalars)


def _job(rng: random.Random, i: int) -> JobInfo:
    job = JobInfo(uid=f"ns/j{i}", name=f"j{i}", namespace="ns", queue="q", min_available=1,
                  has_podgroup=True, phase=rng.choice(("Pending", "Inqueue", "Running")))
    if rng.random() < 0.1:
        job.min_resources = _res(rng)
    n = rng.choice((1, 1, 1, 1, 2, 0))
    for k in range(n):
        r = _res(rng)
        status = TaskStatus.Pending if rng.random() < 0.7 else rng.choice(list(TaskStatus))
        job.add_task(TaskInfo(uid=f"ns-j{i}-{k}", name=f"j{i}-{k}", namespace="ns", job=job.uid, resreq=r,
                              init_resreq=r, status=status))
    if rng.random() < 0.1:  # a job whose allocated says something its one pending task does not
        job.allocated = _res(rng)
    job.written = True
    return job


def _state(u: shares.Usage) -> list:
    """Every float by its repr: -0.0 and +0.0 told apart, as the bits are."""
    return [(repr(r.cpu), repr(r.memory), [(n, repr(v)) for n, v in r.scalars.items()]) for r in u.parts()]


@pytest.mark.parametrize("seed", range(20))
def test_usage_alike_matches_job_usage(seed: int) -> None:
    rng = random.Random(seed)
    alike: dict = {}
    fast, plain = shares.Usage(), shares.Usage()
    shared = 0
    for i in range(200):
        job = _job(rng, i)
        before = len(alike)
        u = queue_totals._add_one(fast, job, alike)
        p = queue_totals._add_one(plain, job)
        assert u is not None and p is not None
        assert _state(u) == _state(p) == _state(shares.job_usage(job))
        assert _state(fast) == _state(plain)
        if len(alike) == before and any(u is v[0] for v in alike.values()):
            shared += 1
    assert shared > 20  # (the shapes recur: the shared path was taken)
    assert any(r.cpu or r.scalars for r in fast.parts())


def test_usages_shared_are_not_changed_by_the_sums() -> None:
    """A shared `Usage` is only read: summing many alike jobs leaves it as it was computed."""
    r = Resource(1000.0, 2.0**30, {"pods": 1.0})
    alike: dict = {}
    q = shares.Usage()
    jobs = []
    for i in range(5):
        job = JobInfo(uid=f"ns/j{i}", name=f"j{i}", namespace="ns", queue="q", has_podgroup=True, phase="Pending")
        job.add_task(TaskInfo(uid=f"t{i}", name=f"t{i}", namespace="ns", job=job.uid, resreq=r, init_resreq=r,
                              status=TaskStatus.Pending))
        job.written = True
        jobs.append(job)
    us = [queue_totals._add_one(q, j, alike) for j in jobs]
    assert all(u is us[0] for u in us)
    zero = ("0.0", "0.0", [])
    assert _state(us[0]) == [zero, ("1000.0", repr(2.0**30), [("pods", "1.0")]), zero, zero]
    assert _state(q)[1] == ("5000.0", repr(5 * 2.0**30), [("pods", "5.0")])


@pytest.mark.parametrize("seed", range(20))
def test_add_one_against_task_by_task(seed: int) -> None:
    """The shared totals and their additions (the requested-only one) against the task-by-task reference
    (`add_job_usage_plain`, `Resource.add` per task), which neither goes through."""
    rng = random.Random(seed)
    alike: dict = {}
    fast, ref = shares.Usage(), shares.Usage()
    for i in range(200):
        job = _job(rng, i)
        queue_totals._add_one(fast, job, alike)
        shares.add_job_usage_plain(ref, job)
        assert _state(fast) == _state(ref)


def _first_sum(jobs: list[JobInfo]) -> dict[str, shares.Usage]:
    ssn = types.SimpleNamespace(jobs={j.uid: j for j in jobs}, incremental=lambda key, objs, full, update: full(objs))
    return queue_totals.queue_usage(ssn)


@pytest.mark.parametrize("seed", range(20))
def test_queue_usage_alike_against_plain(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A first open's queue totals with the shapes shared, and with ``PLAIN_ALIKE`` (each job its own,
    `Resource.add`), over several queues: the same to the bit, and the task-by-task sum's."""
    rng = random.Random(seed)
    jobs = [_job(rng, i) for i in range(rng.randrange(1, 150))]
    for job in jobs:
        job.queue = rng.choice(("q0", "q1", "q2"))
    fast = {q: _state(u) for q, u in _first_sum(jobs).items()}
    monkeypatch.setattr(queue_totals, "PLAIN_ALIKE", True)
    plain = {q: _state(u) for q, u in _first_sum(jobs).items()}
    assert fast == plain == {q: _state(u) for q, u in queue_totals._task_by_task(jobs).items()}
