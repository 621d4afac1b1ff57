"""A session's dispatchers: for each extension point asked of jobs, queues, tasks and nodes, the
point's combine policy (busched.framework.tiers) over its resolved tier lists.

Job and sub-job predicates (ready, pipelined, starving, valid, enqueueable), hypernode gradients,
queue predicates, victim selection, node selection (predicates, scores) and the dry run of
topology-aware preemption: each a line or two, one per point, the same shape as Volcano's
session_plugins.go written once per combine policy.  They live apart from `Session`
(busched.framework.session), which opens, registers, orders, records decisions and closes; they
are its base class, so an action's ``ssn.predicate_fn`` is the same method call it always was
(these run per task and per node).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from busched.api.fit import Code, FitError, Status
from busched.api.job import JobInfo
from busched.api.node import NodeInfo
from busched.api.queue import QueueInfo
from busched.api.subjob import SubJobInfo
from busched.api.task import TaskInfo
from busched.framework import points
from busched.framework import tiers as tw
from busched.framework.points import Point, ValidateResult

__all__ = ["Dispatchers"]

# the fit error codes that make a node unusable, for allocate and for preempt / reclaim
_ALLOCATE_CODES = (Code.Unschedulable, Code.UnschedulableAndUnresolvable, Code.Error, Code.Skip, Code.Wait)
_PREEMPT_CODES = (Code.UnschedulableAndUnresolvable, Code.Error, Code.Skip, Code.Wait)


class Dispatchers:
    """The point dispatchers of `Session` (busched.framework.session), which holds the lists."""

    # the session's resolved lists (point -> callbacks by tier: busched.framework.hooks), and how a
    # callback that raised something not a FitError fails its task (Session._failed)
    _lists: dict[Point[Any, Any], tw.Tiers]
    _failed: Callable[[str, tuple[Any, ...], Exception], Exception]

    # -- job predicates --------------------------------------------------------------
    def job_ready(self, job: JobInfo) -> bool:
        return tw.all_pass(self._lists[points.JOB_READY], job)

    def job_pipelined(self, job: JobInfo) -> bool:
        return tw.vote(self._lists[points.JOB_PIPELINED], job)

    def job_starving(self, job: JobInfo) -> bool:
        return tw.starving_vote(self._lists[points.JOB_STARVING], job)

    def job_valid(self, job: JobInfo) -> ValidateResult | None:
        vr: ValidateResult | None = tw.first_invalid(self._lists[points.JOB_VALID], job)
        return vr

    def job_enqueueable(self, job: JobInfo) -> bool:
        return tw.vote(self._lists[points.JOB_ENQUEUEABLE], job)

    def job_enqueued(self, job: JobInfo) -> None:
        tw.call_all(self._lists[points.JOB_ENQUEUED], job)

    # -- sub-jobs and hypernodes (busched.api.subjob, busched.framework.hypernodes) -------
    def sub_job_ready(self, job: JobInfo, sub_job: SubJobInfo) -> bool:
        if not job.contains_sub_job_policy():
            return self.job_ready(job)
        return tw.all_pass(self._lists[points.SUB_JOB_READY], sub_job)

    def sub_job_pipelined(self, job: JobInfo, sub_job: SubJobInfo) -> bool:
        if not job.contains_sub_job_policy():
            return self.job_pipelined(job)
        return tw.vote(self._lists[points.SUB_JOB_PIPELINED], sub_job)

    def sub_job_order_fn(self, l: SubJobInfo, r: SubJobInfo) -> bool:
        c = tw.first_decision(self._lists[points.SUB_JOB_ORDER], l, r)
        if c:
            return c < 0
        if l.match_index != r.match_index:
            return l.match_index < r.match_index
        return l.uid < r.uid

    def hyper_node_gradient_for_job_fn(self, job: JobInfo, hypernode: Any,
                                       purpose: str = "allocate") -> list[list[Any]]:
        """Hypernodes to try for a job, in gradients; the first plugin with an answer decides."""
        return tw.first_plugin(self._lists[points.HYPER_NODE_GRADIENT_FOR_JOB], [[hypernode]], job, hypernode,
                               purpose)

    def hyper_node_gradient_for_sub_job_fn(self, sub_job: SubJobInfo, hypernode: Any,
                                           purpose: str = "allocate") -> list[list[Any]]:
        return tw.first_plugin(self._lists[points.HYPER_NODE_GRADIENT_FOR_SUB_JOB], [[hypernode]], sub_job,
                               hypernode, purpose)

    def hyper_node_order_map_fn(self, sub_job: SubJobInfo,
                                hypernodes: dict[str, list[NodeInfo]]) -> dict[str, dict[str, float]]:
        """Each hypernode-order plugin's scores: plugin -> hypernode -> score."""
        return tw.by_plugin(self._lists[points.HYPER_NODE_ORDER], sub_job, hypernodes)

    # -- queue predicates -------------------------------------------------------------
    def overused(self, queue: QueueInfo) -> bool:
        return tw.any_true(self._lists[points.OVERUSED], queue)

    def allocatable(self, queue: QueueInfo, task: TaskInfo) -> bool:
        return tw.all_pass(self._lists[points.ALLOCATABLE], queue, task)

    def preemptive(self, queue: QueueInfo, task: TaskInfo | list[TaskInfo]) -> bool:
        """Whether the queue may take ``task`` (reclaim) or all of a gang's tasks (gangreclaim) by evicting."""
        return tw.all_pass(self._lists[points.PREEMPTIVE], queue, task)

    # -- victims -----------------------------------------------------------------------
    def preemptable(self, preemptor: TaskInfo, preemptees: list[TaskInfo]) -> list[TaskInfo]:
        return tw.intersect_victims(self._lists[points.PREEMPTABLE], preemptor, preemptees) or []

    def reclaimable(self, reclaimer: TaskInfo, reclaimees: list[TaskInfo]) -> list[TaskInfo]:
        return tw.intersect_victims(self._lists[points.RECLAIMABLE], reclaimer, reclaimees) or []

    def unified_evictable(self, ctx: points.EvictionContext, candidates: list[TaskInfo]) -> list[TaskInfo]:
        """The candidates the gang actions may evict: the preemptable / reclaimable combination
        (within a tier every voter must accept a task; the first tier with victims decides)."""
        return tw.intersect_victims(self._lists[points.UNIFIED_EVICTABLE], ctx, candidates) or []

    def victim_tasks(self, tasks: list[TaskInfo]) -> list[TaskInfo]:
        return tw.union_victims(self._lists[points.VICTIM_TASKS], tasks)

    # -- node selection ---------------------------------------------------------------------
    # (a callback that raises anything but a FitError fails the task, naming the plugin:
    # busched.framework.plugin_errors; the try costs nothing until something raises)
    def pre_predicate_fn(self, task: TaskInfo) -> None:
        """Raise `FitError` when a task can fit no node at all."""
        tw.first_failure(self._lists[points.PRE_PREDICATE], self._failed, task)

    def predicate_fn(self, task: TaskInfo, node: NodeInfo) -> None:
        """Raise the first failing plugin's `FitError`."""
        tw.first_failure(self._lists[points.PREDICATE], self._failed, task, node)

    def predicate_for_allocate(self, task: TaskInfo, node: NodeInfo) -> None:
        self._predicate_failing_on(_ALLOCATE_CODES, task, node)

    def predicate_for_preempt(self, task: TaskInfo, node: NodeInfo) -> None:
        self._predicate_failing_on(_PREEMPT_CODES, task, node)

    def _predicate_failing_on(self, codes: tuple[Code, ...], task: TaskInfo, node: NodeInfo) -> None:
        """`predicate_fn`, a FitError kept only when it has one of ``codes``."""
        try:
            self.predicate_fn(task, node)
        except FitError as e:
            if e.has(*codes):
                raise
        except Exception as e:  # a plugin bug must not kill the cycle: the node is just unusable
            raise FitError(task.key, node.name, [Status(Code.Error, str(e))]) from e

    def node_order_fn(self, task: TaskInfo, node: NodeInfo) -> float:
        return tw.sum_scores(self._lists[points.NODE_ORDER], self._failed, task, node)

    def batch_node_order_fn(self, task: TaskInfo, nodes: list[NodeInfo]) -> dict[str, float]:
        return tw.sum_maps(self._lists[points.BATCH_NODE_ORDER], self._failed, task, nodes)

    # -- the dry run of topology-aware preemption (Volcano's Simulate* functions) -----------
    # The dry run makes its trial evictions on the live session, so node accounting and the running
    # totals plugins keep through event handlers already follow them; these points are for the state
    # a plugin keeps per preemptor (the predicates' inter-pod affinity counts).
    def simulate_remove_task(self, preemptor: TaskInfo, task: TaskInfo, node: NodeInfo) -> None:
        """``task`` left ``node`` in the dry run for ``preemptor``; a plugin that cannot follow raises."""
        tw.first_failure(self._lists[points.SIMULATE_REMOVE_TASK], self._failed, preemptor, task, node)

    def simulate_add_task(self, preemptor: TaskInfo, task: TaskInfo, node: NodeInfo) -> None:
        """``task`` is back on ``node`` in the dry run for ``preemptor``."""
        tw.first_failure(self._lists[points.SIMULATE_ADD_TASK], self._failed, preemptor, task, node)

    def simulate_allocatable(self, queue: QueueInfo, task: TaskInfo) -> bool:
        """Whether ``queue`` may take ``task`` as things stand in the dry run."""
        return tw.all_pass(self._lists[points.SIMULATE_ALLOCATABLE], queue, task)

    def simulate_predicate(self, task: TaskInfo, node: NodeInfo) -> None:
        """Raise `FitError` when ``task`` does not fit ``node`` as things stand in the dry run."""
        tw.first_failure(self._lists[points.SIMULATE_PREDICATE], self._failed, task, node)
