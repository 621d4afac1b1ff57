"""The extension points, written once: name, callback signature, combine policy, config switch.

A plugin registers callbacks on a session with a typed key from this table,
``ssn.add_fn(points.PREDICATE, self.name, fn, twin=batch)``, so mypy checks
``fn`` against the point's callback Protocol and ``twin`` against its
vectorised twin's.  Each `Point` names:

* the Protocol its callbacks follow (its first type parameter) and, for the
  points node selection vectorises or sorts by key, the Protocol of the twin
  (second type parameter; ``None`` where a point has no twin);
* the combine policy, a function of `busched.framework.tiers` (how the answers
  of the plugins, walked tier by tier, make one: Volcano's session_plugins.go);
* the plugin switch that turns the point on, as its YAML key
  (``enablePredicate``); the switch's attribute name (``predicate``) is
  derived from it.  `SWITCHES`, which the configuration parser reads, is built
  from this table, so a switch is written once.

Twins (``busched.fastpath`` calls them): a predicate twin answers for many nodes
at once with a bool mask, True where the per-node callback raises no
`FitError`; a node-order twin gives the per-node scores as a float array, bit
for bit; a batch-node-order twin gives the callback's ``{node: score}`` as an
array in node order (0.0 where absent).  A predicate or batch twin returns
None when it cannot answer for a task (the per-node callbacks are used).  An
order twin is a sort key: ``fn(l, r)`` has the sign of comparing ``key(l)``
with ``key(r)``, and the key changes only when the object itself does.
``arrays`` is the session's `NodeArrays`, ``rows`` the rows of the nodes asked
about.  The tests in tests/test_kernels_*.py hold twins to their callbacks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from busched.framework import tiers as tw

if TYPE_CHECKING:
    import numpy as np

    from busched.api.job import JobInfo
    from busched.api.node import NodeInfo
    from busched.api.queue import QueueInfo
    from busched.api.subjob import SubJobInfo
    from busched.api.task import TaskInfo
    from busched.fastpath.fit import NodeArrays

__all__ = ["EVICT_GANG_PREEMPT", "EVICT_GANG_RECLAIM", "OTHER_SWITCHES", "POINTS", "SWITCHES", "EvictionContext",
           "Point", "ValidateResult", "switch_name"]

F = TypeVar("F")
W = TypeVar("W")


@dataclass
class ValidateResult:
    """A job-valid callback's answer: a job that did not pass is not scheduled this cycle."""

    passed: bool
    reason: str = ""
    message: str = ""


EVICT_GANG_PREEMPT = "GangPreempt"
EVICT_GANG_RECLAIM = "GangReclaim"


@dataclass
class EvictionContext:
    """What a unified-evictable callback is asked about: which gang action (``kind``, one of the
    ``EVICT_*`` names), for which starving job, within which hypernode (the candidate domain)."""

    kind: str
    job: JobInfo
    hypernode: str = ""


# -- callback signatures, one per extension point ----------------------------------------------------
class JobOrderFn(Protocol):
    def __call__(self, l: JobInfo, r: JobInfo, /) -> int: ...


class JobKey(Protocol):
    def __call__(self, job: JobInfo, /) -> Any: ...


class QueueOrderFn(Protocol):
    def __call__(self, l: QueueInfo, r: QueueInfo, /) -> int: ...


class VictimQueueOrderFn(Protocol):
    def __call__(self, l: QueueInfo, r: QueueInfo, preemptor: QueueInfo, /) -> int: ...


class TaskOrderFn(Protocol):
    def __call__(self, l: TaskInfo, r: TaskInfo, /) -> int: ...


class TaskKey(Protocol):
    def __call__(self, task: TaskInfo, /) -> Any: ...


class SubJobOrderFn(Protocol):
    def __call__(self, l: SubJobInfo, r: SubJobInfo, /) -> int: ...


class JobCheckFn(Protocol):
    """job_ready, job_starving: yes or no."""

    def __call__(self, job: JobInfo, /) -> bool: ...


class JobVoteFn(Protocol):
    """job_pipelined, job_enqueueable: permit (>0), reject (<0) or abstain (0)."""

    def __call__(self, job: JobInfo, /) -> int: ...


