"""A single-task job's status move (`JobInfo._move_sole`, which `update_task_status` takes for a job
holding one task) against `_move`, its reference, and against delete-then-add: random requests (fractions,
scalars some sums lack, BestEffort), random statuses, priorities and starting sums; every map, its order,
the old status maps as a holder of them sees them, the sub-job, and the sums' float bits (repr) compared."""

from __future__ import annotations

import random

import pytest

from busched.api.job import JobInfo
from busched.api.resource import Resource
from busched.api.task import TaskInfo, TaskStatus

_SCALARS = ["pods", "nvidia.com/gpu", "hugepages-2Mi"]


def _req(rng: random.Random) -> Resource:
    if rng.random() < 0.15:
        return Resource()  # BestEffort
    sc = {n: rng.choice([1.0, 0.5, 3.0, 1e-3, 0.1]) for n in _SCALARS if rng.random() < 0.3}
    return Resource(rng.choice([0.1, 1000.5, 3000.0, 1e-3, 250.0]), rng.choice([0.3, 2.0**30 + 1 / 3, 17.25]), sc)


def _job(seed: int) -> JobInfo:
    rng = random.Random(seed)
    job = JobInfo(uid="ns/j", name="j", namespace="ns", queue="q", min_available=1)
    r = _req(rng)
    t = TaskInfo(uid="ns-t0", name="t0", namespace="ns", job="ns/j", resreq=r, init_resreq=r,
                 status=rng.choice(list(TaskStatus)), best_effort=r.is_empty(), priority=rng.randint(-5, 5))
    job.add_task(t)
    # sums that do not start at the task's own (a job's sums carry earlier arithmetic): fractions, scalars
    # (some where taking a request out and putting it back does not give the sum back: 0.3 - 250 + 250)
    for res in (job.total_request, job.allocated):
        if rng.random() < 0.7:
            res.cpu = rng.choice([0.3, 0.7, 1 / 3, 12345.678, 1e16 + 2])
            res.memory = rng.choice([0.3, 1 / 3, 2.0**52 + 0.5])
        if rng.random() < 0.3:
            res.scalars[rng.choice(_SCALARS)] = rng.choice([0.1, 7.0])
        elif rng.random() < 0.6:
            res.scalars.clear()  # a sum without the task's scalars (taking a request out skips an empty map)
    return job


def _state(job: JobInfo) -> str:
    sj = {uid: (s.uid, list(s.tasks.items()), [(k, list(v.items())) for k, v in s.status_index.items()], s.priority)
          for uid, s in job.sub_jobs.items()}
    return repr((list(job.tasks.items()), [(k, list(v.items())) for k, v in job.status_index.items()],
                 [(r.cpu, r.memory, list(r.scalars.items())) for r in (job.total_request, job.allocated)],
                 job.pending_best_effort, sj, list(job.task_to_sub_job.items()), job.written,
                 [t.status for t in job.tasks.values()]))


def _held(job: JobInfo) -> list:
    """The status maps as they are now (a holder of them sees what becomes of them)."""
    return [job.status_index.get(s) for s in TaskStatus] + [
        sj.status_index.get(s) for sj in job.sub_jobs.values() for s in TaskStatus]


@pytest.mark.parametrize("seed", range(80))
def test_sole_move_is_the_plain_move(seed):
    rng = random.Random(1000 + seed)
    fast, ref, plain = _job(seed), _job(seed), _job(seed)
    for step in range(40):
        status = rng.choice(list(TaskStatus))
        if rng.random() < 0.1:  # a priority raised between moves (the sub-job keeps the highest)
            p = rng.randint(-5, 9)
            for j in (fast, ref, plain):
                j.tasks["ns-t0"].priority = p
        held = [_held(j) for j in (fast, ref, plain)]
        fast.update_task_status(fast.tasks["ns-t0"], status)  # the sole-task move
        JobInfo._move(ref, ref.tasks["ns-t0"], status)  # its reference
        u = plain.tasks["ns-t0"]
        plain.delete_task(u)
        u.status = status
        plain.add_task(u)
        assert _state(fast) == _state(ref) == _state(plain), (seed, step, status)
        seen = [repr([None if d is None else list(d) for d in h]) for h in held]
        assert seen[0] == seen[1] == seen[2], (seed, step)


def test_sole_move_taken_and_left():
    """Taken for a one-task job; a job of two tasks, or an index out of its usual shape, takes `_move`."""
    calls: list[str] = []

    class Spy(JobInfo):
        __slots__ = ()

        def _move(self, t, status):  # type: ignore[no-untyped-def]
            calls.append("move")
            JobInfo._move(self, t, status)

    job = Spy(uid="ns/j", name="j", namespace="ns", queue="q", min_available=1)
    r = Resource(1.5, 2.5)
    t = TaskInfo(uid="a", name="a", namespace="ns", job="ns/j", resreq=r, init_resreq=r)
    job.add_task(t)
    job.update_task_status(t, TaskStatus.Allocated)
    assert calls == [] and job.allocated.cpu == 1.5
    job.status_index[TaskStatus.Running] = {}  # an index out of shape: the reference move
    job.update_task_status(t, TaskStatus.Binding)
    assert calls == ["move"]
    del job.status_index[TaskStatus.Running]
    job.add_task(TaskInfo(uid="b", name="b", namespace="ns", job="ns/j", resreq=r, init_resreq=r))
    job.update_task_status(t, TaskStatus.Running)
    assert calls == ["move", "move"]


def test_sole_move_marks_the_job_written_and_drops_derived_values():
    """As `_move`: the job is marked written and what was derived from it is forgotten (review of tp9:
    the random test's jobs were already written with nothing derived, so dropping those lines survived)."""
    def one() -> tuple[JobInfo, TaskInfo]:
        job = JobInfo(uid="ns/j", name="j", namespace="ns", queue="q", min_available=1)
        r = Resource(1000.0, 2.0**30)
        t = TaskInfo(uid="a", name="a", namespace="ns", job="ns/j", resreq=r, init_resreq=r)
        job.add_task(t)
        job.written = False
        job.derived = {"k": 1}
        return job, t
    fast, tf = one()
    ref, tr = one()
    fast.update_task_status(tf, TaskStatus.Allocated)
    JobInfo._move(ref, tr, TaskStatus.Allocated)
    assert (fast.written, fast.derived) == (ref.written, ref.derived) == (True, {})
