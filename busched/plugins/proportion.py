"""proportion: share the cluster between queues by weight, bounded by capability and guarantee.

At session open every queue that has jobs gets an *attribute*: what its jobs
hold (allocated), ask for (request: allocated + pending), reserve for
admission (inqueue) and hold beyond their minimum (elastic), plus its
capability and *real capability* (what is left of the cluster after every
queue's guarantee, plus its own guarantee, capped by its capability).

*Deserved* is Volcano's iterative water-filling: each round hands the
remaining resources to the unsatisfied queues in proportion to weight, caps
each queue at its real capability and its request, raises it to its guarantee,
and returns the excess to the pool; a queue is satisfied once its request fits
its deserved or its deserved stops changing.  Rounds stop when nothing remains
or nothing changed.

Queues then order by priority, then by share (allocated/deserved, the largest
dimension); a queue is overused once deserved <= allocated; a task is
allocatable while the queue stays within deserved in the dimensions the task
asks for; tasks of queues above deserved are reclaimable; a job is enqueueable
while its minResources plus what the queue holds and reserves, less its
elastic part, fits the real capability.  Event handlers keep allocated and
share current.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard

from busched.api.job import JobInfo
from busched.api.queue import QueueInfo, QueueState
from busched.api.resource import INFINITY, ZERO, Resource, diff, exceeded_part, res_max
from busched.api.task import TaskInfo
from busched.framework import points, queue_totals
from busched.framework.arguments import Arguments
from busched.framework.session import EventHandler, Session
from busched.framework.shares import calculate_share

__all__ = ["ProportionPlugin", "QueueAttr", "water_fill"]

MAX_FLOAT = sys.float_info.max


def _same(a: Resource, b: Resource) -> bool:
    """equality.Semantic.DeepEqual on two resources: exact values and the same scalar keys."""
    return a.cpu == b.cpu and a.memory == b.memory and a.scalars == b.scalars


def _given(res: Resource | None, raw: Mapping[str, Any]) -> TypeGuard[Resource]:
    """Was this queue field set in the spec (a non-empty resource list)?"""
    if res is None:
        return False
    return bool(raw) or bool(res.cpu or res.memory or res.scalars)


class QueueAttr:
    __slots__ = ("uid", "name", "weight", "share", "deserved", "allocated", "request", "elastic", "inqueue",
                 "capability", "real_capability", "guarantee")

    def __init__(self, queue: QueueInfo, total: Resource, total_guarantee: Resource) -> None:
        self.uid = queue.uid
        self.name = queue.name
        self.weight = queue.weight
        self.share = 0.0
        self.deserved = Resource()
        self.allocated = Resource()
        self.request = Resource()
        self.elastic = Resource()
        self.inqueue = Resource()
        self.guarantee = queue.guarantee.clone() if _given(queue.guarantee, queue.guarantee_list) else Resource()
        capability: Resource | None = None
        if _given(queue.capability, queue.capability_list):
            assert queue.capability is not None
            capability = queue.capability.clone()
            if capability.cpu <= 0:
                capability.cpu = MAX_FLOAT
            if capability.memory <= 0:
                capability.memory = MAX_FLOAT
        real = exceeded_part(total, total_guarantee).add(self.guarantee)
        if capability is None:
            self.capability = Resource()
        else:
            self.capability = capability
            real.min_dimension(capability, INFINITY)
        self.real_capability = real

    def update_share(self) -> None:
        # the largest share over deserved's dimensions: drf's dominant share, with deserved as the total
        self.share = calculate_share(self.allocated, self.deserved)[1]

    def __repr__(self) -> str:
        return (f"QueueAttr({self.name} deserved={self.deserved} allocated={self.allocated} "
                f"request={self.request} share={self.share:.3f})")


def water_fill(attrs: list[QueueAttr], total: Resource) -> None:
    """Set every attribute's deserved (and share) by Volcano's iterative weighted water-filling."""
    remaining = total.clone()
    meet: set[str] = set()
    while True:
        total_weight = sum(a.weight for a in attrs if a.uid not in meet)
        if total_weight == 0:
            break
        old_remaining = remaining.clone()
        increased, decreased = Resource(), Resource()
        for a in attrs:
            if a.uid in meet:
                continue
            old = a.deserved.clone()
            a.deserved.add(remaining.clone().multi(float(a.weight) / float(total_weight)))
            a.deserved.min_dimension(a.real_capability, INFINITY)
            a.deserved.min_dimension(a.request, ZERO)
            a.deserved = res_max(a.deserved, a.guarantee)
            a.update_share()
            if a.request.less_equal(a.deserved, ZERO) or _same(a.deserved, old):
                meet.add(a.uid)
            inc, dec = diff(a.deserved, old)
            increased.add(inc)
            decreased.add(dec)
        remaining = exceeded_part(remaining.clone().add(decreased), increased)
        if remaining.is_empty() or _same(remaining, old_remaining):
            break


class ProportionPlugin:
    name = "proportion"
    reads_arguments = ()  # every argument it reads (busched.framework.arguments)
    reads_clock = False
    judges_queue_capability = True  # its queue verdicts are about capability (busched explain)

    def __init__(self, arguments: Mapping[str, Any] | None = None) -> None:
        self.arguments = Arguments.of(arguments)
        self.total = Resource()
        self.total_guarantee = Resource()
        self.queue_opts: dict[str, QueueAttr] = {}

    # -- open -------------------------------------------------------------------------------
    def build(self, ssn: Session) -> None:
        self.total = ssn.total_resource.clone()
        self.total_guarantee = Resource()
        for q in ssn.queues.values():
            if _given(q.guarantee, q.guarantee_list):
                assert q.guarantee is not None
                self.total_guarantee.add(q.guarantee)
        self.queue_opts = {}
        # what each queue's jobs hold, ask for and reserve: summed again only when a job changed
        for uid, usage in queue_totals.queue_usage(ssn).items():
            queue = ssn.queues.get(uid)
            if queue is None:
                continue
            attr = self.queue_opts[uid] = QueueAttr(queue, self.total, self.total_guarantee)
            attr.allocated, attr.request, attr.inqueue, attr.elastic = (r.clone() for r in usage.parts())
        water_fill(list(self.queue_opts.values()), self.total)

    def on_session_open(self, ssn: Session) -> None:
        self.build(ssn)
        ssn.add_fn(points.QUEUE_ORDER, self.name, self.queue_order)
        ssn.add_fn(points.RECLAIMABLE, self.name, lambda r, cands: self.reclaimable(ssn, r, cands))
        ssn.add_fn(points.OVERUSED, self.name, self.overused)
        ssn.add_fn(points.ALLOCATABLE, self.name, self.task_allocatable)
        # the dry run's trial evictions reach `allocated` through the event handler below, so the
        # simulate add/remove functions Volcano keeps on a cycle-state copy are not needed here
        ssn.add_fn(points.SIMULATE_ALLOCATABLE, self.name, self.simulate_allocatable)
        ssn.add_fn(points.PREEMPTIVE, self.name,
                   lambda q, ts: self.queue_allocatable(q, list(ts) if isinstance(ts, (list, tuple)) else [ts]))
        ssn.add_fn(points.JOB_ENQUEUEABLE, self.name, lambda j: self.enqueueable(ssn, j))
        ssn.add_fn(points.JOB_ENQUEUED, self.name, self.enqueued)
        # an allocation's two halves (`_on_event`, +1): the queue's allocated at once (allocatable reads
        # it before every task), its share from a handler of its own, which has a run form: the share
        # is read only by the queue order, between job turns (busched.framework.runs)
        add, share, share_run = self._allocated(ssn)
        ssn.add_event_handler(EventHandler(allocate=add, deallocate=lambda t: self._on_event(ssn, t, -1)))
        ssn.add_event_handler(EventHandler(allocate=share, allocate_run=share_run))

    def on_session_close(self, ssn: Session) -> None:
        # Volcano's proportion reports each queue's water-filled deserved and its share to the metrics
        for attr in self.queue_opts.values():
            ssn.queue_figures[attr.name] = {"deserved": attr.deserved.clone(), "share": attr.share,
                                            "overused": attr.deserved.less_equal(attr.allocated, ZERO)}
        self.queue_opts = {}

    # -- callbacks ----------------------------------------------------------------------------
    def _share(self, q: QueueInfo) -> float:
        a = self.queue_opts.get(q.uid)
        return a.share if a is not None else 0.0

    def queue_order(self, l: QueueInfo, r: QueueInfo) -> int:
        if l.priority != r.priority:
            return r.priority - l.priority  # negative: higher priority first
        ls, rs = self._share(l), self._share(r)
        if ls == rs:
            return 0
        return -1 if ls < rs else 1

    def reclaimable(self, ssn: Session, reclaimer: TaskInfo, reclaimees: list[TaskInfo]) -> tuple[list[TaskInfo], int]:
        victims = []
        allocations: dict[str, Resource] = {}
        for t in reclaimees:
            job = ssn.jobs.get(t.job)
            attr = self.queue_opts.get(job.queue) if job is not None else None
            if job is None or attr is None:
                continue
            if job.queue not in allocations:
                allocations[job.queue] = attr.allocated.clone()
            allocated = allocations[job.queue]
            if not allocated.less_equal(attr.deserved, ZERO):
                allocated.sub(t.resreq)
                victims.append(t)
        return victims, 1

    def overused(self, q: QueueInfo) -> bool:
        attr = self.queue_opts.get(q.uid)
        if attr is None:
            return False
        return attr.deserved.less_equal(attr.allocated, ZERO)

    def queue_allocatable(self, q: QueueInfo, candidates: list[TaskInfo]) -> bool:
        if q.state != QueueState.Open:
            return False
        attr = self.queue_opts.get(q.uid)
        if attr is None:
            return False
        req = Resource()
        for t in candidates:
            if t is not None:
                req.add(t.resreq)
        ok, _ = attr.allocated.clone().add(req).less_equal_with_dimension(attr.deserved, req)
        return ok

    def simulate_allocatable(self, q: QueueInfo, task: TaskInfo) -> bool:
        """The queue's allocated (as the dry run left it) plus the task within its deserved; unlike
        `task_allocatable`, the queue's state is not asked (Volcano's SimulateAllocatableFn)."""
        attr = self.queue_opts.get(q.uid)
        if attr is None:
            return False
        return attr.allocated.plus_less_equal_with_dimension(task.resreq, attr.deserved)

    def task_allocatable(self, q: QueueInfo, task: TaskInfo) -> bool:
        """``queue_allocatable(q, [task])``, asked for every task allocate places: the task's own
        request stands for the sum of one (the same values), which is not built."""
        if task is None or q.state != QueueState.Open:
            return self.queue_allocatable(q, [task])
        return self.simulate_allocatable(q, task)

    def enqueueable(self, ssn: Session, job: JobInfo) -> int:
        queue = ssn.queues.get(job.queue)
        attr = self.queue_opts.get(job.queue)
        if queue is None or attr is None:
            return -1
        if queue.state != QueueState.Open:
            return -1
        if job.min_resources is None:
            return 1
        min_req = job.get_min_resources()
        r = min_req.clone().add(attr.allocated).add(attr.inqueue).sub(attr.elastic)
        ok, _ = r.less_equal_with_dimension(attr.real_capability, min_req)
        return 1 if ok else -1

    def enqueued(self, job: JobInfo) -> None:
        if job.min_resources is None:
            return
        attr = self.queue_opts.get(job.queue)
        if attr is None:
            return
        attr.inqueue.add(job.deduct_sch_gated(job.get_min_resources()))

    def _allocated(self, ssn: Session) -> tuple[Callable[[TaskInfo], None], Callable[[TaskInfo], None],
                                                 Callable[[list[TaskInfo]], None]]:
        """``_on_event(ssn, task, +1)`` in two halves, told one after the other: the request added to
        the queue's allocated, then the queue's share (`update_share`); and the share's run form,
        each touched queue's share computed once from its allocated after the run's last task, as
        the last task's event leaves it (a share is a function of allocated and deserved only)."""
        def attr_of(task: TaskInfo) -> QueueAttr | None:
            job = ssn.jobs.get(task.job)
            return self.queue_opts.get(job.queue) if job is not None else None

        def add(task: TaskInfo) -> None:
            job = ssn.jobs.get(task.job)  # (attr_of written out: every task allocate places comes here)
            attr = self.queue_opts.get(job.queue) if job is not None else None
            if attr is not None:
                attr.allocated.add(task.resreq)

        def share(task: TaskInfo) -> None:
            attr = attr_of(task)
            if attr is not None:
                attr.share = calculate_share(attr.allocated, attr.deserved)[1]

        def share_run(tasks: list[TaskInfo]) -> None:
            touched: dict[int, QueueAttr] = {}
            last = None
            for task in tasks:
                if task.job == last:  # (a gang's tasks come one after another)
                    continue
                last = task.job
                attr = attr_of(task)
                if attr is not None:
                    touched[id(attr)] = attr
            for attr in touched.values():
                attr.share = calculate_share(attr.allocated, attr.deserved)[1]

        return add, share, share_run

    def _on_event(self, ssn: Session, task: TaskInfo, sign: int) -> None:
        job = ssn.jobs.get(task.job)
        attr = self.queue_opts.get(job.queue) if job is not None else None
        if attr is None:
            return
        if sign > 0:
            attr.allocated.add(task.resreq)
        else:
            attr.allocated.sub(task.resreq)
        attr.update_share()
