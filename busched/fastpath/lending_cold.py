"""The cold lending (a restart's first snapshot) written out as one loop over the jobs and one over the nodes.

When the shared snapshot (busched.fastpath.lending) holds no assembled job, every job is assembled
afresh: `SharedMemo._job` for each of a big cluster's 87,000 jobs, each a handful of calls more (the
job's conversion, a template per task, the lazy sub-job's checks), and `NodeLending._node` for each
node, two calls per placed task for its template.  `lend_jobs_cold` and `lend_nodes_cold` do what
`SharedMemo._lend_jobs` and `NodeLending._lend_nodes` do with every `_job` / `_node` call that
assembles written out inline: the same conversions (the validation's job, a task's template kept
or converted again under the same test), the same tasks in the same order, the same assembly (the
calls `busched.api.settled.add_tasks_sub_jobs_later`, `busched.api.assemble.add_tasks`, ``add_copies``,
or, for the two fast cases below, their work written out), the same records and counts kept (per
object, as they are, so a lending refused half way leaves the same).  Both run only over a memo
that holds no assembled object.  ``SharedMemo.cold_bulk = False`` is the reference (the one-object
methods throughout); tests/fastpath/test_lending_cold.py compares the two, every record of the memo
included.

The two kinds a restart is nearly all made of go further (issue 17: a first cycle at 140,000 tasks is
a few microseconds of bytecode per object, so the calls and the lists between them were a fair part
of it): a settled job's templates are indexed as they are taken (`_index_settled`, no task list, no
`add_tasks_sub_jobs_later` call) and its record is filled in place of `_Job.__init__`; a node's
copies are made as they are accounted (`_copy_in`, no list of pairs; tests/fastpath/test_cold_copies.py
compares it with ``node.add_task``).  The nodes loop takes each node's tasks from one pass over the
tasks in their order (`_placed_by_node`) instead of a sort by sequence and a look-up per task in each
node: fewer reads of big maps (``SharedMemo.one_pass_nodes = False`` is the reference;
tests/fastpath/test_cold_nodes_pass.py).
"""

from __future__ import annotations

import itertools
import operator
from typing import Any

from busched.api import assemble, build, settled
from busched.api.job import _PLACEABLE, JobInfo
from busched.api.node import NodeAccountingError, NodeInfo
from busched.api.outputs import LOGGED
from busched.api.queue import PriorityClass
from busched.api.shared import SharedResource
from busched.api.task import TaskInfo, TaskStatus, allocated_status, completed_status
from busched.fastpath.templates import _fresh_task, _Template

__all__ = ["lend_jobs_cold", "lend_nodes_cold"]

_PENDING, _BINDING, _RELEASING, _PIPELINED = (TaskStatus.Pending, TaskStatus.Binding, TaskStatus.Releasing,
                                              TaskStatus.Pipelined)
_ALLOCATED = frozenset(s for s in TaskStatus if allocated_status(s))
_COMPLETED = frozenset(s for s in TaskStatus if completed_status(s))
_STATUS = operator.attrgetter("status")


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
    lazy, logged, log, totals = memo.lazy_sub_jobs, memo.logged, memo._job_log, memo.job_totals
    WHOLE = settled.WHOLE  # noqa: N806 - the module's key, in a local
    known: list[Any] = [None]  # (`_index_settled`'s last shared request found whole)
    plain_classes = "" not in classes  # (`TaskTemplates._new_job`: the validation's job is usable)
    deferrable, later, add_tasks = settled.deferrable, settled.add_tasks_sub_jobs_later, assemble.add_tasks
    later_class, new_record, placeable = settled.SubJobsLater, object.__new__, _PLACEABLE
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
        if (keys and direct and lazy and not job.subgroup_policy and job.network_topology is None
                and not (job.tasks or job.sub_jobs or job.task_to_sub_job or job.derived)):
            # a settled job (`settled.deferrable`, fresh): its templates indexed as they are taken
            # (`_index_settled`), its record made as `_Job` makes it, its volatility `unsettled`'s
            # last test (its phase is not Pending, it has no policy nor topology)
            whole = _index_settled(job, keys, task_specs, templates, classes, task_info, known) and totals
            job.__class__ = later_class
            job.written = False
            if logged:
                job.derived = {LOGGED: log, WHOLE: True} if whole else {LOGGED: log}
            elif whole:
                job.derived[WHOLE] = True
            m: Any = new_record(record)
            jobs_memo[key] = m
            m.spec, m.version, m.prio, m.job = spec, version, default_priority, job
            m.phase, m.conditions = phase, conditions = job.phase, job.conditions
            m.volatile = unsettled_now = not job.has_podgroup or not placeable.isdisjoint(job.status_index)
            memo.assembled_jobs += 1
            if unsettled_now:
                if logged:
                    log.append(job)
                job.written = True
            lent[key] = job
            outputs[key] = (job, phase, conditions)
            if job.has_podgroup and job.queue in queues:
                in_session[key] = job
                if unsettled_now:
                    volatile.append(job)
            continue
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
        if direct and totals and settled.summable(job):
            job.derived[WHOLE] = True
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


