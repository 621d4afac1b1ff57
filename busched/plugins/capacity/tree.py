"""The capacity plugin's queue tree: per-queue attributes, flat and hierarchical.

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

from busched.api.job import JobInfo
from busched.api.queue import QueueInfo
from busched.api.resource import CPU, INFINITY, MEMORY, MIN_RESOURCE, PODS, Resource, exceeded_part, res_max
from busched.framework.shares import add_job_usage

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
            queue = queues.get(job.queue)
            if queue is None:
                continue
            attr = QueueAttr(queue.uid, queue.name, deserved=_res(queue.deserved), guarantee=Resource())
            if queue.capability_list:
                attr.capability = _res(queue.capability)
                if attr.capability.cpu <= 0:
                    attr.capability.cpu = MAX_FLOAT
                if attr.capability.memory <= 0:
                    attr.capability.memory = MAX_FLOAT
            if queue.guarantee_list:
                attr.guarantee = _res(queue.guarantee)
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
