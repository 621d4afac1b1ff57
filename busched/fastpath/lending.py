"""Shared snapshots: sessions borrow the same job and node objects cycle after cycle.

Replaces, in `Cache.snapshot`, the conversion of every object each cycle (the
plain loop is kept as ``Cache.snapshot(memo=False)``, the reference).  A job
is assembled (converted, its tasks converted and added, its aggregates
summed) once per version: the cache bumps a job's version whenever its spec or
one of its tasks' specs changes, and a node's whenever its spec or a task
placed on it changes.  Sessions then get those very objects, not copies.

Why lend rather than copy on write: actions, the statement and the plugins
hold references to jobs, tasks and nodes across writes (a job taken from a
queue is asked ``job_ready`` after its tasks were allocated), so an object
replaced by a private copy at its first write would leave stale references
behind.  Lending keeps every object's identity for the whole session, so a
session decides exactly what it decides on private copies; what it must do is
say what it wrote.  Writes to a job or a node go through ``add_task`` /
``delete_task`` / ``remove_task``, which set the object's ``written`` flag;
the next snapshot assembles every written object afresh (it never sees what a
session did).  A node's first write also puts a new task map in place, so the
map a session's pod view read at open stays as it was.  What a session changes
on many objects needs no flag:

* ``phase`` and ``conditions`` are the session's output (close writes them;
  gang replaces the list rather than changing it), and are put back to the
  spec's on every lending: every job's conditions (gang gives each ready job a
  new list each session), the phases of the jobs the log names;
* ``derived`` holds the log (busched.api.outputs): a job appends itself at its
  first write, and close says which outputs it changed, so the written jobs
  are found without asking every job (``logged`` False: the reference, asks);
* ``listeners`` (the session's node arrays): every lent node holds one shared
  list, emptied at once on every lending; its first listener notes the nodes a
  session changed, which the next patch looks at again (no node is asked);
* ``derived`` (busched.fastpath.memo) is a cache of what the task index
  gives, emptied by the task index itself.

A job that a session will write anyway, or whose state this module does not
follow, is *volatile* (`busched.api.job.unsettled`) and flagged written as it
is lent: a pending podgroup (enqueue admits it), any task that allocate or
backfill may place (Pending, Pipelined, Allocated), sub-group policies and
network topology (sub-job bookkeeping changes in place).  A settled job
(everything running) is written only when one of its tasks is evicted.

A cold lending (a restart) costs one assembly per job, not two conversions: a job's first
assembly starts from the conversions the cache made to validate it (`remember_job`,
`remember_task`).  A settled job gets the task templates themselves; as they may then change
with the job in a session, a template handed to a job that comes back written is converted
again from its spec before anything else uses it.  A job that is or will be volatile gets
copies, so its templates stay as converted for its next assembly.

A lent object may be lent again only once the session that borrowed it closed
(``Lease.closed``, set by `Session.close`, or `ClusterSnapshot.release` for a
reader that only looked).  A snapshot no session opened counts as only read:
the next snapshot lends its objects again and marks it superseded, and a
session refuses to open over it (two snapshots taken first and run later
would share objects).  A snapshot wanted while a session over the lending
runs (a query during a cycle in another thread) is converted afresh, apart
(`busy`); one taken after a session that failed (opened, never closed)
assembles everything afresh.  A caller
may see one consequence of lending: objects of a closed session are the next
session's, so they show its changes once it runs.  When the last lease came
back and no job was deleted and no node came, went or changed readiness, the
last lending is patched: only the jobs and nodes the cache says changed
(`Cache.take_changes`) and those the session wrote are looked at again.  Verification
(``FastPathSettings(verify=True)``, busched.fastpath) fingerprints every lent object that is not
volatile and, when the lease comes back, raises `SharedStateMutated` naming any object changed
without its flag (busched.fastpath.verify).

`SharedMemo` is one protocol, lend / patch / take back, whose steps must agree on what a
written or volatile object is; it is written in parts: the jobs here, the nodes in
busched.fastpath.lending_nodes, the task templates both are made of in busched.fastpath.templates
(mixins: their methods are the memo's), the lease in busched.fastpath.lease, the verification
in busched.fastpath.verify.
"""

from __future__ import annotations

import itertools
from typing import Any

from busched.api import assemble, settled
from busched.api.job import JobInfo, unsettled
from busched.api.node import NodeInfo
from busched.api.outputs import LOGGED
from busched.api.queue import PriorityClass
from busched.api.task import TaskInfo
from busched.fastpath.lease import Lease
from busched.fastpath.lending_cold import lend_jobs_cold, lend_nodes_cold
from busched.fastpath.lending_nodes import NodeLending, _NodeWrites
from busched.fastpath.templates import TaskTemplates, _fresh_task, _Template
from busched.fastpath.verify import SharedStateMutated, check, check_logged, fingerprint_job, fingerprint_node