def _index_settled(job: JobInfo, keys: Any, task_specs: dict[str, Any], templates: dict[str, _Template],
                   classes: dict[str, PriorityClass], task_info: Any, known: list[Any]) -> bool:
    """A settled job's templates taken (each kept, or converted again, as `TaskTemplates._template`
    does) and indexed in one loop: `assemble.index_tasks` over the list the reference builds, each
    task's sums added as it comes, so the same additions in the same order.  Returns
    `settled.summable` of the job, checked as the requests are read (``known[0]``: the last shared
    request found whole, which needs no look again)."""
    own, index = job.tasks, job.status_index
    total, alloc = job.total_request, job.allocated
    tc, tm_, ts = total.cpu, total.memory, total.scalars
    ac, am, as_ = alloc.cpu, alloc.memory, alloc.scalars
    best_effort = 0
    allocated = _ALLOCATED
    whole, whole_request, shared = True, settled.whole_request, SharedResource
    for tkey in keys:
        tspec = task_specs[tkey]
        tm = templates.get(tkey)
        if tm is None or tm.spec is not tspec or (tm.owner is not None and tm.owner.written):
            tm = templates[tkey] = _Template(tspec, task_info(tspec, classes))
        tm.owner = job
        t = tm.task
        uid, status, req = t.uid, t.status, t.resreq
        own[uid] = t
        idx = index.get(status)
        if idx is None:
            index[status] = {uid: t}
        else:
            idx[uid] = t
        tc += req.cpu
        tm_ += req.memory
        if whole and req is not known[0]:  # (most tasks hold one of a few shared requests)
            if not whole_request(req):
                whole = False
            elif type(req) is shared:  # (never changed in place: known whole for the lending)
                known[0] = req
        scalars = req.scalars
        if status in allocated:
            ac += req.cpu
            am += req.memory
            if scalars:  # (both maps in one loop: each gets the same additions in the same order)
                for n, v in scalars.items():
                    ts[n] = ts.get(n, 0.0) + v
                    as_[n] = as_.get(n, 0.0) + v
        else:
            if scalars:
                for n, v in scalars.items():
                    ts[n] = ts.get(n, 0.0) + v
            if t.best_effort and status == _PENDING:
                best_effort += 1
    total.cpu, total.memory = tc, tm_
    alloc.cpu, alloc.memory = ac, am
    job.pending_best_effort += best_effort
    return whole and len(index) == 1 and next(iter(index)) in allocated


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
    completed = _COMPLETED
    by_node, ended, redo = _placed_by_node(cache, templates) if memo.one_pass_nodes else ({}, {}, None)
    no_tasks: list[TaskInfo] = []
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
        placed: Any = by_node.get(name, no_tasks)
        # (`name in redo` is a belt to the count's braces: a task whose template is to be made again
        # is neither placed nor counted ended, so its node's count falls short anyway; the tests pass
        # without it.  It is kept to say the reason, and the oracle test checks the set node by node.)
        if redo is None or name in redo or len(placed) + ended.get(name, 0) != len(keys):
            # (the pass off, a template to make again, or not the cache's index): task by task
            if len(keys) > 1:
                keys = sorted(keys, key=seq.__getitem__)
            placed = []
            for tkey in keys:
                tspec = task_specs[tkey]
                tm = templates.get(tkey)  # (`TaskTemplates._template`)
                if tm is None or tm.spec is not tspec or (tm.owner is not None and tm.owner.written):
                    tm = templates[tkey] = _Template(tspec, task_info(tspec, classes))
                t = tm.task
                if t.status not in completed:
                    placed.append(t)
        if node.listeners or _BINDING in map(_STATUS, placed):
            add_copies(node, [(t, t.copy()) for t in placed])
        else:
            _copy_in(node, placed)
        node.written = False
        node.listeners = listeners
        nodes_memo[name] = (spec, version, index, node)
        memo.assembled_nodes += 1
        out.append(node)
    memo._lent_nodes = out
    memo._node_at = dict(zip([n.name for n in out], itertools.count()))
    return list(out)


