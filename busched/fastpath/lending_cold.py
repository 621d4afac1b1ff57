"""The cold lending (a restart's first snapshot) written out as one loop over the jobs and one over the nodes.

When the shared snapshot (busched.fastpath.lending) holds no assembled job, every job is assembled
afresh: `SharedMemo._job` for each of a big cluster's 87,000 jobs, each a handful of calls more (the
job's conversion, a template per task, the lazy sub-job's checks), and `NodeLending._node` for each
node, two calls per placed task for its template.  `lend_jobs_cold` and `lend_nodes_cold` do what
`SharedMemo._lend_jobs` and `NodeLending._lend_nodes` do with every `_job` / `_node` call that
assembles written out inline: the same conversions (the validation's job, a task's template kept
or converted again under the same test), the same tasks in the same order, the same assembly calls
(`busched.api.settled.add_tasks_sub_jobs_later`, `busched.api.assemble.add_tasks`, ``add_copies``),
the same records and counts kept (per object, as they are, so a lending refused half way leaves the
same).  Both run only over a memo that holds no assembled object.  ``SharedMemo.cold_bulk = False`` is the
reference (the one-object methods throughout); tests/fastpath/test_lending_cold.py compares the
two, every record of the memo included.
"""

from __future__ import annotations

import itertools
from typing import Any

from busched.api import assemble, build, settled
from busched.api.job import JobInfo
from busched.api.node import NodeInfo
from busched.api.outputs import LOGGED
from busched.api.queue import PriorityClass
from busched.api.task import TaskInfo, completed_status
from busched.fastpath.templates import _fresh_task, _Template

__all__ = ["lend_jobs_cold", "lend_nodes_cold"]


def lend_jobs_cold(memo: Any, cache: Any, classes: dict[str, PriorityClass], default_priority: int,
                   queues: frozenset[str], record: type) -> tuple[dict[str, JobInfo], list[JobInfo]]:
    """`SharedMemo._lend_jobs` over a memo that holds no assembled job (``record``: its `_Job`)."""
    if memo._jobs:
        raise ValueError("a cold lending starts with no assembled job")
    lent: dict[str, JobInfo] = {}
    outputs: dict[str, tuple[JobInfo, str, list[dict[str, Any]]]] = {}
    in_session: dict[str, JobInfo] = {}
    volatile: list[JobInfo] = []
    task_specs = cache.objects["task"]
    job_tasks, job_version, seq = cache.job_tasks, cache.job_version, cache.task_seq
    templates, job_templates, jobs_memo = memo._tasks, memo._job_templates, memo._jobs
    lazy, logged, log = memo.lazy_sub_jobs, memo.logged, memo._job_log
    plain_classes = "" not in classes  # (`TaskTemplates._new_job`: the validation's job is usable)
    deferrable, later, add_tasks = settled.deferrable, settled.add_tasks_sub_jobs_later, assemble.add_tasks
    task_info, job_info = build.task_info, build.job_info
    for key, spec in cache.objects["job"].items():
        # `SharedMemo._job` for a job the memo does not hold
        version = job_version.get(key, 0)
        jt = job_templates.pop(key, None)  # (`TaskTemplates._new_job`)
        if jt is not None and jt[0] is spec and plain_classes:
            job = jt[1]
            job.priority = default_priority
        else:
            job = job_info(spec, classes, default_priority)
        direct = not (spec.phase in ("Pending", "") or spec.sub_group_policy or spec.network_topology is not None)
        keys: Any = job_tasks.get(key, ())
        if len(keys) == 2:
            a, b = keys
            keys = (a, b) if seq[a] < seq[b] else (b, a)
        elif len(keys) > 1:
            keys = sorted(keys, key=seq.__getitem__)
        tasks: list[TaskInfo] = []
        for tkey in keys:
            tspec = task_specs[tkey]
            tm = templates.get(tkey)  # (`TaskTemplates._template`)
            if tm is None or tm.spec is not tspec or (tm.owner is not None and tm.owner.written):
                tm = templates[tkey] = _Template(tspec, task_info(tspec, classes))
            if direct:
                tm.owner = job
                tasks.append(tm.task)
            else:
                tm.owner = None
                tasks.append(_fresh_task(tm.task))
        if direct and lazy and deferrable(job):
            later(job, tasks)
        else:
            add_tasks(job, tasks)
        job.written = False
        if logged:
            job.derived = {LOGGED: log}
        m = jobs_memo[key] = record(spec, version, default_priority, job)
        memo.assembled_jobs += 1
        if m.volatile:
            if not job.written and logged:
                log.append(job)
            job.written = True
        # (`SharedMemo._lend_jobs`)
        lent[key] = job
        outputs[key] = (job, m.phase, m.conditions)
        if job.has_podgroup and job.queue in queues:
            in_session[key] = job
            if m.volatile:
                volatile.append(job)
    memo._lent, memo._outputs, memo._in_session = lent, outputs, in_session
    memo._pos = dict(zip(lent, itertools.count()))  # ({k: i for i, k in enumerate(lent)}, in C)
    return dict(in_session), volatile


def lend_nodes_cold(memo: Any, cache: Any, classes: dict[str, PriorityClass]) -> list[NodeInfo]:
    """`NodeLending._lend_nodes` over a memo that holds no assembled node, each node assembled inline."""
    if memo._nodes:
        raise ValueError("a cold lending starts with no assembled node")
    out: list[NodeInfo] = []
    memo._fresh_listeners()
    task_specs, node_tasks, node_version = cache.objects["task"], cache.node_tasks, cache.node_version
    seq = cache.task_seq
    templates, nodes_memo, listeners, node_templates = memo._tasks, memo._nodes, memo._listeners, memo._node_templates
    task_info, node_info, add_copies = build.task_info, build.node_info, assemble.add_copies
    for name, spec in cache.objects["node"].items():
        if not spec.ready:
            continue
        index = len(out)
        # `NodeLending._node` for a node the memo does not hold
        version = node_version.get(name, 0)
        nt = node_templates.pop(name, None)  # (`NodeLending._new_node`)
        if nt is not None and nt[0] is spec:
            node = nt[1]
            node.index = index
        else:
            node = node_info(spec, index)
        keys: Any = node_tasks.get(name, ())
        if len(keys) > 1:
            keys = sorted(keys, key=seq.__getitem__)
        pairs: list[tuple[TaskInfo, TaskInfo]] = []
        for tkey in keys:
            tspec = task_specs[tkey]
            tm = templates.get(tkey)  # (`TaskTemplates._template`)
            if tm is None or tm.spec is not tspec or (tm.owner is not None and tm.owner.written):
                tm = templates[tkey] = _Template(tspec, task_info(tspec, classes))
            t = tm.task
            if not completed_status(t.status):
                pairs.append((t, t.copy()))
        add_copies(node, pairs)
        node.written = False
        node.listeners = listeners
        nodes_memo[name] = (spec, version, index, node)
        memo.assembled_nodes += 1
        out.append(node)
    memo._lent_nodes = out
    memo._node_at = dict(zip([n.name for n in out], itertools.count()))
    return list(out)
