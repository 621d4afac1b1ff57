"""Queue accounting for the capacity plugin: per-queue attributes, flat and hierarchical.

Each queue the plugin tracks gets a `QueueAttr`: what it deserves, what it may
use at most (``capability`` as configured, ``real_capability`` once guarantees
and the parent's limit are taken into account), what is allocated, requested,
reserved by admitted jobs (``inqueue``) and running above job minimums
(``elastic``).

Flat mode (`build_flat`) tracks the queues that have jobs; each queue's real
capability is the cluster total minus everyone's guarantees plus its own,
capped by its capability, and its deserved is capped by that.

Hierarchical mode (`build_hierarchy`) tracks every queue as a tree under the
``root`` queue.  Jobs may only sit in leaves; a leaf's usage counts in every
ancestor.  A child inherits the cpu, memory and scalar capability its parent
has and it does not set; its real capability is the parent's real capability
minus the sum of the siblings' guarantees plus its own guarantee, capped by its
capability.  The root's deserved and guarantee become the sums of its
children's; an unset root capability is unlimited.

The resource helpers at the bottom reproduce Volcano's arithmetic where it
differs from `Resource`'s generic methods in which scalar names a result
carries (absent and zero are not the same to an "infinity" comparison).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from busched.api.job import JobInfo, PodGroupPhase
from busched.api.queue import QueueInfo
from busched.api.resource import CPU, GO_INFINITY, INFINITY, MEMORY, MIN_RESOURCE, PODS, Resource, exceeded_part, res_max
from busched.api.task import TaskStatus, allocated_status
from busched.fastpath.memo import Pairs, Sum

__all__ = ["ROOT_QUEUE", "QueueAttr", "HierarchyError", "build_flat", "build_hierarchy", "update_share",
           "compare_share", "queue_level", "ancestor_at_depth", "ancestors_by_level", "exceeded_part", "res_max",
           "greater_partly_with_relevant_dimensions", "less_equal_partly_with_dimension_zero_filtered",
           "intersection", "MAX_FLOAT", "MAX_INT64"]

ROOT_QUEUE = "root"
MAX_FLOAT = sys.float_info.max  # Go's math.MaxFloat64: "unlimited" cpu / memory
MAX_INT64 = float(2**63 - 1)  # Go's math.MaxInt64: "unlimited" scalar


class HierarchyError(ValueError):
    """The queue tree is unusable (missing parent or root, a cycle, a job in a non-leaf queue)."""


@dataclass(eq=False)
class QueueAttr:
    queue_id: str
    name: str
    deserved: Resource
    guarantee: Resource
    capability: Resource | None = None
    real_capability: Resource | None = None
    allocated: Resource = field(default_factory=Resource)
    request: Resource = field(default_factory=Resource)
    elastic: Resource = field(default_factory=Resource)
    inqueue: Resource = field(default_factory=Resource)
    share: float = 0.0
    ancestors: list[str] = field(default_factory=list)  # root first, parent last
    children: dict[str, QueueAttr] = field(default_factory=dict)

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def __repr__(self) -> str:
        return (f"QueueAttr({self.name} deserved={self.deserved} real_capability={self.real_capability} "
                f"allocated={self.allocated} inqueue={self.inqueue} share={self.share:.3f})")


# -- job contributions ---------------------------------------------------------------------------


def add_job_usage(attr: Any, job: JobInfo, phase: str | None = None) -> None:
    """Add one job's allocated / requested / reserved / elastic resources to its queue's totals
    (``attr`` has those four Resources; capacity and proportion account the same way).  ``phase``:
    the podgroup phase to account it in (the job's own by default)."""
    if phase is None:
        phase = job.phase
    allocated, request = attr.allocated.add, attr.request.add  # (a first open calls this for every job)
    for status, tasks in job.status_index.items():
        if allocated_status(status):
            for t in tasks.values():
                allocated(t.resreq)
                request(t.resreq)
        elif status == TaskStatus.Pending:
            for t in tasks.values():
                request(t.resreq)
    _add_reserved(attr, job, phase)


def _add_reserved(attr: Any, job: JobInfo, phase: str) -> None:
    """`add_job_usage`'s reserved and elastic parts, the job accounted in ``phase``."""
    if job.min_resources is not None:
        # An admitted job reserves what its minimum still lacks (allocated tasks already count).
        if phase == PodGroupPhase.Inqueue or (
                phase == PodGroupPhase.Running and job.allocated_task_num() >= job.min_available):
            attr.inqueue.add(job.deduct_sch_gated(job.inqueue_resource(job.allocated)))
    if job.min_resources is None:  # what get_elastic_resources gives, without its intermediates
        attr.elastic.add(_above_zero(job.allocated))
    else:
        attr.elastic.add(job.get_elastic_resources())


class Usage:
    """The four totals `add_job_usage` adds to (of one job, or summed over a queue's jobs)."""

    __slots__ = ("allocated", "request", "inqueue", "elastic")

    def __init__(self) -> None:
        self.allocated = Resource()
        self.request = Resource()
        self.inqueue = Resource()
        self.elastic = Resource()

    def parts(self) -> tuple[Resource, Resource, Resource, Resource]:
        return self.allocated, self.request, self.inqueue, self.elastic


def job_usage(job: JobInfo, phase: str | None = None) -> Usage:
    u = Usage()
    idx = job.status_index
    if (phase is None or phase == job.phase) and len(idx) == 1 and not job.written \
            and allocated_status(next(iter(idx))):
        # a job untouched since it was assembled, every task in one allocated status (a running job,
        # most of a big cluster's): `add_job_usage` would sum, from zero, the very requests the job's
        # ``allocated`` summed, in the same order; its reserved and elastic parts are its own
        a = job.allocated
        u.allocated.add(a)
        u.request.add(a)
        if job.min_resources is None:
            u.elastic = _above_zero(a)  # nothing reserved; elastic: what of it is above no minimum
        else:
            _add_reserved(u, job, job.phase)
        return u
    add_job_usage(u, job, phase)
    return u


def _above_zero(a: Resource) -> Resource:
    """``Resource().add(exceeded_part(a, Resource()))``, without the two intermediates."""
    r = Resource()
    if a.cpu > 0:
        r.cpu = a.cpu
    if a.memory > 0:
        r.memory = a.memory
    for name, q in a.scalars.items():
        if q == GO_INFINITY or q > 0:
            r.scalars[name] = q
    return r


class _Queues:
    """Per queue, the four sums (busched.fastpath.memo.Sum), and per job (in session order) its
    queue, the job, its phase when summed and its totals (None until an update needs them)."""

    __slots__ = ("sums", "parts", "exact")

    def __init__(self) -> None:
        self.sums: dict[str, list[Any]] = {}
        self.parts: list[list[Any]] = []  # [queue, job, phase, Usage | None]
        self.exact = True

    def part(self, i: int) -> Usage | None:
        """The totals job ``i`` put in, computed now if they were not: from the job as it was summed,
        which only an unwritten job still is (None otherwise)."""
        entry = self.parts[i]
        if entry[3] is None:
            job = entry[1]
            if job.written:
                return None
            entry[3] = job_usage(job, entry[2])
        return entry[3]

    def check(self) -> bool:
        """Every job's totals looked at once (the first update): can the sums be kept exactly?"""
        if all(s.checked for sums in self.sums.values() for s in sums):
            return self.exact
        by_queue: dict[str, list[Usage]] = {}
        for i, entry in enumerate(self.parts):
            u = self.part(i)
            if u is None:
                self.exact = False
                return False
            by_queue.setdefault(entry[0], []).append(u)
        for q, sums in self.sums.items():
            for k, total in enumerate(sums):
                total.check(u.parts()[k] for u in by_queue.get(q, ()))
        self.exact = all(s.exact for sums in self.sums.values() for s in sums)
        return self.exact

    def usage(self) -> dict[str, Usage]:
        out = {}
        for q, sums in self.sums.items():
            u = out[q] = Usage()
            u.allocated, u.request, u.inqueue, u.elastic = (s.total for s in sums)
        return out


def queue_usage(ssn: Any) -> dict[str, Usage]:
    """Per queue (in the order of their first job), `add_job_usage` over its jobs.

    Summed task by task (as Volcano does) when the jobs are new; kept from session to session
    and updated for the jobs that changed (busched.fastpath.memo), by taking a changed job's
    totals out of its queue's sums and putting its new totals in.  That adds the same numbers in
    another order: exactly what adding task by task gives while every value is a whole number
    (requests are whole milli-cpus, bytes and milli-units) and the scalar names line up
    (`busched.fastpath.memo.Sum`, checked over every job once, at the first update); otherwise it is summed task
    by task again.  Shared: callers copy what they change.
    """
    def full(jobs: list[JobInfo]) -> tuple[_Queues, dict[str, Usage]]:
        qs = _Queues()
        exact: dict[str, Usage] = {}
        for job in jobs:
            q = exact.get(job.queue)
            if q is None:
                q = exact[job.queue] = Usage()
            u = None
            if job.written:
                # a job a session writes (volatile ones: busched.fastpath.lending) will not be as summed
                # later: its totals are kept now.  With at most one task each total gets one addition
                # from it, so adding its totals is adding it task by task, to the bit.
                u = job_usage(job)
                if len(job.tasks) <= 1:
                    for total, part in zip(q.parts(), u.parts()):
                        total.add(part)
                else:
                    add_job_usage(q, job)
            else:
                add_job_usage(q, job)
            qs.parts.append([job.queue, job, job.phase, u])
        for q, u in exact.items():
            sums = qs.sums[q] = [Sum() for _ in range(4)]
            for total, part in zip(sums, u.parts()):
                total.total = part.clone()
        return qs, exact

    def update(last: tuple[_Queues, dict[str, Usage]], pairs: Pairs) -> Any:
        old = last[0]
        if not old.check():
            return None
        qs = _Queues()
        qs.sums = {q: [s.copy() for s in sums] for q, sums in old.sums.items()}
        qs.parts = list(old.parts)  # entries are replaced, never changed but to fill in totals
        for i, _, job in pairs:
            if i < len(qs.parts):
                queue = qs.parts[i][0]
                u = qs.part(i)
                if queue != job.queue or u is None:
                    return None  # the queue's first job may move, or the totals are gone: sum afresh
                for total, part in zip(qs.sums[queue], u.parts()):
                    if not total.take(part):
                        return None
            sums = qs.sums.get(job.queue)
            if sums is None:  # a queue whose first job is this newcomer, the last one
                sums = qs.sums[job.queue] = [Sum() for _ in range(4)]
                for total in sums:
                    total.check(())
            u = job_usage(job)
            for total, part in zip(sums, u.parts()):
                total.put(part)
            entry = [job.queue, job, job.phase, u]
            if i < len(qs.parts):
                qs.parts[i] = entry
            else:
                qs.parts.append(entry)
        if not all(s.exact for sums in qs.sums.values() for s in sums):
            return None
        return qs, qs.usage()

    return ssn.incremental("queue.usage", list(ssn.jobs.values()), full, update)[1]


def _task_by_task(jobs: list[JobInfo]) -> dict[str, Usage]:
    """`add_job_usage` over every job in order: the sum `queue_usage` is tested against."""
    out: dict[str, Usage] = {}
    for job in jobs:
        q = out.get(job.queue)
        if q is None:
            q = out[job.queue] = Usage()
        add_job_usage(q, job)
    return out


# -- flat ------------------------------------------------------------------------------------------


def _res(r: Resource | None) -> Resource:
    return r.clone() if r is not None else Resource()


def build_flat(queues: dict[str, QueueInfo], jobs: dict[str, JobInfo], total: Resource) -> dict[str, QueueAttr]:
    """Attributes for every queue that has a job (Volcano's buildQueueAttrs)."""
    total_guarantee = Resource()
    for q in queues.values():
        if q.guarantee_list and q.guarantee is not None:
            total_guarantee.add(q.guarantee)
    attrs: dict[str, QueueAttr] = {}
    for job in jobs.values():
        attr = attrs.get(job.queue)
        if attr is None:
            q = queues.get(job.queue)
            if q is None:
                continue
            attr = QueueAttr(q.uid, q.name, deserved=_res(q.deserved), guarantee=Resource())
            if q.capability_list:
                attr.capability = _res(q.capability)
                if attr.capability.cpu <= 0:
                    attr.capability.cpu = MAX_FLOAT
                if attr.capability.memory <= 0:
                    attr.capability.memory = MAX_FLOAT
            if q.guarantee_list:
                attr.guarantee = _res(q.guarantee)
            real = exceeded_part(total, total_guarantee).add(attr.guarantee)
            if attr.capability is None:
                attr.capability = Resource()
            else:
                real.min_dimension(attr.capability, INFINITY)
            attr.real_capability = real
            attrs[job.queue] = attr
        add_job_usage(attr, job)
    for attr in attrs.values():
        if attr.real_capability is not None:
            attr.deserved.min_dimension(attr.real_capability, INFINITY)
        attr.deserved = res_max(attr.deserved, attr.guarantee)
        update_share(attr)
    return attrs


# -- hierarchical ------------------------------------------------------------------------------------


def _new_tree_attr(q: QueueInfo) -> QueueAttr:
    attr = QueueAttr(q.uid, q.name, deserved=_res(q.deserved), guarantee=Resource(), capability=Resource(),
                     real_capability=Resource())
    if q.capability_list:
        attr.capability = _res(q.capability)
    if q.guarantee_list:
        attr.guarantee = _res(q.guarantee)
    return attr


def build_hierarchy(queues: dict[str, QueueInfo], jobs: dict[str, JobInfo], total: Resource,
                    root: str = ROOT_QUEUE) -> dict[str, QueueAttr]:
    """Attributes for every queue, linked as a tree under ``root`` (buildHierarchicalQueueAttrs).

    Raises `HierarchyError` when the tree cannot be used; the plugin then refuses everything.
    """
    attrs: dict[str, QueueAttr] = {}

    def link(q: QueueInfo, visiting: set[str]) -> None:
        if q.name == root:
            return
        if q.uid in visiting:
            raise HierarchyError(f"cycle detected in queue hierarchy for queue {q.name}")
        visiting.add(q.uid)
        try:
            parent_id = q.parent or root
            parent = queues.get(parent_id)
            if parent is None:
                raise HierarchyError(f"the queue {q.name} has invalid parent queue {parent_id}")
            if parent.uid not in attrs:
                attrs[parent.uid] = _new_tree_attr(parent)
                link(parent, visiting)
            pattr = attrs[parent.uid]
            pattr.children[q.uid] = attrs[q.uid]
            attrs[q.uid].ancestors = [*pattr.ancestors, parent.uid]
        finally:
            visiting.discard(q.uid)

    for q in queues.values():
        if q.uid in attrs:
            continue
        attrs[q.uid] = _new_tree_attr(q)
        link(q, set())

    for job in jobs.values():
        attr = attrs.get(job.queue)
        if attr is None:
            continue  # the job's queue is gone; nothing to account
        if attr.children:
            raise HierarchyError(f"the queue {attr.name} of job {job.uid} is not a leaf queue")
        before = (attr.allocated.clone(), attr.request.clone(), attr.inqueue.clone(), attr.elastic.clone())
        add_job_usage(attr, job)
        deltas = (attr.allocated.clone().sub(before[0]), attr.request.clone().sub(before[1]),
                  attr.inqueue.clone().sub(before[2]), attr.elastic.clone().sub(before[3]))
        for aid in attr.ancestors:
            a = attrs[aid]
            a.allocated.add(deltas[0])
            a.request.add(deltas[1])
            a.inqueue.add(deltas[2])
            a.elastic.add(deltas[3])

    rattr = attrs.get(root)
    if rattr is None:
        raise HierarchyError(f"root queue {root!r} not found")
    if rattr.capability is None or rattr.capability.is_empty():
        inf = Resource(MAX_FLOAT, MAX_FLOAT, None, 2**63 - 1)
        for name in total.scalars:
            inf.scalars[name] = MAX_INT64
        rattr.capability = inf
    rattr.real_capability = rattr.capability
    _settle_children(rattr, root)
    for attr in attrs.values():
        update_share(attr)
    return attrs


def _settle_children(attr: QueueAttr, root: str) -> None:
    """Top-down: children's deserved >= guarantee, inherited capability, real capability."""
    cap = attr.capability if attr.capability is not None else Resource()
    total_guarantee = Resource()
    total_deserved = Resource()
    for child in attr.children.values():
        child.deserved = res_max(child.deserved, child.guarantee)
        total_deserved.add(child.deserved)
        total_guarantee.add(child.guarantee)
        ccap = child.capability if child.capability is not None else Resource()
        if ccap.cpu <= 0:
            ccap.cpu = cap.cpu
        if ccap.memory <= 0:
            ccap.memory = cap.memory
        for name, v in cap.scalars.items():
            ccap.scalars.setdefault(name, v)
        child.capability = ccap
    if attr.name == root:
        attr.guarantee = total_guarantee
        attr.deserved = total_deserved
    parent_real = attr.real_capability if attr.real_capability is not None else Resource()
    for child in attr.children.values():
        real = exceeded_part(parent_real, total_guarantee).add(child.guarantee)
        real.min_dimension(child.capability, INFINITY)  # type: ignore[arg-type]
        child.real_capability = real
    for child in attr.children.values():
        _settle_children(child, root)


# -- share and ordering ----------------------------------------------------------------------------------


def _share(l: float, r: float) -> float:
    if r == 0:
        return 0.0 if l == 0 else 1.0
    return l / r


def update_share(attr: QueueAttr) -> None:
    """A queue's share is its dominant allocated/deserved ratio; a queue deserving nothing has share 1."""
    if attr.deserved.is_empty():
        attr.share = 1.0
        return
    share = 0.0
    for n in attr.deserved.names():
        share = max(share, _share(attr.allocated.get(n), attr.deserved.get(n)))
    attr.share = share


def compare_share(l: QueueAttr, r: QueueAttr) -> int:
    """Lower share first; at equal share a queue with a deserved goes before a best-effort one."""
    if l.share == r.share:
        lh, rh = not l.deserved.is_empty(), not r.deserved.is_empty()
        if lh == rh:
            return 0
        return -1 if lh else 1
    return -1 if l.share < r.share else 1


def queue_level(l: QueueAttr, r: QueueAttr) -> int:
    """Index of the deepest common ancestor of two queues' ancestor lists (getQueueLevel)."""
    level = 0
    for i in range(min(len(l.ancestors), len(r.ancestors))):
        if l.ancestors[i] != r.ancestors[i]:
            return level
        level = i
    return level


def ancestor_at_depth(attr: QueueAttr | None, depth: int) -> str | None:
    """The ancestor ``depth`` levels up (1 = parent), None when there is none."""
    if attr is None or depth <= 0 or len(attr.ancestors) < depth:
        return None
    return attr.ancestors[len(attr.ancestors) - depth]


def ancestors_by_level(attr: QueueAttr | None, max_level: int) -> dict[int, str]:
    out: dict[int, str] = {}
    for level in range(1, max_level + 1):
        a = ancestor_at_depth(attr, level)
        if a is not None:
            out[level] = a
    return out


# -- Volcano's resource arithmetic where key presence matters ------------------------------------------------


def _dims(req: Resource) -> list[str]:
    out = []
    if req.cpu > 0:
        out.append(CPU)
    if req.memory > 0:
        out.append(MEMORY)
    out.extend(n for n, v in req.scalars.items() if n != PODS and v > 0)
    return out


def greater_partly_with_relevant_dimensions(r: Resource, rr: Resource | None,
                                            req: Resource | None) -> tuple[bool, list[str]]:
    """Is ``r`` above ``rr`` on a dimension ``req`` asks for and ``rr`` actually has?

    cpu / memory count only where ``rr`` holds at least `MIN_RESOURCE`; a scalar only
    where ``rr`` names it (even at zero).
    """
    if req is None:
        return False, []
    rr = rr if rr is not None else Resource()
    bad = []
    for name in _dims(req):
        if name == CPU and rr.cpu < MIN_RESOURCE:
            continue
        if name == MEMORY and rr.memory < MIN_RESOURCE:
            continue
        if name not in (CPU, MEMORY) and name not in rr.scalars:
            continue
        if r.get(name) > rr.get(name):
            bad.append(name)
    return bool(bad), bad


def less_equal_partly_with_dimension_zero_filtered(r: Resource, rr: Resource,
                                                   req: Resource | None) -> tuple[bool, list[str]]:
    """Is ``r`` at most ``rr`` on some dimension ``req`` asks for, ignoring dimensions zero on both sides?"""
    if req is None:
        return False, []
    ok = []
    for name in _dims(req):
        lv, rv = r.get(name), rr.get(name)
        if lv < MIN_RESOURCE and rv < MIN_RESOURCE:
            continue
        if lv < rv or abs(lv - rv) < MIN_RESOURCE:
            ok.append(name)
    return bool(ok), ok


def intersection(r1: Resource, r2: Resource, ignore_pods: bool = False) -> list[str]:
    """Resource names (at least `MIN_RESOURCE`) present in both."""
    names2 = set(r2.names())
    out = [n for n in r1.names() if n in names2]
    if ignore_pods:
        out = [n for n in out if n != PODS]
    return out
