"""A queue's totals over the session's jobs: summed once, then kept from session to session.

`busched.framework.shares` holds the arithmetic of one job (what it uses, a dominant share); this
module holds what proportion reads per queue (`queue_usage`): the first open's sum over every job of
the cluster (a settled job by its ``allocated``, written one-task jobs sharing the totals of their
shape, `usage_alike`), and the memo that updates those sums for the jobs that changed instead of
summing afresh.  They live apart because they change for different reasons: the per-job rules
follow Volcano, this part is how busched keeps a first open and a steady session cheap.
"""

from __future__ import annotations

from typing import Any

from busched.api import settled
from busched.api.job import JobInfo
from busched.api.resource import GO_INFINITY, Resource
from busched.api.task import TaskStatus, allocated_status
from busched.fastpath.memo import Pairs
from busched.fastpath.sums import Sum, whole
from busched.framework import shares

__all__ = ["queue_usage", "usage_alike"]


class _Queues:
    """Per queue, the four sums (busched.framework.Sum), and per job (in session order) its
    queue, the job, its phase when summed and its totals (None until an update needs them)."""

    __slots__ = ("sums", "parts", "exact")

    def __init__(self) -> None:
        self.sums: dict[str, list[Any]] = {}
        self.parts: list[list[Any]] = []  # [queue, job, phase, shares.Usage | None]
        self.exact = True

    def part(self, i: int) -> shares.Usage | None:
        """The totals job ``i`` put in, computed now if they were not: from the job as it was summed,
        which only an unwritten job still is (None otherwise)."""
        entry = self.parts[i]
        if entry[3] is None:
            job = entry[1]
            if job.written:
                return None
            entry[3] = shares.job_usage(job, entry[2])
        usage: shares.Usage = entry[3]
        return usage

    def check(self) -> bool:
        """Every job's totals looked at once (the first update): can the sums be kept exactly?"""
        if all(s.checked for sums in self.sums.values() for s in sums):
            return self.exact
        by_queue: dict[str, list[shares.Usage]] = {}
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

    def usage(self) -> dict[str, shares.Usage]:
        out = {}
        for q, sums in self.sums.items():
            u = out[q] = shares.Usage()
            u.allocated, u.request, u.inqueue, u.elastic = (s.total for s in sums)
        return out


def queue_usage(ssn: Any) -> dict[str, shares.Usage]:
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
    def full(jobs: list[JobInfo]) -> tuple[_Queues, dict[str, shares.Usage]]:
        qs = _Queues()
        exact: dict[str, shares.Usage] = {}
        lumped: set[str] = set()  # the queues a settled job's totals were added to for its tasks
        others: dict[str, list[JobInfo]] = {}  # per queue, the jobs summed task by task
        # written one-task jobs' totals, by shape (`usage_alike`); PLAIN_ALIKE: each its own, `Resource.add`
        alike: dict[tuple[Any, ...], tuple[shares.Usage, bool]] | None = None if PLAIN_ALIKE else {}
        whole_key = settled.WHOLE
        for job in jobs:
            name = job.queue
            q = exact.get(name)
            if q is None:
                q = exact[name] = shares.Usage()
            u = None
            if not job.written and whole_key in job.derived:
                if job.min_resources is not None:
                    shares.add_settled_usage(q, job)
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
                usage = exact[name] = shares.Usage()
                for entry in qs.parts:
                    if entry[0] == name:
                        _add_one(usage, entry[1], alike)
        for name, usage in exact.items():
            sums = qs.sums[name] = [Sum() for _ in range(4)]
            for total, part in zip(sums, usage.parts()):
                total.total = part.clone()
        return qs, exact

    def update(last: tuple[_Queues, dict[str, shares.Usage]], pairs: Pairs) -> Any:
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
            u = shares.job_usage(job)
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

    result: tuple[_Queues, dict[str, shares.Usage]] = ssn.incremental("queue.usage", list(ssn.jobs.values()),
                                                                      full, update)
    return result[1]


PLAIN_ALIKE = False
"""True: `queue_usage` gives each written job its own totals, all four added (the reference
`usage_alike`'s shared totals and requested-only addition are tested against,
tests/framework/test_shares_alike.py)."""


def _add_one(q: shares.Usage, job: JobInfo, alike: dict[tuple[Any, ...], tuple[shares.Usage, bool]] | None = None
             ) -> shares.Usage | None:
    """One job into its queue's totals, task by task; a written job's own totals returned.  ``alike``:
    one-task jobs' totals by what they are made of (`usage_alike`); None: the reference, each its own."""
    if not job.written:
        shares.add_job_usage(q, job)
        return None
    # a job a session writes (volatile ones: busched.fastpath.lending) will not be as summed later:
    # its totals are kept now.  With at most one task each total gets one addition from it, so
    # adding its totals is adding it task by task, to the bit.
    if alike is None:  # the reference: the job's own totals, all four added
        u, requested_only = shares.job_usage(job), False
    else:
        u, requested_only = usage_alike(job, alike)
    if len(job.tasks) > 1:
        shares.add_job_usage(q, job)
    elif requested_only:
        # the other three totals are zeros with no scalar: adding one leaves a total as it is (a
        # total summed from +0.0 is never -0.0, and x + 0.0 == x for any other x)
        q.request.add(u.request)
    else:
        for total, part in zip(q.parts(), u.parts()):
            total.add(part)
    return u


def _nothing(r: Resource) -> bool:
    return r.cpu == 0 and r.memory == 0 and not r.scalars


def usage_alike(job: JobInfo, alike: dict[tuple[Any, ...], tuple[shares.Usage, bool]]) -> tuple[shares.Usage, bool]:
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
        return shares.job_usage(job), False
    for status, tasks in idx.items():
        if len(tasks) != 1 or status is not TaskStatus.Pending:
            return shares.job_usage(job), False
        for t in tasks.values():
            r, a = t.resreq, job.allocated
            if r.scalars or a.scalars:
                key: tuple[Any, ...] = (r.cpu, r.memory, a.cpu, a.memory,
                                        tuple(r.scalars.items()), tuple(a.scalars.items()))
            else:
                key = (r.cpu, r.memory, a.cpu, a.memory)
            got = alike.get(key)
            if got is None:
                u = shares.job_usage(job)
                got = alike[key] = (u, _nothing(u.allocated) and _nothing(u.inqueue) and _nothing(u.elastic))
            return got
    return shares.job_usage(job), False  # (not reached: one status)


def _whole_tasks(job: JobInfo) -> bool:
    """Every request a queue's allocated and requested sums take from the job whole (`settled.whole_request`)."""
    for status, tasks in job.status_index.items():
        if allocated_status(status) or status == TaskStatus.Pending:
            for t in tasks.values():
                if not settled.whole_request(t.resreq):
                    return False
    return True


def _task_by_task(jobs: list[JobInfo]) -> dict[str, shares.Usage]:
    """`add_job_usage` over every job in order: the sum `queue_usage` is tested against."""
    out: dict[str, shares.Usage] = {}
    for job in jobs:
        q = out.get(job.queue)
        if q is None:
            q = out[job.queue] = shares.Usage()
        shares.add_job_usage(q, job)
    return out