class SubJobCheckFn(Protocol):
    def __call__(self, sub_job: SubJobInfo, /) -> bool: ...


class SubJobVoteFn(Protocol):
    def __call__(self, sub_job: SubJobInfo, /) -> int: ...


class JobValidFn(Protocol):
    def __call__(self, job: JobInfo, /) -> ValidateResult | None: ...


class JobEnqueuedFn(Protocol):
    def __call__(self, job: JobInfo, /) -> None: ...


class QueueCheckFn(Protocol):
    def __call__(self, queue: QueueInfo, /) -> bool: ...


class QueueTaskCheckFn(Protocol):
    def __call__(self, queue: QueueInfo, task: TaskInfo, /) -> bool: ...


class VictimsFn(Protocol):
    """preemptable, reclaimable: (the victims it accepts, 0 to abstain else 1)."""

    def __call__(self, actor: TaskInfo, candidates: list[TaskInfo], /) -> tuple[list[TaskInfo], int]: ...


class UnifiedEvictableFn(Protocol):
    """unified_evictable (gangpreempt, gangreclaim): (the candidates it accepts, 0 to abstain else 1)."""

    def __call__(self, ctx: EvictionContext, candidates: list[TaskInfo], /) -> tuple[list[TaskInfo], int]: ...


class SimulateTaskFn(Protocol):
    """simulate_add_task / simulate_remove_task: ``task`` joins or leaves ``node`` in a dry run for
    ``preemptor``; the plugin brings the state it keeps for ``preemptor`` up to date (raise to abort)."""

    def __call__(self, preemptor: TaskInfo, task: TaskInfo, node: NodeInfo, /) -> None: ...


class VictimTasksFn(Protocol):
    def __call__(self, tasks: list[TaskInfo], /) -> list[TaskInfo]: ...


class PrePredicateFn(Protocol):
    """Raise `FitError` when the task fits no node at all."""

    def __call__(self, task: TaskInfo, /) -> None: ...


class PredicateFn(Protocol):
    """Raise `FitError` when the task does not fit the node."""

    def __call__(self, task: TaskInfo, node: NodeInfo, /) -> None: ...


class PredicateTwin(Protocol):
    def __call__(self, task: TaskInfo, arrays: NodeArrays, rows: np.ndarray, /) -> np.ndarray | None: ...


class NodeOrderFn(Protocol):
    def __call__(self, task: TaskInfo, node: NodeInfo, /) -> float: ...


class NodeOrderTwin(Protocol):
    def __call__(self, task: TaskInfo, arrays: NodeArrays, rows: np.ndarray, /) -> np.ndarray: ...


class BatchNodeOrderFn(Protocol):
    def __call__(self, task: TaskInfo, nodes: list[NodeInfo], /) -> dict[str, float]: ...


class BatchNodeOrderTwin(Protocol):
    def __call__(self, task: TaskInfo, arrays: NodeArrays, rows: np.ndarray,
                 nodes: list[NodeInfo], /) -> np.ndarray | None: ...


class HyperNodeOrderFn(Protocol):
    """Scores of the candidate hypernodes (name -> the nodes under it) for a sub-job."""

    def __call__(self, sub_job: SubJobInfo, hypernodes: dict[str, list[NodeInfo]], /) -> dict[str, float]: ...


class JobGradientFn(Protocol):
    def __call__(self, job: JobInfo, hypernode: Any, purpose: str, /) -> list[list[Any]]: ...


class SubJobGradientFn(Protocol):
    def __call__(self, sub_job: SubJobInfo, hypernode: Any, purpose: str, /) -> list[list[Any]]: ...


# -- the table --------------------------------------------------------------------------------------
def switch_name(yaml_key: str) -> str:
    """The attribute name of a YAML switch: ``enabledHyperNodeGradient`` -> ``hyper_node_gradient``."""
    stem = re.sub(r"^enabled?", "", yaml_key)
    return re.sub(r"(?<!^)([A-Z])", r"_\1", stem).lower()


