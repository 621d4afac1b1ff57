"""gangreclaim: a starving job of a queue within its share takes a domain's resources back from other
queues, a gang at a time.

The loop, the domains, the dry run and the arguments are `busched.actions.gang_evict`'s.  An
``ssn.overused`` queue reclaims nothing, and a job whose queue ``ssn.preemptive`` refuses for its
pending tasks (all of them at once) neither.  The victims in a domain: Running preemptable tasks on its
nodes, of jobs in *other* queues that are reclaimable, whose podgroup does not forbid preemption (unset
means allowed).  Bundles are sorted safe first, then by the victim queue order as seen from the
reclaimer's queue, then by return on investment (`busched.actions.gang_bundle`).
Volcano: pkg/scheduler/actions/gangreclaim.
"""

from __future__ import annotations

from busched.actions import gang_bundle as gb
from busched.actions.gang_evict import GangEvictionAction
from busched.api.job import JobInfo
from busched.api.queue import QueueInfo
from busched.api.resource import Resource
from busched.api.task import TaskInfo, TaskStatus
from busched.framework.points import EVICT_GANG_RECLAIM
from busched.framework.session import Session

__all__ = ["GangReclaimAction"]


class GangReclaimAction(GangEvictionAction):
    name = "gangreclaim"
    kind = EVICT_GANG_RECLAIM

    def queue_may_evict(self, ssn: Session, queue: QueueInfo) -> bool:
        return not ssn.overused(queue)

    def job_may_evict(self, ssn: Session, queue: QueueInfo, pending: list[TaskInfo]) -> bool:
        return ssn.preemptive(queue, pending)

    def candidate(self, ssn: Session, job: JobInfo, task: TaskInfo, owner: JobInfo) -> bool:
        if task.status != TaskStatus.Running or not task.preemptable or owner.queue == job.queue:
            return False
        q = ssn.queues.get(owner.queue)
        return q is not None and q.reclaimable

    def sort_bundles(self, ssn: Session, job: JobInfo, bundles: list[gb.Bundle], need: Resource) -> None:
        mine = ssn.queues.get(job.queue)

        def less(l: QueueInfo, r: QueueInfo) -> bool:
            return ssn.queue_order_fn(l, r) if mine is None else ssn.victim_queue_order_fn(l, r, mine)

        gb.sort_for_reclaim(bundles, need, ssn.queues, less)
