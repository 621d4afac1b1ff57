"""drf: dominant resource fairness between jobs (and, with ``enableHierarchy``, between queues).

A job's *share* is its largest allocated/total ratio over the cluster's resource
dimensions.  Jobs with the smaller share go first; a running task may be
preempted when its job's share after losing it is still at least the
preemptor job's share after gaining the new task.  Event handlers keep every
share current as the session allocates and evicts.

Hierarchical DRF (Volcano's HDRF) arranges jobs in a tree given by each queue's
``volcano.sh/hierarchy`` annotation (``root/eng/dev``) with per-level weights
from ``volcano.sh/hierarchy-weights`` (``100/50/50``).  An inner node's
allocation is its non-saturated children rescaled to the smallest child share,
so queues compare by weighted share level by level; saturated subtrees (every
job has what it asked for, or wants a resource that is exhausted) go last.  It
then also provides queue order and reclaimable victims.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from busched.api.job import JobInfo
from busched.api.queue import QueueInfo
from busched.api.resource import Resource
from busched.api.task import TaskInfo, allocated_status
from busched.fastpath.memo import Pairs
from busched.framework import points
from busched.framework.arguments import Arguments
from busched.framework.session import EventHandler, Session
from busched.framework.shares import calculate_share
from busched.plugins.drf import share_table

__all__ = ["DrfPlugin"]

SHARE_DELTA = 0.000001
HIERARCHY_KEY = "volcano.sh/hierarchy"
HIERARCHY_WEIGHTS_KEY = "volcano.sh/hierarchy-weights"


class _HNode:
    """A node of the HDRF tree; a leaf (``children is None``) is one job."""

    __slots__ = ("parent", "attr", "request", "weight", "saturated", "hierarchy", "children")

    def __init__(self, hierarchy: str, attr: share_table._Attr, request: Resource, weight: float,
                 children: dict[str, _HNode] | None, parent: _HNode | None = None) -> None:
        self.parent = parent
        self.attr = attr
        self.request = request
        self.weight = weight
        self.saturated = False
        self.hierarchy = hierarchy
        self.children = children

    def clone(self, parent: _HNode | None = None) -> _HNode:
        n = _HNode(self.hierarchy, self.attr.clone(), self.request.clone(), self.weight, None, parent)
        n.saturated = self.saturated
        if self.children is not None:
            n.children = {k: c.clone(n) for k, c in self.children.items()}
        return n


def _resource_saturated(allocated: Resource, request: Resource, demanding: set[str]) -> bool:
    """A job is saturated once it holds all it asks for in some dimension, or asks for an exhausted one."""
    for rn in allocated.names():
        a, r = allocated.get(rn), request.get(rn)
        if a != 0 and r != 0 and a >= r:
            return True
        if rn not in demanding and r != 0:
            return True
    return False


def _parse_weight(text: str) -> float:
    try:
        w = float(text)
    except ValueError:
        w = 0.0
    return w if w >= 1 else 1.0


class DrfPlugin:
    name = "drf"
    reads_arguments = ()  # every argument it reads (busched.framework.arguments)
    reads_clock = False

    # a first open's table of shares in one loop (`_attrs_of`); False: the reference, ``ssn.memo`` per job
    bulk_open = True

    def __init__(self, arguments: Mapping[str, Any] | None = None) -> None:
        self.arguments = Arguments.of(arguments)
        self.total = Resource()
        self.total_allocated = Resource()
        self.job_attrs: dict[str, share_table._Attr] = {}
        self._private: set[str] = set()  # jobs whose attrs are this session's own (the rest are shared)
        self.root = self._new_root()
        self.hierarchy = False

    @staticmethod
    def _new_root() -> _HNode:
        return _HNode("root", share_table._Attr(), Resource(), 1.0, {})

    # -- shares ---------------------------------------------------------------------------
    def _update_share(self, attr: share_table._Attr) -> None:
        attr.dominant, attr.share = calculate_share(attr.allocated, self.total)

    def share(self, job_uid: str) -> float:
        a = self.job_attrs.get(job_uid)
        return a.share if a is not None else 0.0

    # -- hierarchy ------------------------------------------------------------------------
    def _build_hierarchy(self, root: _HNode, job: JobInfo, attr: share_table._Attr, hierarchy: str,
                         weights: str) -> None:
        node = root
        paths = hierarchy.split("/")
        ws = weights.split("/")
        for i in range(1, len(paths)):
            assert node.children is not None
            child = node.children.get(paths[i])
            if child is None:
                w = _parse_weight(ws[i] if i < len(ws) else "")
                child = _HNode(paths[i], share_table._Attr(), Resource(), w, {}, node)
                node.children[paths[i]] = child
            node = child
        assert node.children is not None
        node.children[job.uid] = _HNode(job.uid, attr, job.total_request.clone(), 1.0, None, node)

    def _update_hierarchical(self, node: _HNode, demanding: set[str]) -> None:
        if node.children is None:
            node.saturated = _resource_saturated(node.attr.allocated, node.request, demanding)
            return
        mdr = 1.0
        for child in node.children.values():
            self._update_hierarchical(child, demanding)
            if child.attr.share != 0 and not child.saturated:
                _, s = calculate_share(child.attr.allocated, self.total)
                mdr = min(mdr, s)
        allocated = Resource()
        saturated = True
        for child in node.children.values():
            if not child.saturated:
                saturated = False
            if child.attr.share != 0:
                if child.saturated:
                    allocated.add(child.attr.allocated)
                else:
                    allocated.add(child.attr.allocated.clone().multi(mdr / child.attr.share))
        node.attr = share_table._Attr(allocated)
        self._update_share(node.attr)
        node.saturated = saturated

    def _update_hierarchical_share(self, root: _HNode, total_allocated: Resource, job: JobInfo, attr: share_table._Attr,
                                   queue: QueueInfo) -> None:
        demanding = {rn for rn in self.total.names() if total_allocated.get(rn) < self.total.get(rn)}
        hierarchy = queue.annotations.get(HIERARCHY_KEY, "")
        weights = queue.annotations.get(HIERARCHY_WEIGHTS_KEY, "")
        self._build_hierarchy(root, job, attr, hierarchy, weights)
        self._update_hierarchical(root, demanding)

    def compare_queues(self, root: _HNode, lq: QueueInfo, rq: QueueInfo) -> float:
        lpaths = lq.annotations.get(HIERARCHY_KEY, "").split("/")
        rpaths = rq.annotations.get(HIERARCHY_KEY, "").split("/")
        ln: _HNode | None = root
        rn: _HNode | None = root
        depth = min(len(lpaths), len(rpaths))
        for i in range(depth):
            if ln is None or rn is None:  # a path with no job under it: no opinion
                return 0.0
            if not ln.saturated and rn.saturated:
                return -1.0
            if ln.saturated and not rn.saturated:
                return 1.0
            lv, rv = ln.attr.share / ln.weight, rn.attr.share / rn.weight
            if lv != rv:
                return lv - rv
            if i < depth - 1:
                ln = (ln.children or {}).get(lpaths[i + 1])
                rn = (rn.children or {}).get(rpaths[i + 1])
        return 0.0

    # -- session --------------------------------------------------------------------------
    def on_session_open(self, ssn: Session) -> None:
        self.total = ssn.total_resource.clone()
        self.total_allocated = Resource()
        self.job_attrs = {}
        self.root = self._new_root()
        self.hierarchy = ssn.switch_on(self.name, "hierarchy")

        self._private = set()
        if not self.hierarchy:
            # each job's share, kept on the job while it and the cluster total do not change, and the
            # whole table while no job changed (busched.fastpath.memo); shared: copied before changed
            t = self.total
            key = ("drf.share", t.cpu, t.memory, tuple(t.scalars.items()))

            # Untouched jobs holding the same allocation share one attr (shared attrs are copied
            # before they change): a big cluster's jobs hold a few different allocations.
            same: dict[tuple[Any, ...], share_table._Attr] = {}

            def attr_of(job: JobInfo) -> share_table._Attr:
                idx = job.status_index
                if len(idx) == 1 and not job.written and allocated_status(next(iter(idx))):
                    a = job.allocated
                    k = (a.cpu, a.memory, *a.scalars.items())
                    attr = same.get(k)
                    if attr is None:
                        attr = same[k] = self._attr_of(job)
                    return attr
                return self._attr_of(job)

            def full(jobs: list[JobInfo]) -> dict[str, share_table._Attr]:
                if not self.bulk_open:
                    return {j.uid: ssn.memo(j, key, attr_of) for j in jobs}
                return share_table._attrs_of(jobs, key, same, self._attr_of)

            def update(table: dict[str, share_table._Attr], pairs: Pairs) -> dict[str, share_table._Attr] | None:
                table = dict(table)
                for _, old, job in pairs:
                    if old is not None and old.uid != job.uid:
                        return None
                    table[job.uid] = ssn.memo(job, key, attr_of)
                return table

            self.job_attrs = dict(ssn.incremental(key, list(ssn.jobs.values()), full, update))
        for job in ssn.jobs.values() if self.hierarchy else ():
            attr = self._attr_of(job)
            self.job_attrs[job.uid] = attr
            self._private.add(job.uid)
            queue = ssn.queues.get(job.queue)
            if queue is not None:
                self.total_allocated.add(attr.allocated)
                self._update_hierarchical_share(self.root, self.total_allocated, job, attr, queue)

        ssn.add_fn(points.PREEMPTABLE, self.name, self._preemptable)
        ssn.add_fn(points.JOB_ORDER, self.name, self._job_order,
                   twin=lambda j: self.share(j.uid))
        if self.hierarchy:
            ssn.add_fn(points.QUEUE_ORDER, self.name, self._queue_order)
            ssn.add_fn(points.RECLAIMABLE, self.name, lambda r, cands: self._reclaimable(ssn, r, cands))

        def on_allocate(task: TaskInfo) -> None:
            self._on_event(ssn, task, +1)

        def on_deallocate(task: TaskInfo) -> None:
            self._on_event(ssn, task, -1)

        def on_run(tasks: list[TaskInfo]) -> None:
            self._on_run(ssn, tasks)

        # the shares are read when jobs and queues are ordered and victims chosen, never inside allocate's
        # turn: they may hear of its placements once per run (busched.framework.runs)
        ssn.add_event_handler(EventHandler(allocate=on_allocate, deallocate=on_deallocate, allocate_run=on_run))

    def on_session_close(self, ssn: Session) -> None:
        self.total = Resource()
        self.total_allocated = Resource()
        self.job_attrs = {}
        self.root = self._new_root()

    def _attr_of(self, job: JobInfo) -> share_table._Attr:
        idx = job.status_index
        if len(idx) == 1 and not job.written and allocated_status(next(iter(idx))):
            # untouched since assembled, all tasks in one allocated status: the loop below would sum
            # the very requests the job's ``allocated`` summed, in the same order (from zero: a copy)
            attr = share_table._Attr(job.allocated.clone())
        else:
            attr = share_table._Attr()
            for status, tasks in idx.items():
                if allocated_status(status):
                    for t in tasks.values():
                        attr.allocated.add(t.resreq)
        self._update_share(attr)
        return attr

    # -- callbacks ------------------------------------------------------------------------
    def _job_order(self, l: JobInfo, r: JobInfo) -> int:
        ls, rs = self.share(l.uid), self.share(r.uid)
        if ls == rs:
            return 0
        return -1 if ls < rs else 1

    def _queue_order(self, l: QueueInfo, r: QueueInfo) -> int:
        ret = self.compare_queues(self.root, l, r)
        return -1 if ret < 0 else (1 if ret > 0 else 0)

    def _preemptable(self, preemptor: TaskInfo, preemptees: list[TaskInfo]) -> tuple[list[TaskInfo], int]:
        latt = self.job_attrs.get(preemptor.job)
        if latt is None:
            return [], 1
        _, ls = calculate_share(latt.allocated.clone().add(preemptor.resreq), self.total)
        allocations: dict[str, Resource] = {}
        victims = []
        for t in preemptees:
            if t.job not in allocations:
                ratt = self.job_attrs.get(t.job)
                if ratt is None:
                    continue
                allocations[t.job] = ratt.allocated.clone()
            ralloc = allocations[t.job].sub(t.resreq)
            _, rs = calculate_share(ralloc, self.total)
            if ls < rs or abs(ls - rs) <= SHARE_DELTA:
                victims.append(t)
        return victims, 1

    def _reclaimable(self, ssn: Session, reclaimer: TaskInfo, reclaimees: list[TaskInfo]) -> tuple[list[TaskInfo], int]:
        ljob = ssn.jobs.get(reclaimer.job)
        lqueue = ssn.queues.get(ljob.queue) if ljob is not None else None
        attr = self.job_attrs.get(reclaimer.job)
        if ljob is None or lqueue is None or attr is None:
            return [], 1
        total_allocated = self.total_allocated.clone()
        root = self.root.clone()
        lattr = share_table._Attr(attr.allocated.clone().add(reclaimer.resreq))
        total_allocated.add(reclaimer.resreq)
        self._update_share(lattr)
        self._update_hierarchical_share(root, total_allocated, ljob, lattr, lqueue)

        victims = []
        for t in reclaimees:
            rjob = ssn.jobs.get(t.job)
            rqueue = ssn.queues.get(rjob.queue) if rjob is not None else None
            rbase = self.job_attrs.get(t.job)
            if rjob is None or rqueue is None or rbase is None:
                continue
            # what the queues would look like with this one task gone ...
            total_allocated.sub(t.resreq)
            rattr = share_table._Attr(rbase.allocated.clone().sub(t.resreq))
            self._update_share(rattr)
            self._update_hierarchical_share(root, total_allocated, rjob, rattr, rqueue)
            ret = self.compare_queues(root, lqueue, rqueue)
            # ... and back as it was before the next candidate
            total_allocated.add(t.resreq)
            rattr.allocated.add(t.resreq)
            self._update_share(rattr)
            self._update_hierarchical_share(root, total_allocated, rjob, rattr, rqueue)
            if ret < 0:
                victims.append(t)
        return victims, 1

    def _on_run(self, ssn: Session, tasks: list[TaskInfo]) -> None:
        """`_on_event` (+1) for each task in order: the same additions to each job's allocated, and each
        touched job's share computed once, from its last allocated, as the last event would."""
        if self.hierarchy:  # the hierarchy's shares follow every event: one by one
            for task in tasks:
                self._on_event(ssn, task, +1)
            return
        touched: dict[str, share_table._Attr] = {}
        for task in tasks:
            uid = task.job
            attr = touched.get(uid)
            if attr is None:
                attr = self.job_attrs.get(uid)
                if ssn.jobs.get(uid) is None or attr is None:
                    continue
                if uid not in self._private:
                    attr = self.job_attrs[uid] = attr.clone()
                    self._private.add(uid)
                touched[uid] = attr
            attr.allocated.add(task.resreq)
        for attr in touched.values():
            self._update_share(attr)

    def _on_event(self, ssn: Session, task: TaskInfo, sign: int) -> None:
        job = ssn.jobs.get(task.job)
        attr = self.job_attrs.get(task.job)
        if job is None or attr is None:
            return
        if task.job not in self._private:  # a share other sessions hold: this session's own copy
            attr = self.job_attrs[task.job] = attr.clone()
            self._private.add(task.job)
        if sign > 0:
            attr.allocated.add(task.resreq)
        else:
            attr.allocated.sub(task.resreq)
        self._update_share(attr)
        if self.hierarchy:
            queue = ssn.queues.get(job.queue)
            if queue is not None:
                if sign > 0:
                    self.total_allocated.add(task.resreq)
                else:
                    self.total_allocated.sub(task.resreq)
                self._update_hierarchical_share(self.root, self.total_allocated, job, attr, queue)
