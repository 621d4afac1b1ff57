"""What a queue's jobs use, and a dominant resource share: the arithmetic several plugins share.

capacity and proportion both account a queue as the sum of its jobs' allocated,
requested, reserved (``inqueue``) and elastic resources (`add_job_usage`,
`job_usage`, `queue_usage`), and proportion ranks queues by the same dominant
resource share (`calculate_share`) drf ranks jobs by.  In Volcano these live
in ``api`` and ``plugins/util``; here they sit in the framework so that no
plugin imports another plugin.
"""

from __future__ import annotations

from typing import Any

from busched.api import settled
from busched.api.job import JobInfo, PodGroupPhase
from busched.api.resource import CPU, GO_INFINITY, MEMORY, MIN_RESOURCE, Resource
from busched.api.task import TaskStatus, allocated_status
from busched.fastpath.memo import Pairs
from busched.fastpath.sums import Sum, whole

__all__ = ["Usage", "add_job_usage", "job_usage", "queue_usage", "share_of", "calculate_share",
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


class _Queues:
    """Per queue, the four sums (busched.framework.Sum), and per job (in session order) its
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
        usage: Usage = entry[3]
        return usage

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
    (`busched.fastpath.sums.Sum`, checked over every job once, at the first update); otherwise it is summed task
    by task again.  Shared: callers copy what they change.

    The first sum adds a settled job the lending certified (`settled.WHOLE`: one allocated status,
    whole requests not below zero) by its ``allocated`` rather than task by task: the same sum while
    every addend of its queue is whole and the totals stay in a float's exact range, which is checked
    per queue (else that queue is summed task by task again); tests/framework/test_queue_totals.py.
    """
    def full(jobs: list[JobInfo]) -> tuple[_Queues, dict[str, Usage]]:
        qs = _Queues()
        exact: dict[str, Usage] = {}
        lumped: set[str] = set()  # the queues a settled job's totals were added to for its tasks
        others: dict[str, list[JobInfo]] = {}  # per queue, the jobs summed task by task
        # written one-task jobs' totals, by shape (`usage_alike`); PLAIN_ALIKE: each its own, `Resource.add`
        alike: dict[tuple[Any, ...], tuple[Usage, bool]] | None = None if PLAIN_ALIKE else {}
        whole_key = settled.WHOLE
        for job in jobs:
            name = job.queue
            q = exact.get(name)
            if q is None:
                q = exact[name] = Usage()
            u = None
            if not job.written and whole_key in job.derived:
                if job.min_resources is not None:
                    add_settled_usage(q, job)
                else:  # (`add_settled_usage` written out for the most common job, no minimum)
                    a = job.allocated
                    c, m = a.cpu, a.memory
                    t = q.allocated
                    t.cpu += c
                    t.memory += m
                    t2 = q.request
                    t2.cpu += c
                    t2.memory += m
                    e = q.elastic
                    e.cpu += c if c > 0 else 0.0
                    e.memory += m if m > 0 else 0.0
                    scalars = a.scalars
                    if scalars:
                        ts, rs, es = t.scalars, t2.scalars, e.scalars
                        for n, v in scalars.items():  # (each map gets the names in the same order)
                            ts[n] = ts.get(n, 0.0) + v
                            rs[n] = rs.get(n, 0.0) + v
                            if v == GO_INFINITY or v > 0:
                                es[n] = es.get(n, 0.0) + v
                lumped.add(name)
            else:
                u = _add_one(q, job, alike)
                o = others.get(name)
                if o is None:
                    others[name] = [job]
                else:
                    o.append(job)
            qs.parts.append([name, job, job.phase, u])
        for name in lumped:
            # a settled job's totals stood for its tasks: the very sum task by task gives while every
            # addend is whole and the totals stay in a float's exact range; else the queue again
            usage = exact[name]
            if not (whole(usage.allocated) and whole(usage.request)
                    and all(_whole_tasks(j) for j in others.get(name, ()))):
                usage = exact[name] = Usage()
                for entry in qs.parts:
                    if entry[0] == name:
                        _add_one(usage, entry[1], alike)
        for name, usage in exact.items():
            sums = qs.sums[name] = [Sum() for _ in range(4)]
            for total, part in zip(sums, usage.parts()):
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

    result: tuple[_Queues, dict[str, Usage]] = ssn.incremental("queue.usage", list(ssn.jobs.values()), full, update)
    return result[1]


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
    as there.  The same sum only while every addend of the queue's is whole (``queue_usage`` checks)."""
    a = job.allocated
    attr.allocated.add(a)
    attr.request.add(a)
    if job.min_resources is None:  # (as `add_job_usage`: nothing reserved, the allocated above zero)
        _add_elastic(attr.elastic, a)
    else:
        _add_reserved(attr, job, job.phase)


PLAIN_ALIKE = False
"""True: `queue_usage` gives each written job its own totals, added through `Resource.add` (the
reference `usage_alike` and `_add_usage` are tested against, tests/framework/test_shares_alike.py)."""


def _add_one(q: Usage, job: JobInfo, alike: dict[tuple[Any, ...], tuple[Usage, bool]] | None = None
             ) -> Usage | None:
    """One job into its queue's totals, task by task; a written job's own totals returned.  ``alike``:
    one-task jobs' totals by what they are made of (`usage_alike`); None: the reference, each its own."""
    if not job.written:
        add_job_usage(q, job)
        return None
    # a job a session writes (volatile ones: busched.fastpath.lending) will not be as summed later:
    # its totals are kept now.  With at most one task each total gets one addition from it, so
    # adding its totals is adding it task by task, to the bit.
    if alike is None:  # the reference: the job's own totals, added through `Resource.add`
        u = job_usage(job)
        if len(job.tasks) <= 1:
            for total, part in zip(q.parts(), u.parts()):
                total.add(part)
        else:
            add_job_usage(q, job)
        return u
    u, requested_only = usage_alike(job, alike)
    if len(job.tasks) <= 1:
        if requested_only:
            # the other three totals are zeros with no scalar: adding one leaves a total as it is (a
            # total summed from +0.0 is never -0.0, and x + 0.0 == x for any other x)
            t, p = q.request, u.request
            t.cpu += p.cpu
            t.memory += p.memory
            if p.scalars:
                ts = t.scalars
                for n, v in p.scalars.items():
                    ts[n] = ts.get(n, 0.0) + v
        else:
            _add_usage(q, u)
    else:
        add_job_usage(q, job)
    return u


def _add_usage(q: Usage, u: Usage) -> None:
    """``total.add(part)`` for the four totals, written out (`Resource.add`'s very additions)."""
    for t, p in ((q.allocated, u.allocated), (q.request, u.request), (q.inqueue, u.inqueue),
                 (q.elastic, u.elastic)):
        t.cpu += p.cpu
        t.memory += p.memory
        if p.scalars:
            ts = t.scalars
            for n, v in p.scalars.items():
                ts[n] = ts.get(n, 0.0) + v


def _nothing(r: Resource) -> bool:
    return r.cpu == 0 and r.memory == 0 and not r.scalars


def usage_alike(job: JobInfo, alike: dict[tuple[Any, ...], tuple[Usage, bool]]) -> tuple[Usage, bool]:
    """``job_usage(job)`` for a written job, shared with the jobs made alike, and whether its totals
    but the requested one are zeros with no scalar (False when not known).

    A written job of one pending task and no minimum has totals that are a function of that task's
    request and of the job's allocated (`add_job_usage`: the request added to the requested total,
    nothing reserved, the allocated above zero elastic): 10,000 arriving jobs of one template are a
    handful of shapes, so their totals are computed once per shape and shared (a `Usage` in the
    queues' parts is only read: `_Queues`, `busched.fastpath.sums.Sum`).  Any other job gets its own
    (the arriving jobs are the pending ones: no other status is looked for).
    tests/framework/test_shares_alike.py compares with `job_usage` on random jobs."""
    idx = job.status_index
    if len(idx) != 1 or job.min_resources is not None:
        return job_usage(job), False
    for status, tasks in idx.items():
        if len(tasks) != 1 or status is not TaskStatus.Pending:
            return job_usage(job), False
        for t in tasks.values():
            r, a = t.resreq, job.allocated
            if r.scalars or a.scalars:
                key: tuple[Any, ...] = (r.cpu, r.memory, a.cpu, a.memory,
                                        tuple(r.scalars.items()), tuple(a.scalars.items()))
            else:
                key = (r.cpu, r.memory, a.cpu, a.memory)
            got = alike.get(key)
            if got is None:
                u = job_usage(job)
                got = alike[key] = (u, _nothing(u.allocated) and _nothing(u.inqueue) and _nothing(u.elastic))
            return got
    return job_usage(job), False  # (not reached: one status)


def _whole_tasks(job: JobInfo) -> bool:
    """Every request a queue's allocated and requested sums take from the job whole (`settled.whole_request`)."""
    for status, tasks in job.status_index.items():
        if allocated_status(status) or status == TaskStatus.Pending:
            for t in tasks.values():
                if not settled.whole_request(t.resreq):
                    return False
    return True


def _task_by_task(jobs: list[JobInfo]) -> dict[str, Usage]:
    """`add_job_usage` over every job in order: the sum `queue_usage` is tested against."""
    out: dict[str, Usage] = {}
    for job in jobs:
        q = out.get(job.queue)
        if q is None:
            q = out[job.queue] = Usage()
        add_job_usage(q, job)
    return out
