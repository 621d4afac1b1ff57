"""busched.api.settled against the eager assembly (busched.api.assemble.add_tasks): a job whose
default sub-job waits for its first read is, once read or changed in any way, the very job the
eager loop builds and the same changes give (maps and their order, sums, sub-jobs, flags)."""

from __future__ import annotations

import copy
import random

import pytest

from busched.api import assemble, settled, subjob
from busched.api.job import JobInfo
from busched.api.task import TaskInfo, TaskStatus
from tests.api.test_assemble import _res_state, _tasks


def _t(t: TaskInfo) -> tuple:
    return t.uid, t.status, t.priority, t.node_name, _res_state(t.resreq)


def _job_state(job: JobInfo) -> tuple:
    """Everything the task index and the sub-jobs hold, tasks by their fields (each job has its own)."""
    return ([(k, _t(t)) for k, t in job.tasks.items()],
            [(s, [(k, _t(t)) for k, t in ts.items()]) for s, ts in job.status_index.items()],
            _res_state(job.total_request), _res_state(job.allocated), job.pending_best_effort, job.written,
            job.derived, [(uid, sj.gid, sj.uid, sj.job, sj.priority, sj.min_available, sj.network_topology,
                           [(k, _t(t)) for k, t in sj.tasks.items()],
                           [(s, list(ts)) for s, ts in sj.status_index.items()]) for uid, sj in job.sub_jobs.items()],
            list(job.task_to_sub_job.items()), job.min_sub_jobs)


def _job(rng: random.Random) -> JobInfo:
    return JobInfo(uid="ns/j", name="j", namespace="ns", queue="q", min_available=rng.randrange(1, 4),
                   has_podgroup=True)


def _pair(seed: int) -> tuple[JobInfo, JobInfo, list[TaskInfo], list[TaskInfo]]:
    """The same job assembled eagerly and with its sub-job later, each with its own tasks."""
    eager, lazy = _job(random.Random(seed)), _job(random.Random(seed))
    n = random.Random(seed).randrange(1, 9)
    e_tasks, l_tasks = _tasks(random.Random(seed), n), _tasks(random.Random(seed), n)
    assemble.add_tasks(eager, e_tasks)
    settled.add_tasks_sub_jobs_later(lazy, l_tasks)
    eager.written = lazy.written = False  # as the lending leaves them
    return eager, lazy, e_tasks, l_tasks


def _change(rng: random.Random, job: JobInfo, tasks: list[TaskInfo], extra: TaskInfo) -> None:
    """One of the changes a session makes to a job's index (the same rng draws for both jobs)."""
    what = rng.randrange(6)
    t = tasks[rng.randrange(len(tasks))]
    if what == 0:
        job.update_task_status(t, rng.choice(list(TaskStatus)))
    elif what == 1:
        job.delete_task(t)
    elif what == 2:
        job.add_task(extra)
    elif what == 3:
        job._move(t, rng.choice(list(TaskStatus)))
    elif what == 4:
        t.status = rng.choice(list(TaskStatus))  # a task changed behind the job's back: the index keeps it
        job.update_task_status(tasks[0], TaskStatus.Releasing)
    else:
        job.task_to_sub_job = dict(job.task_to_sub_job)  # a write to a deferred map fills it in first


@pytest.mark.parametrize("seed", range(40))
def test_deferred_sub_job_is_the_eager_one(seed: int) -> None:
    eager, lazy, e_tasks, l_tasks = _pair(seed)
    assert type(lazy) is settled.SubJobsLater and isinstance(lazy, JobInfo)
    # what the first cycle reads of a settled job does not fill the sub-job in
    assert (list(lazy.tasks), list(lazy.status_index), lazy.allocated.cpu, lazy.ready_task_num()) == (
        list(eager.tasks), list(eager.status_index), eager.allocated.cpu, eager.ready_task_num())
    assert type(lazy) is settled.SubJobsLater
    rng_e, rng_l = random.Random(seed + 1), random.Random(seed + 1)
    if seed % 3:  # changed before anything read the sub-job: filled in first, then changed
        for _ in range(seed % 4 + 1):
            extra = _tasks(random.Random(seed + 7), 1)[0]
            extra.uid = f"ns-x{seed}"
            _change(rng_e, eager, e_tasks, extra)
            extra = _tasks(random.Random(seed + 7), 1)[0]
            extra.uid = f"ns-x{seed}"
            _change(rng_l, lazy, l_tasks, extra)
        assert type(lazy) is JobInfo
    assert _job_state(lazy) == _job_state(eager)  # (reading the sub-jobs fills them in)
    assert type(lazy) is JobInfo


@pytest.mark.parametrize("seed", range(6))
def test_copies_and_readers_see_the_filled_job(seed: int) -> None:
    eager, lazy, _, _ = _pair(seed)
    assert _job_state(copy.copy(lazy)) == _job_state(copy.copy(eager))
    eager, lazy, _, _ = _pair(seed)
    assert _job_state(lazy.clone()) == _job_state(eager.clone())
    eager, lazy, _, _ = _pair(seed)
    assert subjob.check_sub_job_ready(lazy) == subjob.check_sub_job_ready(eager)
    assert [sj.uid for sj in lazy.sub_jobs.values()] == [eager.uid]


def test_only_a_job_without_sub_group_bookkeeping_waits() -> None:
    job = _job(random.Random(0))
    job.subgroup_policy = [{"name": "p", "matchLabelKeys": ["k"]}]
    assert not settled.deferrable(job)
    with pytest.raises(ValueError):
        settled.add_tasks_sub_jobs_later(job, _tasks(random.Random(0), 2))
    plain = _job(random.Random(0))
    settled.add_tasks_sub_jobs_later(plain, [])
    assert type(plain) is JobInfo and not plain.sub_jobs
