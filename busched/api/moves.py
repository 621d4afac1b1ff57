"""Many tasks of one job moved to one status at once, as `JobInfo.update_task_status` moves each.

A commit hands the binder a gang's allocations together: every one goes Allocated -> Binding.
Moving them one call each repeats, per task, what is the same for all of them (the job's maps,
the old and new status's index, whether either status counts as allocated, the default
sub-job).  `move_run` reads those once and then makes, task after task, exactly the changes
`JobInfo._move` makes (the same arithmetic on the same sums, in the same order, each task to
the end of the same maps).  Whatever it cannot move so (a job with sub-group policies, a task
not indexed as itself, mixed old statuses, BestEffort tasks) moves one by one as ever.
"""

from __future__ import annotations

from busched.api import move_sums, outputs, subjob
from busched.api.job import JobInfo
from busched.api.task import TaskInfo, TaskStatus, allocated_status

__all__ = ["move_run"]


def move_run(job: JobInfo, tasks: list[TaskInfo], status: TaskStatus) -> None:
    """``job.update_task_status(t, status)`` for every task of ``tasks``, in order."""
    if not tasks:
        return
    prev = tasks[0].status
    jt = job.tasks
    if (job.subgroup_policy or prev == status or len(tasks) < 2
            or not all(t.status == prev and not t.best_effort and jt.get(t.uid) is t for t in tasks)
            or len({t.uid for t in tasks}) != len(tasks)):
        for t in tasks:
            job.update_task_status(t, status)
        return
    job.written = True
    if job.derived:
        outputs.emptied(job, job.derived)  # as every writer of a job: a lent job logs its first write
        job.derived = {}
    index = job.status_index
    old = index.get(prev)
    new = index.get(status)
    total, allocated = job.total_request, job.allocated
    was, now = allocated_status(prev), allocated_status(status)
    to_sub, sub_jobs = job.task_to_sub_job, job.sub_jobs
    default = None
    for t in tasks:
        uid = t.uid
        r = t.resreq
        del jt[uid]
        move_sums.take_request(total, allocated, r, was)  # (as `JobInfo._move`)
        if old is not None:
            old.pop(uid, None)
            if not old:
                del index[prev]
                old = None
        sj = sub_jobs.get(to_sub.pop(uid, ""))
        if sj is not None:
            sj.delete_task(t)
        t.status = status
        jt[uid] = t
        if new is None:
            new = index.setdefault(status, {})
        new[uid] = t
        move_sums.put_request(total, allocated, r, now)
        if default is None:
            default = subjob.default_sub_job(job)
        default.add_task(t)
        to_sub[uid] = default.uid
