"""overcommit: admit (enqueue) jobs while the cluster, inflated by an overcommit factor, can hold them.

Idle is ``total * overcommit-factor - used`` over all nodes.  A job with
minResources is enqueueable when its minResources plus everything already
inqueue fits in idle, compared only in the dimensions the job asks for.  Jobs
without minResources are always admitted.  Each enqueued job's minResources
(less its scheduling-gated tasks) joins the inqueue total.

The job helpers below (`inqueue_resource`, `deduct_sch_gated`) are Volcano's
util.GetInqueueResource and JobInfo.DeductSchGatedResources; proportion uses
them too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from busched.api.job import JobInfo, PodGroupPhase
from busched.api.node import NodeInfo
from busched.api.resource import Resource
from busched.api.task import allocated_status
from busched.framework import points
from busched.framework.arguments import Arguments
from busched.framework.session import Session

__all__ = ["OvercommitPlugin", "DEFAULT_OVERCOMMIT_FACTOR"]

OVERCOMMIT_FACTOR_KEY = "overcommit-factor"
DEFAULT_OVERCOMMIT_FACTOR = 1.2


def allocated_task_num(job: JobInfo) -> int:
    return sum(len(ts) for s, ts in job.status_index.items() if allocated_status(s))




def _inqueue_at_open(job: JobInfo) -> Resource | None:
    """The resources an Inqueue (or Running but not yet fully allocated) job holds back at session open."""
    if job.min_resources is None:
        return None
    if job.phase == PodGroupPhase.Inqueue:
        return job.deduct_sch_gated(job.get_min_resources())
    if job.phase == PodGroupPhase.Running and job.allocated_task_num() >= job.min_available:
        return job.deduct_sch_gated(job.inqueue_resource(job.allocated))
    return None


def _used(node: NodeInfo) -> Resource:
    return node.used


class OvercommitPlugin:
    name = "overcommit"
    reads_arguments = (OVERCOMMIT_FACTOR_KEY,)  # every argument it reads (busched.framework.arguments)
    reads_clock = False

    def __init__(self, arguments: Mapping[str, Any] | None = None) -> None:
        self.arguments = Arguments.of(arguments)
        self.factor = DEFAULT_OVERCOMMIT_FACTOR
        self.idle = Resource()
        self.inqueue = Resource()

    def on_session_open(self, ssn: Session) -> None:
        self.factor = self.arguments.get_float(OVERCOMMIT_FACTOR_KEY, DEFAULT_OVERCOMMIT_FACTOR)
        if self.factor < 1.0:
            self.factor = DEFAULT_OVERCOMMIT_FACTOR
        # both sums kept from session to session, redone only for the nodes and jobs that changed
        used = ssn.summed("overcommit.used", list(ssn.node_list), _used)
        self.idle = ssn.total_resource.clone().multi(self.factor).sub(used)
        self.inqueue = ssn.summed("overcommit.inqueue", list(ssn.jobs.values()), _inqueue_at_open).clone()

        ssn.add_fn(points.JOB_ENQUEUEABLE, self.name, self.enqueueable)
        ssn.add_fn(points.JOB_ENQUEUED, self.name, self.enqueued)

    def enqueueable(self, job: JobInfo) -> int:
        if job.min_resources is None:
            return 1
        min_req = job.get_min_resources()
        fits, _ = self.inqueue.clone().add(min_req).less_equal_with_dimension(self.idle, min_req)
        return 1 if fits else -1

    def enqueued(self, job: JobInfo) -> None:
        if job.min_resources is None:
            return
        self.inqueue.add(job.deduct_sch_gated(job.get_min_resources()))

    def on_session_close(self, ssn: Session) -> None:
        self.idle = Resource()
        self.inqueue = Resource()