__all__ = ["SharedMemo", "Lease", "SharedStateMutated", "fingerprint_job", "fingerprint_node"]


class _Job:
    __slots__ = ("spec", "version", "prio", "job", "phase", "conditions", "volatile")

    def __init__(self, spec: Any, version: int, prio: int, job: JobInfo) -> None:
        self.spec, self.version, self.prio, self.job = spec, version, prio, job
        self.phase = job.phase
        self.conditions = job.conditions
        self.volatile = unsettled(job)


class SharedMemo(TaskTemplates, NodeLending):
    """Kept by a `Cache`: the assembled jobs and nodes, and the task conversions they are made of.

    Lending walks every job and node only when it must (the first time, after a lease that never
    came back, when priority classes, queues or the node set changed, or a job was deleted).
    Otherwise it patches the last lending: the jobs and nodes the cache says changed
    (`busched.cache.cache.Changes`) and those the last session wrote are looked at again, the
    rest are lent as they were (their phase and conditions put back, their shared listener list emptied).
    """

    def __init__(self) -> None:
        self._classes: Any = None
        self._prio: int | None = None
        self._tasks: dict[str, _Template] = {}
        # jobs the cache converted to validate them, used as they are by their first assembly
        self._job_templates: dict[str, tuple[Any, JobInfo]] = {}
        self._jobs: dict[str, _Job] = {}
        self._nodes: dict[str, tuple[Any, int, int, NodeInfo]] = {}
        # nodes the cache converted to validate them, used as they are by their next assembly
        self._node_templates: dict[str, tuple[Any, NodeInfo]] = {}
        self._lease: Lease | None = None
        self._patchable = False
        # the last lending: every job with a spec (key -> job) and what its phase and conditions were
        # (the same key order), the jobs in the session (after the queue filter), the nodes, and
        # each job key's position (its order among the cache's jobs)
        self._lent: dict[str, JobInfo] = {}
        self._outputs: dict[str, tuple[JobInfo, str, list[dict[str, Any]]]] = {}
        self._in_session: dict[str, JobInfo] = {}
        self._queues: frozenset[str] = frozenset()
        self._lent_nodes: list[NodeInfo] = []
        # the one listener list every lent node holds (emptied at once as the nodes are lent again,
        # rather than node by node), its first listener noting which nodes a session changed
        self._node_writes = _NodeWrites()
        self._listeners: list[Any] = [self._node_writes]
        self._node_at: dict[str, int] = {}
        self._pos: dict[str, int] = {}
        # the log every lent job holds in its derived map (busched.api.outputs): jobs written, or whose outputs a
        # session changed; ``logged`` False is the reference (every lent job's outputs put back, and
        # gang and close look at every job: the lease carries no log)
        self._job_log: list[JobInfo] = []
        self.logged = True
        self.plain = False  # the reference passes (every node asked whether it was written), for oracle tests
        # a settled job's default sub-job filled in on its first read (busched.api.settled); False:
        # the reference, assembled eagerly
        self.lazy_sub_jobs = True
        # a cold lending (nothing assembled yet: a restart) in one loop per kind (busched.fastpath.lending_cold);
        # False: the reference, the one-object methods
        self.cold_bulk = True
        # the cold nodes loop takes every node's tasks from one pass over the tasks in their order
        # (busched.fastpath.lending_cold._placed_by_node); False: the reference, a sort per node
        self.one_pass_nodes = True
        # a settled job whose totals may stand for its tasks in the queues' sums certified so as it is
        # assembled (busched.api.settled.summable); False: the reference, every queue summed task by task
        self.job_totals = True
        self.assembled_jobs = 0  # how many jobs the last snapshot had to assemble (tests read it)
        self.assembled_nodes = 0

    def busy(self) -> bool:
        """Whether a session over the last lending is running (another thread's cycle): a snapshot
        wanted meanwhile (a query) must not touch the lent objects, nor end the lending."""
        lease = self._lease
        return lease is not None and lease.in_session and not lease.closed

    def forget(self, kind: str, key: str) -> None:
        """An object deleted from the cache: what was kept for it goes too."""
        memos: dict[str, dict[str, Any]] = {"task": self._tasks, "job": self._jobs, "node": self._nodes}
        memo = memos.get(kind)
        if memo is not None:
            memo.pop(key, None)
        if kind == "job":
            self._job_templates.pop(key, None)
        elif kind == "node":
            self._node_templates.pop(key, None)

    # -- the snapshot ----------------------------------------------------------------------
    def lend(self, cache: Any, classes: dict[str, PriorityClass], default_priority: int,
             queues: frozenset[str], verify: bool = False
             ) -> tuple[list[NodeInfo], dict[str, JobInfo], list[JobInfo], Lease]:
        """Ready nodes (indexed, tasks accounted), the session's jobs (those with a podgroup in one
        of ``queues``) and the unsettled ones among them, all lent; ``verify``: fingerprinted, to be
        checked when the lease comes back."""
        changes = cache.take_changes()
        last = self._lease
        patch = self._take_back(classes, default_priority)
        heard = self._job_log[:]  # what the last session wrote (taken before this lending logs its own)
        self._job_log.clear()
        if last is not None and last.closed and last.prints is not None and last.log is not None:
            check_logged(self._outputs.values(), heard)
        self.assembled_jobs = self.assembled_nodes = 0
        if patch and not changes.nodes_moved:
            nodes = self._patch_nodes(cache, classes, changes.nodes)
        elif self.cold_bulk and not self._nodes:
            nodes = lend_nodes_cold(self, cache, classes)
        else:
            nodes = self._lend_nodes(cache, classes)
        if patch and not changes.jobs_removed and queues == self._queues:
            got = self._patch_jobs(cache, classes, default_priority, changes.jobs, heard)
        else:
            got = None
        if got is None and self.cold_bulk and not self._jobs:
            got = lend_jobs_cold(self, cache, classes, default_priority, queues, _Job)
        elif got is None:
            got = self._lend_jobs(cache, classes, default_priority, queues)
        jobs, volatile = got
        self._queues = queues
        self._forget(cache.objects)
        lease = self._lease = Lease(self._job_log if self.logged else None)
        if verify:
            lease.prints = [("job", j, fingerprint_job(j)) for j in self._lent.values() if not j.written]
            lease.prints += [("node", n, fingerprint_node(n)) for n in nodes]
        return nodes, jobs, volatile, lease

    def _job(self, key: str, spec: Any, cache: Any, classes: dict[str, PriorityClass],
             default_priority: int) -> _Job:
        """The job as kept, or assembled afresh when its spec, a task or the default priority changed,
        or a session wrote it."""
        m = self._jobs.get(key)
        version = cache.job_version.get(key, 0)
        if (m is None or m.spec is not spec or m.version != version or m.prio != default_priority
                or m.job.written):
            task_specs = cache.objects["task"]
            job = self._new_job(key, spec, classes, default_priority)
            # a job that was volatile (or whose spec says it will be) gets copies: the templates stay
            # as converted for the next assembly; a settled one gets the templates themselves
            direct = not ((m is not None and m.volatile) or spec.phase in ("Pending", "")
                          or spec.sub_group_policy or spec.network_topology is not None)
            keys = cache.job_tasks.get(key, ())
            if len(keys) == 2:  # (most jobs of a big cluster hold one or two tasks: no sort call)
                a, b = keys
                seq = cache.task_seq
                keys = (a, b) if seq[a] < seq[b] else (b, a)
            elif len(keys) > 1:
                keys = sorted(keys, key=cache.task_seq.__getitem__)
            tasks: list[TaskInfo] = []
            for tkey in keys:
                tmpl = self._template(tkey, task_specs[tkey], classes)
                if direct:
                    tmpl.owner = job
                    tasks.append(tmpl.task)
                else:
                    tmpl.owner = None  # (an unwritten owner left it as converted)
                    tasks.append(_fresh_task(tmpl.task))
            if direct and self.lazy_sub_jobs and settled.deferrable(job):
                settled.add_tasks_sub_jobs_later(job, tasks)  # (its sub-job filled in on first read)
            else:
                assemble.add_tasks(job, tasks)  # (job.add_task for each, in one loop)
            job.written = False
            if self.logged:
                job.derived = {LOGGED: self._job_log}  # (its first write logs it: busched.api.outputs)
            if direct and self.job_totals and settled.summable(job):
                job.derived[settled.WHOLE] = True
            m = self._jobs[key] = _Job(spec, version, default_priority, job)
            self.assembled_jobs += 1
        else:
            job = m.job
            if job.phase != m.phase:
                job.phase = m.phase
            if job.conditions is not m.conditions:
                job.conditions = m.conditions
        if m.volatile:
            if not job.written and self.logged:
                self._job_log.append(job)  # (the next lending looks at it again)
            job.written = True
        return m

    def _lend_jobs(self, cache: Any, classes: dict[str, PriorityClass], default_priority: int,
                   queues: frozenset[str]) -> tuple[dict[str, JobInfo], list[JobInfo]]:
        lent: dict[str, JobInfo] = {}
        outputs: dict[str, tuple[JobInfo, str, list[dict[str, Any]]]] = {}
        in_session: dict[str, JobInfo] = {}
        volatile: list[JobInfo] = []
        for key, spec in cache.objects["job"].items():
            m = self._job(key, spec, cache, classes, default_priority)
            job = lent[key] = m.job
            outputs[key] = (m.job, m.phase, m.conditions)
            if job.has_podgroup and job.queue in queues:
                in_session[key] = job
                if m.volatile:
                    volatile.append(job)
        self._lent, self._outputs, self._in_session = lent, outputs, in_session
        self._pos = {k: i for i, k in enumerate(lent)}
        return dict(in_session), volatile

    def _patch_jobs(self, cache: Any, classes: dict[str, PriorityClass], default_priority: int,
                    changed: dict[str, None], heard: list[JobInfo]) -> tuple[dict[str, JobInfo], list[JobInfo]] | None:
        """The last lending with the changed and written jobs looked at again; None when it cannot be
        patched in order (a job already lent joined the session).  The written jobs, and those whose
        outputs the last session changed, are those ``heard`` names (the jobs' log); without the log
        (``logged`` False, the reference) every lent job is looked at."""
        lent, outputs, in_session, pos = self._lent, self._outputs, self._in_session, self._pos
        again = dict(changed)
        if self.logged:
            # every job's conditions go back to the spec's (gang gives each ready job a new list every
            # session); the written jobs, and the phases changed, are those logged
            for job, _, conditions in outputs.values():
                if job.conditions is not conditions:
                    job.conditions = conditions
            for job in dict.fromkeys(heard):
                o = outputs.get(job.uid)
                if o is None or o[0] is not job:
                    continue
                if job.written:
                    again[job.uid] = None
                elif job.phase != o[1]:
                    job.phase = o[1]
        else:  # the reference: every job asked
            for job, phase, conditions in outputs.values():
                if job.written:
                    again[job.uid] = None
                else:  # what the last session set as its output goes back to the spec's
                    if job.conditions is not conditions:
                        job.conditions = conditions
                    if job.phase != phase:
                        job.phase = phase
        specs = cache.objects["job"]
        queues = self._queues
        new: list[str] = []
        looked: list[tuple[str, _Job]] = []
        for key in again:
            spec = specs.get(key)
            if spec is None:
                continue  # a task's job without a spec: not lent
            if key not in lent:
                new.append(key)
                continue
            m = self._job(key, spec, cache, classes, default_priority)
            lent[key] = m.job
            outputs[key] = (m.job, m.phase, m.conditions)
            looked.append((key, m))
        if new:  # jobs new to the cache are the last ones it holds (none was deleted)
            tail = list(itertools.islice(reversed(specs), len(new)))[::-1]
            if set(tail) != set(new):
                return None
            for key in tail:
                m = self._job(key, specs[key], cache, classes, default_priority)
                lent[key] = m.job
                outputs[key] = (m.job, m.phase, m.conditions)
                pos[key] = len(pos)
                looked.append((key, m))
        volatile: list[JobInfo] = []
        arrived = set(new)  # a set: thousands of jobs may arrive between two cycles
        for key, m in looked:
            job = m.job
            if job.has_podgroup and job.queue in queues:
                if key not in in_session and key not in arrived:
                    return None  # it would join the session in its place, not at the end
                in_session[key] = job
                if m.volatile:
                    volatile.append(job)
            else:
                in_session.pop(key, None)
        volatile.sort(key=lambda j: pos[j.uid])
        return dict(in_session), volatile

    def _take_back(self, classes: dict[str, PriorityClass], default_priority: int) -> bool:
        """Before lending again: verify the last lease and say whether the last lending can be
        patched; a lease that never came back makes everything assembled afresh."""
        sig = tuple(sorted((k, v.value, v.preemption_policy, v.global_default) for k, v in classes.items()))
        lease, self._lease = self._lease, None
        patch = lease is not None and self._patchable and default_priority == self._prio
        self._patchable = True
        self._prio = default_priority
        if sig != self._classes:
            if self._classes is not None:  # (before the first lending every template is one the
                # cache remembered, and it remembers none with a priority class)
                self._tasks = {k: m for k, m in self._tasks.items() if not m.spec.priority_class_name}
            self._classes = sig
            self._jobs.clear()
            self._nodes.clear()
            patch = False
        if lease is None:
            return False
        if not lease.closed:
            if lease.opened:  # a session that never closed (it failed): what it had is assembled afresh
                self._jobs.clear()
                self._nodes.clear()
                return False
            # a snapshot no session opened was only read (a query): its objects are lent again, and
            # it can no longer be opened (busched.framework.session refuses a superseded lease)
            lease.superseded = True
        if lease.prints is not None:
            check(lease)
        return patch

    def _forget(self, objects: dict[str, dict[str, Any]]) -> None:
        """Drop what belongs to deleted objects (checked only when the counts say some are gone)."""
        for kind, memo in (("task", self._tasks), ("job", self._jobs), ("node", self._nodes)):
            specs = objects[kind]
            if len(memo) > len(specs):
                for k in [k for k in memo if k not in specs]:
                    del memo[k]