def _placed_by_node(cache: Any, templates: dict[str, _Template]
                    ) -> tuple[dict[str, list[TaskInfo]], dict[str, int], set[str]]:
    """For `lend_nodes_cold`: per node, the tasks its loop would place from their templates, in the
    tasks' order (the cache's sequence), from one pass over the tasks instead of a sort and a look-up
    per task in each node; per node how many of its tasks have ended (not placed); and the nodes
    with a template to make again, which the loop does task by task as before (so it makes them in
    the same order as ever: nothing is written here).  A node whose placed and ended tasks do not
    add up to its tasks in the cache's index is done task by task too.

    That check compares counts only, not keys: the pass goes by each spec's node, the per-node loop
    by the cache's index (`node_tasks`), and two errors in the index that cancel out (a task of node
    a listed under b, one of b under a) would pass it, where the per-node loop would refuse the
    task on the wrong node.  No such index is made: the cache keeps the index and the specs' nodes
    in step (`_index_task` on every upsert and delete, `insert_new` for a restart's run of new tasks),
    and that is what this relies on."""
    task_specs, seq = cache.objects["task"], cache.task_seq
    ranks = list(map(seq.__getitem__, task_specs))  # (in C)
    if all(map(operator.lt, ranks, itertools.islice(ranks, 1, None))):
        pairs: Any = task_specs.items()  # (the usual case: the tasks' map is in their order)
    else:
        order = sorted(task_specs, key=seq.__getitem__)
        pairs = zip(order, map(task_specs.__getitem__, order))
    by_node: dict[str, list[TaskInfo]] = {}
    ended: dict[str, int] = {}
    redo: set[str] = set()
    completed = _COMPLETED
    for tkey, tspec in pairs:
        name = tspec.node
        if not name:
            continue
        tm = templates.get(tkey)
        if tm is None or tm.spec is not tspec or (tm.owner is not None and tm.owner.written):
            redo.add(name)
            continue
        t = tm.task
        if t.status in completed:
            ended[name] = ended.get(name, 0) + 1
            continue
        b = by_node.get(name)
        if b is None:
            by_node[name] = [t]
        else:
            b.append(t)
    return by_node, ended, redo


def _copy_in(node: NodeInfo, tasks: list[TaskInfo]) -> None:
    """``assemble.add_copies(node, [(t, t.copy()) for t in tasks])`` for a node without listeners and
    tasks none of which is Binding, each copy made as its task is accounted (no list of pairs): the
    same checks, sums and maps in the same order."""
    name, own = node.name, node.tasks
    idle, used, releasing, pipelined = node.idle, node.used, node.releasing, node.pipelined
    ic, im, is_ = idle.cpu, idle.memory, idle.scalars
    uc, um, us = used.cpu, used.memory, used.scalars
    try:
        for task in tasks:
            ti = task.copy()
            if task.node_name and task.node_name != name:
                raise NodeAccountingError(f"task {task.key} already on different node {task.node_name}")
            uid = ti.uid
            if uid in own:
                raise NodeAccountingError(f"task {task.key} already on node {name}")
            if not node.written:
                node._first_write()  # (a map of its own: read it again)
                own = node.tasks
            s, req = ti.status, ti.resreq
            if s == _PIPELINED:
                pipelined.add(req)
            else:  # idle.sub(req), used.add(req), and the releasing part
                ic -= req.cpu
                im -= req.memory
                scalars = req.scalars
                if scalars:
                    if is_:  # (both maps in one loop: each gets the same changes in the same order)
                        for n, v in scalars.items():
                            is_[n] = is_.get(n, 0.0) - v
                            us[n] = us.get(n, 0.0) + v
                    else:
                        for n, v in scalars.items():
                            us[n] = us.get(n, 0.0) + v
                if s == _RELEASING:
                    releasing.add(req)
                uc += req.cpu
                um += req.memory
            task.node_name = name
            ti.node_name = name
            own[uid] = ti
    finally:
        idle.cpu, idle.memory, used.cpu, used.memory = ic, im, uc, um