class Point(Generic[F, W]):
    """One extension point: callbacks of type ``F`` (twins of type ``W``), combined by ``combine``,
    on for a plugin whose switch ``yaml`` is (None: always on) and, when ``any_of`` names switches,
    one of them is (Volcano gates its simulate-add/remove-task functions on two)."""

    __slots__ = ("any_of", "combine", "name", "switch", "yaml")

    def __init__(self, name: str, *, yaml: str | None, combine: Callable[..., Any],
                 any_of: tuple[str, ...] = ()) -> None:
        self.name = name
        self.yaml = yaml
        self.switch = switch_name(yaml) if yaml is not None else None
        self.any_of = tuple(switch_name(k) for k in any_of)
        self.combine = combine

    def __repr__(self) -> str:
        return f"Point({self.name!r})"


JOB_ORDER: Point[JobOrderFn, JobKey] = Point("job_order", yaml="enableJobOrder", combine=tw.first_decision)
QUEUE_ORDER: Point[QueueOrderFn, None] = Point("queue_order", yaml="enableQueueOrder", combine=tw.first_decision)
VICTIM_QUEUE_ORDER: Point[VictimQueueOrderFn, None] = Point("victim_queue_order", yaml=None,
                                                            combine=tw.first_decision)
TASK_ORDER: Point[TaskOrderFn, TaskKey] = Point("task_order", yaml="enableTaskOrder", combine=tw.first_decision)
SUB_JOB_ORDER: Point[SubJobOrderFn, None] = Point("sub_job_order", yaml="enabledSubJobOrder",
                                                  combine=tw.first_decision)
PREEMPTABLE: Point[VictimsFn, None] = Point("preemptable", yaml="enablePreemptable", combine=tw.intersect_victims)
RECLAIMABLE: Point[VictimsFn, None] = Point("reclaimable", yaml="enableReclaimable", combine=tw.intersect_victims)
# Volcano's Session.UnifiedEvictable reads no switch: every plugin that registers it votes
UNIFIED_EVICTABLE: Point[UnifiedEvictableFn, None] = Point("unified_evictable", yaml=None,
                                                           combine=tw.intersect_victims)
VICTIM_TASKS: Point[Sequence[VictimTasksFn], None] = Point("victim_tasks", yaml="enabledVictim",
                                                       combine=tw.union_victims)
# The dry run of topology-aware preemption (Volcano's Simulate* functions).  SIMULATE_ADD_TASK and
# SIMULATE_REMOVE_TASK are on for plugins whose preemptable or allocatable switch is (two switches, as
# Volcano reads them).
_PREEMPTABLE_OR_ALLOCATABLE = ("enablePreemptable", "enabledAllocatable")
SIMULATE_ADD_TASK: Point[SimulateTaskFn, None] = Point("simulate_add_task", yaml=None, combine=tw.first_failure,
                                                       any_of=_PREEMPTABLE_OR_ALLOCATABLE)
SIMULATE_REMOVE_TASK: Point[SimulateTaskFn, None] = Point("simulate_remove_task", yaml=None,
                                                          combine=tw.first_failure, any_of=_PREEMPTABLE_OR_ALLOCATABLE)
SIMULATE_ALLOCATABLE: Point[QueueTaskCheckFn, None] = Point("simulate_allocatable", yaml="enabledAllocatable",
                                                            combine=tw.all_pass)
SIMULATE_PREDICATE: Point[PredicateFn, None] = Point("simulate_predicate", yaml="enablePredicate",
                                                     combine=tw.first_failure)
JOB_READY: Point[JobCheckFn, None] = Point("job_ready", yaml="enableJobReady", combine=tw.all_pass)
JOB_PIPELINED: Point[JobVoteFn, None] = Point("job_pipelined", yaml="enableJobPipelined", combine=tw.vote)
JOB_STARVING: Point[JobCheckFn, None] = Point("job_starving", yaml="enableJobStarving", combine=tw.starving_vote)
SUB_JOB_READY: Point[SubJobCheckFn, None] = Point("sub_job_ready", yaml="enabledSubJobReady", combine=tw.all_pass)
SUB_JOB_PIPELINED: Point[SubJobVoteFn, None] = Point("sub_job_pipelined", yaml="enabledSubJobPipelined",
                                                     combine=tw.vote)
