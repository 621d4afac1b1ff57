"""JobInfo's task index: moving a task between statuses in one call (`JobInfo._move`) leaves the
job exactly as `delete_task` then `add_task` does (maps, their order, sums, sub-jobs)."""

from __future__ import annotations

import random

from busched.api.job import JobInfo
from busched.api.resource import Resource
from busched.api.task import TaskInfo, TaskStatus


def _job() -> JobInfo:
    job = JobInfo(uid="ns/j", name="j", namespace="ns", queue="q", min_available=3)
    for i in range(6):
        r = Resource(1000.5 * (i + 1), 2.0**30 + i / 3, {"pods": 1.0} if i % 2 else {})
        job.add_task(TaskInfo(uid=f"ns-t{i}", name=f"t{i}", namespace="ns", job="ns/j", resreq=r,
                              init_resreq=r.clone(), best_effort=(i == 5)))
    return job


def _state(job: JobInfo) -> tuple:
    return (list(job.tasks), {s: list(ts) for s, ts in job.status_index.items()}, list(job.status_index),
            (job.total_request.cpu, job.total_request.memory, dict(job.total_request.scalars)),
            (job.allocated.cpu, job.allocated.memory, dict(job.allocated.scalars)), job.pending_best_effort,
            {uid: (list(sj.tasks), {s: list(ts) for s, ts in sj.status_index.items()})
             for uid, sj in job.sub_jobs.items()}, dict(job.task_to_sub_job), job.ready_task_num())


def test_move_matches_delete_then_add():
    rng = random.Random(3)
    statuses = list(TaskStatus)
    fast, plain = _job(), _job()
    for _ in range(500):
        i = rng.randrange(6)
        status = rng.choice(statuses)
        t = fast.tasks[f"ns-t{i}"]
        assert not fast.subgroup_policy  # update_task_status takes the one-call move
        fast.update_task_status(t, status)  # the one-call move
        u = plain.tasks[f"ns-t{i}"]
        plain.delete_task(u)
        u.status = status
        plain.add_task(u)
        assert _state(fast) == _state(plain)
