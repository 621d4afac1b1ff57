"""Settled jobs whose default sub-job is filled in on first read.

A cold snapshot (a restart: busched.fastpath.lending) assembles every job of a big cluster, and
a quarter of that is each job's default sub-job (busched.api.subjob): a `SubJobInfo`, its two maps
and the task -> sub-job map, filled task by task.  A settled job (every task placed, no sub-group
policy, no network topology) is read for its sums and its task index by the default actions and
plugins; its sub-jobs only by the gang and topology bookkeeping of a job that is being placed or
evicted.  `add_tasks_sub_jobs_later` assembles such a job as `busched.api.assemble.add_tasks` does
but for the sub-job, and marks the job: its class becomes `SubJobsLater`, a `JobInfo` whose
``sub_jobs`` and ``task_to_sub_job`` are read through properties that fill the default sub-job in
and turn the object back into a plain `JobInfo` (the same slots: only the class changes), so
everything after the first read costs what it costs on any job.

Why it is exactly the eager assembly: until it is filled in, the default sub-job of such a job is
a copy of the job's own task index (the same tasks, inserted in the same order under the same
statuses, by the same loop), with the highest task priority.  The job's task index changes only
through `JobInfo.add_task`, `delete_task`, `update_task_status` and `_move`, which `SubJobsLater`
overrides to fill the sub-job in first; so whenever the sub-job is filled in, the job's index is
still the one assembled, and the copy is what the eager loop built.  ``isinstance(job, JobInfo)``
holds throughout.  The reference is `busched.api.assemble.add_tasks` (the lending's
``lazy_sub_jobs = False``); tests/api/test_settled.py and tests/fastpath/test_lazy_first_cycle.py
compare the two.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from busched.api import assemble, subjob
from busched.api.job import JobInfo
from busched.api.task import TaskInfo, TaskStatus, allocated_status

__all__ = ["SubJobsLater", "WHOLE", "add_tasks_sub_jobs_later", "deferrable", "fill", "summable", "whole_request"]

# the slots' own descriptors (the subclass's properties hide them)
_SLOT_SUB_JOBS: Any = vars(JobInfo)["sub_jobs"]
_SLOT_TO_SUB: Any = vars(JobInfo)["task_to_sub_job"]


class _WholeKey:
    def __repr__(self) -> str:
        return "settled.WHOLE"


# The key, in a job's ``derived`` map, of its certificate that its totals may stand for its tasks
# (`summable`): set by the lending as it assembles the job, dropped with the map at the job's first
# change (busched.fastpath.memo's contract), read by busched.framework.queue_totals.queue_usage.
WHOLE: Any = _WholeKey()


def whole_request(r: Any) -> bool:
    """Every value of a request a whole number, not below zero (not NaN nor infinite): sums of such
    values, while they stay within a float's exact range, are the same in any order."""
    c, m = r.cpu, r.memory
    if not (c % 1.0 == 0.0 and m % 1.0 == 0.0 and c >= 0.0 and m >= 0.0):  # (an int too; inf % 1 is NaN)
        return False
    for v in r.scalars.values():  # noqa: SIM110 - a loop, not all() (called per task)
        if not (v % 1.0 == 0.0 and v >= 0.0):
            return False
    return True


def summable(job: JobInfo) -> bool:
    """Whether the job's ``allocated`` may stand for its tasks in a queue's sums: every task in one
    allocated status (so ``allocated`` summed the very requests a walk of the index adds, in the
    same order, the scalar names first seen in the same order) and every request whole
    (`whole_request`).  The reference of what the lending's cold loop certifies inline."""
    idx = job.status_index
    if len(idx) != 1 or not allocated_status(next(iter(idx))):
        return False
    return all(whole_request(t.resreq) for t in job.tasks.values())


def deferrable(job: JobInfo) -> bool:
    """Whether a job's sub-jobs may wait: all its tasks go to the default sub-job, which takes no
    copy of a network topology."""
    return not job.subgroup_policy and job.network_topology is None


def fill(job: JobInfo) -> None:
    """Fill in the default sub-job of a `SubJobsLater` job, then make it a plain `JobInfo` (in that
    order: a reader never sees the plain maps empty); nothing for any other job."""
    if type(job) is not SubJobsLater:
        return
    tasks = job.tasks
    if tasks:
        # what assemble.add_tasks's loop puts in the sub-job, from the index it built in the same loop
        sj = subjob.new_default_sub_job(job)
        sj.tasks.update(tasks)
        sj.status_index.update((status, dict(ts)) for status, ts in job.status_index.items())
        prio = sj.priority
        for t in tasks.values():
            if t.priority > prio:
                prio = t.priority
        sj.priority = prio
        _SLOT_TO_SUB.__get__(job).update(dict.fromkeys(tasks, sj.uid))
        _SLOT_SUB_JOBS.__get__(job)[job.uid] = sj
    job.__class__ = JobInfo  # type: ignore[assignment]  # (mypy narrowed it to the subclass)


class SubJobsLater(JobInfo):
    """A `JobInfo` whose default sub-job is not filled in yet (see the module's docstring)."""

    __slots__ = ()

    @property
    def sub_jobs(self) -> dict[str, subjob.SubJobInfo]:
        fill(self)
        out: dict[str, subjob.SubJobInfo] = _SLOT_SUB_JOBS.__get__(self)
        return out

    @sub_jobs.setter
    def sub_jobs(self, value: dict[str, subjob.SubJobInfo]) -> None:
        fill(self)
        _SLOT_SUB_JOBS.__set__(self, value)

    @property
    def task_to_sub_job(self) -> dict[str, str]:
        fill(self)
        out: dict[str, str] = _SLOT_TO_SUB.__get__(self)
        return out

    @task_to_sub_job.setter
    def task_to_sub_job(self, value: dict[str, str]) -> None:
        fill(self)
        _SLOT_TO_SUB.__set__(self, value)

    # every change to the task index fills the sub-job in first (then it is a plain JobInfo's)
    def add_task(self, t: TaskInfo) -> None:
        fill(self)
        JobInfo.add_task(self, t)

    def delete_task(self, t: TaskInfo) -> None:
        fill(self)
        JobInfo.delete_task(self, t)

    def update_task_status(self, t: TaskInfo, status: TaskStatus) -> None:
        fill(self)
        JobInfo.update_task_status(self, t, status)

    def _move(self, t: TaskInfo, status: TaskStatus) -> None:
        fill(self)
        JobInfo._move(self, t, status)

    def __reduce_ex__(self, protocol: Any) -> Any:  # (a copy or a pickle is of the filled-in job)
        fill(self)
        return JobInfo.__reduce_ex__(self, protocol)


# (only the empty tuple at its making keeps the layout JobInfo's; afterwards the class says what a
# JobInfo says, for the readers that list a job's fields by its class's slots)
SubJobsLater.__slots__ = JobInfo.__slots__  # type: ignore[assignment]


def add_tasks_sub_jobs_later(job: JobInfo, tasks: Sequence[TaskInfo]) -> None:
    """`busched.api.assemble.add_tasks` for a `deferrable` job that holds no task yet (nor a derived
    value: a fresh one, as the lending's first assembly has), but for the default sub-job, which
    waits for its first read (the job becomes a `SubJobsLater`)."""
    if not tasks:
        return
    if not deferrable(job) or job.tasks or job.sub_jobs or job.task_to_sub_job or job.derived:
        raise ValueError(f"job {job.uid}: only a deferrable job without tasks waits for its sub-jobs")
    job.written = True
    assemble.index_tasks(job, tasks)
    job.__class__ = SubJobsLater
