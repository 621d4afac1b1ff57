"""Bulk assembly: many tasks added to one job, or many task copies to one node, in one call.

A cold snapshot (a restart; busched.fastpath.lending) adds every task of a big cluster to its job
and a copy of it to its node: 140,000 `JobInfo.add_task` and `NodeInfo.add_task` calls, each a
handful of calls more (the two sums, the status test, the sub-job, the listeners).  These do what
those calls do one task after the other, written out as one loop: the same maps filled in the same
order, the same sums added in the same order (so the very same floats), the same errors.  The
one-task methods stay the reference; tests compare both on random tasks (tests/api/test_assemble.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from busched.api import outputs, subjob
from busched.api.job import JobInfo
from busched.api.node import NodeAccountingError, NodeInfo
from busched.api.task import TaskInfo, TaskStatus, allocated_status

_PENDING, _RELEASING, _PIPELINED, _BINDING = (TaskStatus.Pending, TaskStatus.Releasing,
                                              TaskStatus.Pipelined, TaskStatus.Binding)


def add_tasks(job: JobInfo, tasks: Sequence[TaskInfo]) -> None:
    """``job.add_task(t)`` for each of ``tasks`` in order (tasks new to the job)."""
    if not tasks:
        return
    if job.subgroup_policy and job.has_podgroup:
        for t in tasks:  # policies to match: the reference
            job.add_task(t)
        return
    job.written = True
    if job.derived:
        outputs.emptied(job, job.derived)
        job.derived = {}
    index_tasks(job, tasks)
    sj = subjob.default_sub_job(job)  # the default sub-job's add_task, for each task
    sj_tasks, sj_index, prio = sj.tasks, sj.status_index, sj.priority
    to_sub, sj_uid = job.task_to_sub_job, sj.uid
    for t in tasks:
        uid, status = t.uid, t.status
        sj_tasks[uid] = t
        idx = sj_index.get(status)
        if idx is None:
            sj_index[status] = {uid: t}
        else:
            idx[uid] = t
        if t.priority > prio:
            prio = t.priority
        to_sub[uid] = sj_uid
    sj.priority = prio


def index_tasks(job: JobInfo, tasks: Sequence[TaskInfo]) -> None:
    """The job's own part of ``job.add_task(t)`` for each of ``tasks``: its task map, status index,
    sums and BestEffort count (not its sub-jobs; also the lazy assembly's, busched.api.settled)."""
    own, index = job.tasks, job.status_index
    total, alloc = job.total_request, job.allocated
    tc, tm, ts = total.cpu, total.memory, total.scalars
    ac, am, as_ = alloc.cpu, alloc.memory, alloc.scalars
    best_effort = 0
    for t in tasks:
        uid, status, req = t.uid, t.status, t.resreq
        own[uid] = t
        idx = index.get(status)
        if idx is None:
            index[status] = {uid: t}
        else:
            idx[uid] = t
        tc += req.cpu
        tm += req.memory
        scalars = req.scalars
        for n, v in scalars.items():
            ts[n] = ts.get(n, 0.0) + v
        if allocated_status(status):
            ac += req.cpu
            am += req.memory
            for n, v in scalars.items():
                as_[n] = as_.get(n, 0.0) + v
        elif t.best_effort and status == _PENDING:
            best_effort += 1
    total.cpu, total.memory = tc, tm
    alloc.cpu, alloc.memory = ac, am
    job.pending_best_effort += best_effort


def add_copies(node: NodeInfo, pairs: Sequence[tuple[TaskInfo, TaskInfo]]) -> None:
    """``node.add_task(task, copy)`` for each pair in order (``copy`` a copy of ``task`` no one else
    holds), refusing what it refuses at the same task; the reference when a listener is to be told
    or a Binding task fit-checked."""
    name = node.name
    if node.listeners or any(c.status == _BINDING for _, c in pairs):
        for t, c in pairs:
            node.add_task(t, c)
        return
    idle, used, releasing, pipelined = node.idle, node.used, node.releasing, node.pipelined
    ic, im, is_ = idle.cpu, idle.memory, idle.scalars
    uc, um, us = used.cpu, used.memory, used.scalars
    try:
        for task, ti in pairs:
            if task.node_name and task.node_name != name:
                raise NodeAccountingError(f"task {task.key} already on different node {task.node_name}")
            if task.uid in node.tasks:
                raise NodeAccountingError(f"task {task.key} already on node {name}")
            if not node.written:
                node._first_write()
            s, req = ti.status, ti.resreq
            if s == _PIPELINED:
                pipelined.add(req)
            else:  # idle.sub(req), used.add(req), and the releasing part
                ic -= req.cpu
                im -= req.memory
                if is_:
                    for n, v in req.scalars.items():
                        is_[n] = is_.get(n, 0.0) - v
                if s == _RELEASING:
                    releasing.add(req)
                uc += req.cpu
                um += req.memory
                for n, v in req.scalars.items():
                    us[n] = us.get(n, 0.0) + v
            task.node_name = name
            ti.node_name = name
            node.tasks[ti.uid] = ti
    finally:
        idle.cpu, idle.memory, used.cpu, used.memory = ic, im, uc, um
