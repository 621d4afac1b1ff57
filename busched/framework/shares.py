"""What a queue's jobs use, and a dominant resource share: the arithmetic several plugins share.

capacity and proportion both account a queue as the sum of its jobs' allocated,
requested, reserved (``inqueue``) and elastic resources (`add_job_usage`,
`job_usage`; the per-queue sums kept across sessions are busched.framework.queue_totals),
and proportion ranks queues by the same dominant resource share (`calculate_share`) drf ranks
jobs by.  In Volcano these live in ``api`` and ``plugins/util``; here they sit in the framework so that no
plugin imports another plugin.
"""

from __future__ import annotations

from typing import Any

from busched.api.job import JobInfo, PodGroupPhase
from busched.api.resource import CPU, GO_INFINITY, MEMORY, MIN_RESOURCE, Resource
from busched.api.task import TaskStatus, allocated_status

__all__ = ["Usage", "add_job_usage", "job_usage", "share_of", "calculate_share",
           "calculate_share_reference"]


# -- dominant resource share ---------------------------------------------------------------------
def share_of(allocated: float, total: float) -> float:
    """Volcano's helpers.Share: l/r, with 0/0 = 0 and x/0 = 1."""
    if total == 0:
        return 0.0 if allocated == 0 else 1.0
    return allocated / total


def calculate_share(allocated: Resource, total: Resource) -> tuple[str, float]:
    """The dominant resource and its share, over the dimensions the cluster has.

    ``total.names()`` in its order (cpu, memory, scalars), read field by field: every task
    placed or removed asks this again, and the name list and ``get`` calls were most of it."""
    res, dominant = 0.0, ""
    t = total.cpu
    if t >= MIN_RESOURCE:  # t > 0: share_of is the plain division
        s = allocated.cpu / t
        if s > res:
            res, dominant = s, CPU
    t = total.memory
    if t >= MIN_RESOURCE:
        s = allocated.memory / t
        if s > res:
            res, dominant = s, MEMORY
    if total.scalars:
        have = allocated.scalars
        for rn, t in total.scalars.items():
            if t >= MIN_RESOURCE and rn != CPU and rn != MEMORY:  # get() would read the fields
                s = share_of(have.get(rn, 0.0), t)
                if s > res:
                    res, dominant = s, rn
    return dominant, res


def calculate_share_reference(allocated: Resource, total: Resource) -> tuple[str, float]:
    """`calculate_share` as the plain walk over ``total.names()`` (tests compare the two)."""
    res, dominant = 0.0, ""
    for rn in total.names():
        s = share_of(allocated.get(rn), total.get(rn))
        if s > res:
            res, dominant = s, rn
    return dominant, res


# -- job contributions ---------------------------------------------------------------------------


def add_job_usage(attr: Any, job: JobInfo, phase: str | None = None) -> None:
    """Add one job's allocated / requested / reserved / elastic resources to its queue's totals
    (``attr`` has those four Resources; capacity and proportion account the same way).  ``phase``:
    the podgroup phase to account it in (the job's own by default).

    `add_job_usage_plain` written out (a first open calls this for every job of the cluster): the
    task-by-task sums in locals, the same additions in the same order, so the very same floats
    (tests/framework/test_shares_bulk.py compares the two)."""
    if phase is None:
        phase = job.phase
    alloc, req = attr.allocated, attr.request
    if alloc is req:
        add_job_usage_plain(attr, job, phase)
        return
    ac, am, a_s = alloc.cpu, alloc.memory, alloc.scalars
    rc, rm, r_s = req.cpu, req.memory, req.scalars
    for status, tasks in job.status_index.items():
        if allocated_status(status):
            for t in tasks.values():
                r = t.resreq
                cpu, mem, scalars = r.cpu, r.memory, r.scalars
                ac += cpu
                am += mem
                for n, v in scalars.items():
                    a_s[n] = a_s.get(n, 0.0) + v
                rc += cpu
                rm += mem
                for n, v in scalars.items():
                    r_s[n] = r_s.get(n, 0.0) + v
        elif status == TaskStatus.Pending:
            for t in tasks.values():
                r = t.resreq
                rc += r.cpu
                rm += r.memory
                for n, v in r.scalars.items():
                    r_s[n] = r_s.get(n, 0.0) + v
    alloc.cpu, alloc.memory, req.cpu, req.memory = ac, am, rc, rm
    if job.min_resources is None:  # `_add_reserved`: nothing reserved, elastic the allocated above zero
        _add_elastic(attr.elastic, job.allocated)
    else:
        _add_reserved(attr, job, phase)


def add_job_usage_plain(attr: Any, job: JobInfo, phase: str | None = None) -> None:
    """The reference: `add_job_usage` task by task, through `Resource.add`."""
    if phase is None:
        phase = job.phase
    allocated, request = attr.allocated.add, attr.request.add
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
    # An admitted job reserves what its minimum still lacks (allocated tasks already count).
    if job.min_resources is not None and (phase == PodGroupPhase.Inqueue or (
            phase == PodGroupPhase.Running and job.allocated_task_num() >= job.min_available)):
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


def _add_elastic(e: Resource, a: Resource) -> None:
    """``e.add(_above_zero(a))`` without the intermediate: a job with nothing reserved is elastic by what it
    holds above zero (an infinite scalar counted as is)."""
    e.cpu += a.cpu if a.cpu > 0 else 0.0
    e.memory += a.memory if a.memory > 0 else 0.0
    if a.scalars:
        es = e.scalars
        for name, q in a.scalars.items():
            if q == GO_INFINITY or q > 0:
                es[name] = es.get(name, 0.0) + q


def add_settled_usage(attr: Any, job: JobInfo) -> None:
    """`add_job_usage` for a job whose ``allocated`` may stand for its tasks (`settled.summable`):
    its totals added once each rather than request by request, then its reserved and elastic parts
    as there.  The same sum only while every addend of the queue's is whole (``queue_totals.queue_usage`` checks)."""
    a = job.allocated
    attr.allocated.add(a)
    attr.request.add(a)
    if job.min_resources is None:  # (as `add_job_usage`: nothing reserved, the allocated above zero)
        _add_elastic(attr.elastic, a)
    else:
        _add_reserved(attr, job, job.phase)