JOB_VALID: Point[JobValidFn, None] = Point("job_valid", yaml=None, combine=tw.first_invalid)
# Volcano gates both JobEnqueueable and JobEnqueued on EnabledJobEnqueued
JOB_ENQUEUEABLE: Point[JobVoteFn, None] = Point("job_enqueueable", yaml="enableJobEnqueued", combine=tw.vote)
JOB_ENQUEUED: Point[JobEnqueuedFn, None] = Point("job_enqueued", yaml="enableJobEnqueued", combine=tw.call_all)
OVERUSED: Point[QueueCheckFn, None] = Point("overused", yaml="enabledOverused", combine=tw.any_true)
ALLOCATABLE: Point[QueueTaskCheckFn, None] = Point("allocatable", yaml="enabledAllocatable", combine=tw.all_pass)
PREEMPTIVE: Point[QueueTaskCheckFn, None] = Point("preemptive", yaml="enablePreemptive", combine=tw.all_pass)
PRE_PREDICATE: Point[PrePredicateFn, None] = Point("pre_predicate", yaml="enablePredicate", combine=tw.first_failure)
PREDICATE: Point[PredicateFn, PredicateTwin] = Point("predicate", yaml="enablePredicate", combine=tw.first_failure)
NODE_ORDER: Point[NodeOrderFn, NodeOrderTwin] = Point("node_order", yaml="enableNodeOrder", combine=tw.sum_scores)
BATCH_NODE_ORDER: Point[BatchNodeOrderFn, BatchNodeOrderTwin] = Point("batch_node_order", yaml="enableNodeOrder",
                                                                      combine=tw.sum_maps)
HYPER_NODE_ORDER: Point[HyperNodeOrderFn, None] = Point("hyper_node_order", yaml="enabledHyperNodeOrder",
                                                        combine=tw.by_plugin)
HYPER_NODE_GRADIENT_FOR_JOB: Point[JobGradientFn, None] = Point(
    "hyper_node_gradient_for_job", yaml="enabledHyperNodeGradient", combine=tw.first_plugin)
HYPER_NODE_GRADIENT_FOR_SUB_JOB: Point[SubJobGradientFn, None] = Point(
    "hyper_node_gradient_for_sub_job", yaml="enabledHyperNodeGradient", combine=tw.first_plugin)

POINTS: tuple[Point[Any, Any], ...] = (
    JOB_ORDER, QUEUE_ORDER, VICTIM_QUEUE_ORDER, TASK_ORDER, SUB_JOB_ORDER, PREEMPTABLE, RECLAIMABLE,
    UNIFIED_EVICTABLE, VICTIM_TASKS,
    JOB_READY, JOB_PIPELINED, JOB_STARVING, SUB_JOB_READY, SUB_JOB_PIPELINED, JOB_VALID, JOB_ENQUEUEABLE,
    JOB_ENQUEUED, OVERUSED, ALLOCATABLE, PREEMPTIVE, PRE_PREDICATE, PREDICATE, NODE_ORDER, BATCH_NODE_ORDER,
    HYPER_NODE_ORDER, HYPER_NODE_GRADIENT_FOR_JOB, HYPER_NODE_GRADIENT_FOR_SUB_JOB, SIMULATE_ADD_TASK,
    SIMULATE_REMOVE_TASK, SIMULATE_ALLOCATABLE, SIMULATE_PREDICATE,
)

# Switches Volcano's configuration has that gate no point here: enableHierarchy is read by plugins
# (`Session.switch_on`); the others gate Volcano points no plugin of ours registers (ClusterOrderFn,
# BestNodeFn, TargetJobFn, ReservedNodesFn), accepted so Volcano configurations load unchanged.
OTHER_SWITCHES: tuple[str, ...] = ("enableHierarchy", "enabledClusterOrder", "enableBestNode", "enableTargetJob",
                                   "enableReservedNodes")

# YAML switch name -> attribute name (the mix of enable/enabled is Volcano's own)
SWITCHES: dict[str, str] = {key: switch_name(key)
                            for key in [p.yaml for p in POINTS if p.yaml is not None] + list(OTHER_SWITCHES)}
