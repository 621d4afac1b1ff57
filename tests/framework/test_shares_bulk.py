"""`shares.add_job_usage` (the sums in locals) against `add_job_usage_plain` (task by task through
`Resource.add`): the same four totals to the bit, scalar order included, over random jobs."""

from __future__ import annotations

import random

import pytest

from busched.api.job import JobInfo
from busched.api.resource import GO_INFINITY, Resource
from busched.api.task import TaskInfo, TaskStatus
from busched.framework import shares

_SCALARS = ("pods", "nvidia.com/gpu", "hugepages-2Mi")


def _res(rng: random.Random) -> Resource:
    scalars = {n: rng.choice((1.0, 0.1, 1000.0, -2.0, GO_INFINITY)) for n in rng.sample(_SCALARS, rng.randrange(4))}
    return Resource(rng.choice((0.0, 1000.0, 333.3, 0.1, -5.0)) * rng.randrange(1, 9),
                    rng.choice((2.0**30, 1.0 / 3, 0.0, 1e17)) * rng.randrange(1, 5), scalars)


def _job(rng: random.Random, i: int) -> JobInfo:
    job = JobInfo(uid=f"ns/j{i}", name=f"j{i}", namespace="ns", queue="q", min_available=rng.randrange(0, 4),
                  has_podgroup=True, phase=rng.choice(("Pending", "Inqueue", "Running", "")))
    if rng.random() < 0.3:
        job.min_resources = _res(rng)
    for k in range(rng.randrange(0, 6)):
        r = _res(rng)
        job.add_task(TaskInfo(uid=f"ns-j{i}-{k}", name=f"j{i}-{k}", namespace="ns", job=job.uid, resreq=r,
                              init_resreq=r, status=rng.choice(list(TaskStatus))))
    return job


def _state(u: shares.Usage) -> list:
    return [(r.cpu, r.memory, list(r.scalars.items())) for r in u.parts()]


@pytest.mark.parametrize("seed", range(20))
def test_add_job_usage_matches_plain(seed: int) -> None:
    rng = random.Random(seed)
    fast, plain = shares.Usage(), shares.Usage()
    for i in range(30):
        job = _job(rng, i)
        phase = rng.choice((None, "Inqueue", "Running"))
        shares.add_job_usage(fast, job, phase)
        shares.add_job_usage_plain(plain, job, phase)
        assert _state(fast) == _state(plain)
    assert any(r.cpu or r.scalars for r in fast.parts())  # (something was summed)


def test_shared_total_takes_the_plain_path() -> None:
    """An ``attr`` whose allocated and requested totals are one Resource gets both additions."""
    rng = random.Random(1)
    fast, plain = shares.Usage(), shares.Usage()
    fast.request = fast.allocated
    plain.request = plain.allocated
    for i in range(10):
        job = _job(rng, i)
        shares.add_job_usage(fast, job)
        shares.add_job_usage_plain(plain, job)
    assert _state(fast) == _state(plain)
