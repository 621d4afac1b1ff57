"""capacity: queues share the cluster by explicit deserved / guarantee / capability.

Unlike proportion, nothing is divided by weight: each queue says what it
deserves (a soft share others may reclaim back), what it is guaranteed (never
reclaimed below) and its capability (a hard ceiling).  The plugin

- orders queues by priority, then by share (allocated / deserved, dominant
  dimension; best-effort queues, which deserve nothing, have share 1);
- admits a job (enqueue) only if its minResources, on top of what the queue
  (and, with hierarchy, every ancestor) has allocated and reserved, stays within
  the real capability; a queue that is not Open admits nothing;
- lets a task be allocated only while its queue and ancestors stay within real
  capability (with hierarchy, only leaf queues allocate);
- lets a queue reclaim (preemptive) only while, with the new tasks, it stays
  within real capability and is still at or under deserved on some dimension
  the tasks ask for (or, with ``ancestorReclaimLevel``, an ancestor is);
- picks reclaim victims from queues above deserved on a dimension the victim
  uses, never taking a queue below its guarantee; with hierarchy and
  ``ancestorReclaimLevel`` > 0 a victim's ancestors up to that level must be above
  deserved too, unless the reclaimer shares that ancestor;
- with hierarchy, orders victims' queues so that those farther from the
  reclaimer's queue in the tree go first.

The queue tree is in `busched.plugins.capacity.tree`; the per-queue sums of job usage, shared
with proportion, in `busched.framework.shares`.
Arguments: ``ancestorReclaimLevel`` (int, default 0).  The plugin switch
``enableHierarchy`` turns the tree on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from busched.api.job import JobInfo
from busched.api.queue import QueueInfo, QueueState
from busched.api.resource import ZERO, Resource
from busched.api.task import TaskInfo
from busched.framework import points
from busched.framework.arguments import Arguments
from busched.framework.session import EventHandler, Session
from busched.plugins.capacity import tree as ct

__all__ = ["CapacityPlugin"]

PERMIT, ABSTAIN, REJECT = 1, 0, -1
ANCESTOR_RECLAIM_LEVEL = "ancestorReclaimLevel"


class CapacityPlugin:
    name = "capacity"
    reads_arguments = (ANCESTOR_RECLAIM_LEVEL,)  # every argument it reads (busched.framework.arguments)
    reads_clock = False
    judges_queue_capability = True  # its queue verdicts are about capability (busched explain)

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        self.arguments = Arguments.of(arguments)
        self.ancestor_reclaim_level = self.arguments.get_int(ANCESTOR_RECLAIM_LEVEL, 0)
        if self.ancestor_reclaim_level < 0:
            self.ancestor_reclaim_level = 0
        self.hierarchy = False
        self.ready = True
        self.attrs: dict[str, ct.QueueAttr] = {}
        self.total_resource = Resource()
        self.ssn: Session | None = None

    # -- session ----------------------------------------------------------------------------------
    def on_session_open(self, ssn: Session) -> None:
        self.ssn = ssn
        self.total_resource = ssn.total_resource.clone()
        self.hierarchy = ssn.switch_on(self.name, "hierarchy")
        if self.hierarchy:
            try:
                self.attrs = ct.build_hierarchy(ssn.queues, ssn.jobs, self.total_resource)
                self.ready = True
            except ct.HierarchyError:
                self.attrs = {}
                self.ready = False
        else:
            self.attrs = ct.build_flat(ssn.queues, ssn.jobs, self.total_resource)
            self.ready = True

        if self.ready:
            ssn.add_fn(points.QUEUE_ORDER, self.name, self._queue_order)
            if self.hierarchy:
                ssn.add_fn(points.VICTIM_QUEUE_ORDER, self.name, self._victim_queue_order)
        ssn.add_fn(points.RECLAIMABLE, self.name, self._reclaimable)
        ssn.add_fn(points.UNIFIED_EVICTABLE, self.name, self._unified_evictable)
        ssn.add_fn(points.PREEMPTIVE, self.name, self._preemptive)
        ssn.add_fn(points.ALLOCATABLE, self.name, self._allocatable)
        # the dry run's trial evictions reach `allocated` through the event handler, so Volcano's
        # simulate add/remove functions (a cycle-state copy of it) are not needed here
        ssn.add_fn(points.SIMULATE_ALLOCATABLE, self.name, self._simulate_allocatable)
        ssn.add_fn(points.JOB_ENQUEUEABLE, self.name, self._job_enqueueable)
        ssn.add_fn(points.JOB_ENQUEUED, self.name, self._job_enqueued)
        ssn.add_event_handler(EventHandler(allocate=self._on_allocate, deallocate=self._on_deallocate))

    def on_session_close(self, ssn: Session) -> None:
        # as Volcano's capacity, each queue's deserved, real capability and share go to the metrics
        for attr in self.attrs.values():
            fig: dict[str, Any] = {"share": attr.share}
            if attr.deserved is not None:
                fig["deserved"] = attr.deserved.clone()
            if attr.real_capability is not None:
                fig["real_capability"] = attr.real_capability.clone()
            ssn.queue_figures[attr.name] = fig
        self.attrs = {}
        self.ssn = None

    # -- helpers ------------------------------------------------------------------------------------
    def _attr_of_job(self, job_uid: str) -> ct.QueueAttr | None:
        assert self.ssn is not None
        job = self.ssn.jobs.get(job_uid)
        if job is None:
            return None
        return self.attrs.get(job.queue)

    def _chain(self, attr: ct.QueueAttr) -> list[ct.QueueAttr]:
        """The queue and then its ancestors, leaf to root (only the queue without hierarchy)."""
        out = [attr]
        if self.hierarchy:
            out.extend(self.attrs[a] for a in reversed(attr.ancestors) if a in self.attrs)
        return out

    def _is_leaf(self, queue_id: str) -> bool:
        attr = self.attrs.get(queue_id)
        return attr is not None and attr.is_leaf

    # -- queue order ----------------------------------------------------------------------------------
    def _queue_order(self, l: QueueInfo, r: QueueInfo) -> int:
        if l.priority != r.priority:
            return r.priority - l.priority
        la, ra = self.attrs.get(l.uid), self.attrs.get(r.uid)
        if la is None or ra is None:
            return 0
        if not self.hierarchy:
            return ct.compare_share(la, ra)
        ll, rl = la.is_leaf, ra.is_leaf
        if ll != rl:
            return -1 if ll else 1
        if not ll:
            return ct.compare_share(la, ra)
        # Two leaves: compare the ancestors just below their deepest common one.
        level = ct.queue_level(la, ra)
        lp = la.ancestors[level + 1] if level + 1 < len(la.ancestors) else la.queue_id
        rp = ra.ancestors[level + 1] if level + 1 < len(ra.ancestors) else ra.queue_id
        return ct.compare_share(self.attrs[lp], self.attrs[rp])

    def _victim_queue_order(self, l: QueueInfo, r: QueueInfo, preemptor: QueueInfo) -> int:
        la, ra, pa = self.attrs.get(l.uid), self.attrs.get(r.uid), self.attrs.get(preemptor.uid)
        if la is None or ra is None or pa is None:
            return 0
        ll, rl = ct.queue_level(la, pa), ct.queue_level(ra, pa)
        if ll == rl:
            return 0
        return -1 if ll > rl else 1

    # -- allocation checks -------------------------------------------------------------------------------
    @staticmethod
    def _fits(attr: ct.QueueAttr, used: Resource, req: Resource) -> bool:
        ok, _ = used.less_equal_with_dimension(attr.real_capability, req)
        return ok

    def _allocatable(self, queue: QueueInfo, task: TaskInfo) -> bool:
        if queue.state != QueueState.Open:
            return False
        return self._simulate_allocatable(queue, task)

    def _simulate_allocatable(self, queue: QueueInfo, task: TaskInfo) -> bool:
        """`_allocatable` without the queue's state (Volcano's SimulateAllocatableFn)."""
        if not self.ready:
            return False
        attr = self.attrs.get(queue.uid)
        if attr is None:
            return False
        if self.hierarchy and not attr.is_leaf:
            return False
        return all(self._fits(a, a.allocated.clone().add(task.resreq), task.resreq) for a in self._chain(attr))

    def _job_enqueueable(self, job: JobInfo) -> int:
        if not self.ready:
            return REJECT
        assert self.ssn is not None
        if self.hierarchy and not self._is_leaf(job.queue):
            return REJECT
        attr = self.attrs.get(job.queue)
        queue = self.ssn.queues.get(job.queue)
        if attr is None or queue is None:
            return REJECT
        if queue.state != QueueState.Open:
            return REJECT
        if attr.real_capability is None or job.min_resources is None:
            return PERMIT
        min_req = job.get_min_resources()
        for a in self._chain(attr):
            used = min_req.clone().add(a.allocated).add(a.inqueue).sub(a.elastic)
            if not self._fits(a, used, min_req):
                return REJECT
        return PERMIT

    def _job_enqueued(self, job: JobInfo) -> None:
        attr = self.attrs.get(job.queue)
        if attr is None or job.min_resources is None:
            return
        reserved = job.deduct_sch_gated(job.get_min_resources())
        for a in self._chain(attr):
            a.inqueue.add(reserved)

    # -- reclaim ---------------------------------------------------------------------------------------------
    def _preemptive(self, queue: QueueInfo, tasks: TaskInfo | Sequence[TaskInfo] | None) -> bool:
        if not self.ready or queue.state != QueueState.Open:
            return False
        attr = self.attrs.get(queue.uid)
        if attr is None:
            return False
        if isinstance(tasks, TaskInfo):
            tasks = [tasks]
        req = Resource()
        for t in tasks or ():
            if t is not None:
                req.add(t.resreq)
        future = attr.allocated.clone().add(req)
        if not self._fits(attr, future, req):
            return False
        ok, _ = ct.less_equal_partly_with_dimension_zero_filtered(future, attr.deserved, req)
        if ok or not (self.hierarchy and self.ancestor_reclaim_level > 0):
            return ok
        for level in range(1, self.ancestor_reclaim_level + 1):
            aid = ct.ancestor_at_depth(attr, level)
            if aid is None or aid == ct.ROOT_QUEUE:
                continue
            a = self.attrs.get(aid)
            if a is None:
                continue
            ok, _ = ct.less_equal_partly_with_dimension_zero_filtered(a.allocated.clone().add(req), a.deserved, req)
            if ok:
                return True
        return False

    def _shares_ancestor_within_level(self, a: ct.QueueAttr, b: ct.QueueAttr) -> bool:
        lvl = self.ancestor_reclaim_level
        if lvl <= 0:
            return False
        sa = set(ct.ancestors_by_level(a, lvl).values()) - {ct.ROOT_QUEUE}
        sb = set(ct.ancestors_by_level(b, lvl).values())
        return bool(sa & sb)

    def _ancestor_to_check(self, reclaimer: ct.QueueAttr, reclaimee: ct.QueueAttr,
                           level: int) -> tuple[ct.QueueAttr | None, bool]:
        """The reclaimee's ancestor at ``level`` unless it is root or shared with the reclaimer."""
        mine = ct.ancestor_at_depth(reclaimee, level)
        if mine is None or mine == ct.ROOT_QUEUE:
            return None, False
        if ct.ancestor_at_depth(reclaimer, level) == mine:
            return None, False
        return self.attrs.get(mine), True

    @staticmethod
    def _relevant_deserved(task: TaskInfo, deserved: Resource | None) -> bool:
        return deserved is not None and bool(ct.intersection(task.resreq, deserved))

    def _reclaimable(self, reclaimer: TaskInfo, reclaimees: list[TaskInfo]) -> tuple[list[TaskInfo], int]:
        if not self.ready:
            return [], REJECT
        assert self.ssn is not None
        ssn = self.ssn
        rattr = self._attr_of_job(reclaimer.job)
        if rattr is None:
            return [], REJECT
        ancestor_gate = self.hierarchy and self.ancestor_reclaim_level > 0
        victims: list[TaskInfo] = []
        allocations: dict[str, Resource] = {}
        pq = ssn.build_victims_queue(list(reclaimees), reclaimer)
        while not pq.empty():
            ee = pq.pop()
            attr = self._attr_of_job(ee.job)
            if attr is None:
                continue
            # A victim sharing no resource dimension with the reclaimer frees nothing useful.
            if not ct.intersection(ee.resreq, reclaimer.init_resreq, ignore_pods=True):
                continue
            allocated = allocations.setdefault(attr.queue_id, attr.allocated.clone())
            if not attr.guarantee.less_equal(allocated.clone().sub(ee.resreq), ZERO):
                continue
            if not self._relevant_deserved(ee, attr.deserved):
                # Uses nothing the queue deserves: a victim, unless both sit under a shared
                # ancestor and the reclaimer's queue deserves nothing it asks for either.
                if (ancestor_gate and self._shares_ancestor_within_level(rattr, attr)
                        and not self._relevant_deserved(reclaimer, rattr.deserved)):
                    continue
            else:
                over, _ = ct.greater_partly_with_relevant_dimensions(allocated, attr.deserved, ee.resreq)
                if not over:
                    continue
            touched: list[Resource] = []
            eligible = True
            if ancestor_gate:
                for level in range(1, self.ancestor_reclaim_level + 1):
                    a, need = self._ancestor_to_check(rattr, attr, level)
                    if not need:
                        continue
                    if a is None:
                        eligible = False
                        break
                    a_alloc = allocations.setdefault(a.queue_id, a.allocated.clone())
                    touched.append(a_alloc)
                    if not self._relevant_deserved(ee, a.deserved):
                        continue
                    over, _ = ct.greater_partly_with_relevant_dimensions(a_alloc, a.deserved, ee.resreq)
                    if not over:
                        eligible = False
                        break
            if not eligible:
                continue
            allocated.sub(ee.resreq)
            for a_alloc in {id(x): x for x in touched}.values():
                a_alloc.sub(ee.resreq)
            victims.append(ee)
        return victims, PERMIT

    def _unified_evictable(self, ctx: points.EvictionContext,
                           candidates: list[TaskInfo]) -> tuple[list[TaskInfo], int]:
        """gangpreempt: every candidate (capacity has no say within a queue).  gangreclaim: a
        candidate whose queue keeps its guarantee without it and either holds nothing the queue
        deserves or is over its deserved share on the dimensions the candidate uses."""
        if ctx.kind == points.EVICT_GANG_PREEMPT:
            return candidates, PERMIT
        if not self.ready:
            return [], REJECT
        victims: list[TaskInfo] = []
        allocations: dict[str, Resource] = {}
        for ee in candidates:
            attr = self._attr_of_job(ee.job)
            if attr is None:
                continue
            allocated = allocations.setdefault(attr.queue_id, attr.allocated.clone())
            if not attr.guarantee.less_equal(allocated.clone().sub(ee.resreq), ZERO):
                continue
            if self._relevant_deserved(ee, attr.deserved):
                over, _ = ct.greater_partly_with_relevant_dimensions(allocated, attr.deserved, ee.resreq)
                if not over:
                    continue
            allocated.sub(ee.resreq)
            victims.append(ee)
        return victims, PERMIT

    # -- events -------------------------------------------------------------------------------------------------
    def _on_allocate(self, task: TaskInfo) -> None:
        attr = self._attr_of_job(task.job) if self.ssn is not None else None
        if attr is None:
            return
        attr.allocated.add(task.resreq)
        ct.update_share(attr)
        if self.hierarchy:
            for aid in attr.ancestors:
                self.attrs[aid].allocated.add(task.resreq)

    def _on_deallocate(self, task: TaskInfo) -> None:
        attr = self._attr_of_job(task.job) if self.ssn is not None else None
        if attr is None:
            return
        attr.allocated.sub(task.resreq)
        ct.update_share(attr)
        if self.hierarchy:
            for aid in attr.ancestors:
                self.attrs[aid].allocated.sub(task.resreq)
