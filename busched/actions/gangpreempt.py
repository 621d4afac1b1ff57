"""gangpreempt: a starving job takes a domain's resources from lower-priority jobs of its own queue, a
gang at a time.

The loop, the domains, the dry run and the arguments are `busched.actions.gang_evict`'s.  The victims
in a domain: Running (or Bound, Binding...) preemptable tasks on its nodes, of *other* jobs of the
*same* queue whose job priority is below the preemptor job's, and whose podgroup does not forbid
preemption (unset means allowed).  A BestEffort preemptor is not limited to BestEffort victims here:
the unified-evictable plugins (priority, gang, capacity, conformance) decide eligibility.  Bundles are
sorted safe first, then the victim jobs in reversed job order, then by return on investment
(`busched.actions.gang_bundle`).  Volcano: pkg/scheduler/actions/gangpreempt.
"""

from __future__ import annotations

from busched.actions import gang_bundle as gb
from busched.actions.gang_evict import GangEvictionAction
from busched.api.job import JobInfo
from busched.api.resource import Resource
from busched.api.task import TaskInfo, preemptable_status
from busched.framework.points import EVICT_GANG_PREEMPT
from busched.framework.session import Session

__all__ = ["GangPreemptAction"]


class GangPreemptAction(GangEvictionAction):
    name = "gangpreempt"
    kind = EVICT_GANG_PREEMPT

    def candidate(self, ssn: Session, job: JobInfo, task: TaskInfo, owner: JobInfo) -> bool:
        return (preemptable_status(task.status) and task.preemptable and owner.queue == job.queue
                and owner.uid != job.uid and owner.priority < job.priority)

    def sort_bundles(self, ssn: Session, job: JobInfo, bundles: list[gb.Bundle], need: Resource) -> None:
        gb.sort_for_preempt(bundles, need, ssn.job_order_fn)
