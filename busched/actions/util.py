"""Helpers shared by the eviction actions (preempt, reclaim, shuffle).

Everything here works through session methods and statements, never plugins:

- `preemption_ineligibility` -- why a task may not preempt at all (preemptionPolicy
  Never, or a nominated node that makes preemption pointless), None when it may;
- `candidate_node_groups` -- the predicated nodes split by scheduler shard, the
  nodes this scheduler owns first (soft sharding), everything in one group otherwise;
- `victims_cover` -- Volcano's ValidateVictims: the node's future idle plus what
  the victims hold must cover the preemptor's request;
- `fits_on_node` -- the preemptor's queue may take it, the node's future idle holds
  it, and every predicate passes on the node as it is now;
- `session_task` -- the session's own TaskInfo for a node copy or clone of it;
- `TrialEvictions` -- per-victim evictions on the live session that can be undone
  one by one (the dry run of topology-aware preemption), told to the plugins'
  simulate points, leaving no trace.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from busched.api.fit import Code, FitError
from busched.api.job import JobInfo
from busched.api.node import NodeInfo
from busched.api.queue import QueueInfo
from busched.api.resource import ZERO
from busched.api.subjob import SubJobInfo
from busched.api.task import TaskInfo, TaskStatus, preemptable_status
from busched.framework.arguments import declared_of
from busched.framework.config import SchedulerConfig
from busched.framework.pqueue import KeyedQueue, PriorityQueue
from busched.framework.session import Session
from busched.framework.statement import Statement

__all__ = ["PREEMPT_NEVER", "preemption_ineligibility", "candidate_node_groups", "victims_cover", "fits_on_node",
           "session_task", "node_candidates", "contains_network_topology",
           "TrialEvictions", "PREDICATE_ERROR_CACHE_KEY", "predicate_error_cache", "basic_preemptee"]

PREEMPT_NEVER = "Never"
PREDICATE_ERROR_CACHE_KEY = "predicateErrorCacheEnable"


def predicate_error_cache(config: SchedulerConfig, action: Any) -> bool:
    """The action's ``predicateErrorCacheEnable`` (default on), read alike by every action that predicates.
    ``action``: the action itself (its ``reads_arguments`` must name the key), or an action's name."""
    if isinstance(action, str):
        return config.action_arguments(action).get_bool(PREDICATE_ERROR_CACHE_KEY, True)
    return config.action_arguments(action.name, declared_of(action)).get_bool(PREDICATE_ERROR_CACHE_KEY, True)


# -- jobs and tasks --------------------------------------------------------------------------
def contains_network_topology(job: JobInfo) -> bool:
    """The job, or one of its sub-groups, asks for a network topology (such jobs are not preemptors)."""
    own = getattr(job, "contains_network_topology", None)
    if callable(own):  # the job model's own answer (sub-jobs included) when it has one
        return bool(own())

    def has(nt: Any) -> bool:
        return isinstance(nt, dict) and bool(nt.get("mode"))

    if has(job.network_topology):
        return True
    return any(has(p.get("networkTopology")) for p in job.subgroup_policy if isinstance(p, dict))


def session_task(ssn: Session, task: TaskInfo) -> TaskInfo:
    """The job's own TaskInfo for ``task`` (which may be a node's copy or a clone)."""
    job = ssn.jobs.get(task.job)
    if job is not None:
        t = job.tasks.get(task.uid)
        if t is not None:
            return t
    return task


T = TypeVar("T")


def drain(q: PriorityQueue[T]) -> list[T]:
    """Everything in ``q``, in its order (``q`` is emptied: drain a clone to keep it)."""
    out = []
    while not q.empty():
        out.append(q.pop())
    return out


def by_queue(ssn: Session, jobs: Iterable[JobInfo], wanted: Callable[[JobInfo], bool],
             key: Callable[[JobInfo], Any] | None = None
             ) -> tuple[PriorityQueue[QueueInfo], dict[str, PriorityQueue[JobInfo] | KeyedQueue[JobInfo]]]:
    """The queues of ``jobs`` (those the session knows) in queue order, each once, and per queue the jobs
    ``wanted`` picks, in job order (``key``: a job order key, `Session.job_order_key`)."""
    queues: PriorityQueue[QueueInfo] = PriorityQueue(ssn.queue_order_fn)
    seen: set[str] = set()
    picked: dict[str, PriorityQueue[JobInfo] | KeyedQueue[JobInfo]] = {}
    for job in jobs:
        queue = ssn.queues.get(job.queue)
        if queue is None:
            continue
        if queue.uid not in seen:
            seen.add(queue.uid)
            queues.push(queue)
        if wanted(job):
            q = picked.get(queue.uid)
            if q is None:
                # with a key, sorted once when first popped rather than heaped (the same pops: KeyedQueue)
                q = picked[queue.uid] = (PriorityQueue(ssn.job_order_fn) if key is None
                                         else KeyedQueue(ssn.job_order_fn, key))
            q.push(job)
    return queues, picked


def starving_by_queue(ssn: Session
                      ) -> tuple[PriorityQueue[QueueInfo], dict[str, PriorityQueue[JobInfo] | KeyedQueue[JobInfo]]]:
    """The queues of the session's valid, non-pending jobs in queue order, and per queue its starving jobs
    in job order: where reclaim and the gang actions look for jobs to evict for."""
    return by_queue(ssn, (job for job in ssn.jobs.values()
                          if not job.is_pending() and ssn.job_valid(job) is None), ssn.job_starving)


def sub_job_order(ssn: Session, job: JobInfo) -> Callable[[SubJobInfo, SubJobInfo], bool]:
    """The order ``job``'s sub-jobs are placed in (Volcano's allocate and gang actions alike): the fewest
    not-yet-ready sub-jobs that still make every policy's minSubGroups first, then the session's order."""
    ready: dict[str, int] = {}
    not_ready: list[SubJobInfo] = []
    for sj in job.sub_jobs.values():
        if ssn.sub_job_ready(job, sj):
            ready[sj.gid] = ready.get(sj.gid, 0) + 1
        else:
            not_ready.append(sj)
    required: set[str] = set()
    for sj in drain(PriorityQueue(ssn.sub_job_order_fn, not_ready)):
        if ready.get(sj.gid, 0) < job.min_sub_jobs.get(sj.gid, 0):
            required.add(sj.uid)
            ready[sj.gid] = ready.get(sj.gid, 0) + 1

    def less(left: SubJobInfo, right: SubJobInfo) -> bool:
        lq, rq = left.uid in required, right.uid in required
        if lq != rq:
            return lq
        return ssn.sub_job_order_fn(left, right)

    return less


def basic_preemptee(preemptor: TaskInfo, task: TaskInfo) -> bool:
    """The rules every preemptee obeys: running (or bound), preemptable, and a BestEffort
    preemptor only takes from BestEffort tasks."""
    if not preemptable_status(task.status):
        return False
    if preemptor.best_effort and not task.best_effort:
        return False
    return task.preemptable


def node_candidates(node: NodeInfo, keep: Callable[[TaskInfo], bool] | None) -> list[TaskInfo]:
    """Clones of the node's tasks that ``keep`` accepts, in the node's order."""
    return [t.clone() for t in node.tasks.values() if keep is None or keep(t)]


def preemption_ineligibility(ssn: Session, task: TaskInfo) -> str | None:
    """Why ``task`` may not preempt others, or None when it may."""
    if task.preemption_policy == PREEMPT_NEVER:
        return "not eligible to preempt other tasks due to preemptionPolicy is Never"
    nominated = task.nominated_node_name
    if not nominated:
        return None
    node = ssn.nodes.get(nominated)
    if node is None:
        return "not eligible due to the pod's nominated node is not found in the session"
    try:
        ssn.predicate_fn(task, node)
    except FitError as e:
        if e.has(Code.UnschedulableAndUnresolvable):
            return None
        # A lower-priority pod on the nominated node terminating because of an earlier preemption
        # would also make the task ineligible; the cluster model has no such pods.
        return None
    except Exception as e:  # noqa: BLE001 - a predicate that breaks is not a fit error
        return f"not eligible due to the predicate returned a non-FitError error, the error is: {e}"
    return ("not eligible due to the pod's nominated node is already schedulable, which should not happen "
            "as preemption means no node is schedulable")


# -- nodes ---------------------------------------------------------------------------------------
def candidate_node_groups(ssn: Session, nodes: Iterable[NodeInfo]) -> list[list[NodeInfo]]:
    """Predicated nodes grouped for trying in order: in soft sharding mode the nodes of this
    scheduler's shard come first and the others second; otherwise one group holds them all."""
    inside: list[NodeInfo] = []
    outside: list[NodeInfo] = []
    soft = ssn.shard.mode == "soft"
    for n in nodes:
        if soft and n.name not in ssn.nodes_in_shard:
            outside.append(n)
        else:
            inside.append(n)
    return [inside, outside]


def victims_cover(preemptor: TaskInfo, node: NodeInfo, victims: Iterable[TaskInfo]) -> bool:
    """The node's future idle plus the victims' requests holds the preemptor (ValidateVictims).

    No victims is fine as long as the node already has room."""
    future = node.future_idle()
    for v in victims:
        future.add(v.resreq)
    return preemptor.init_resreq.less_equal(future, ZERO)


def fits_on_node(ssn: Session, queue: QueueInfo | None, task: TaskInfo, node: NodeInfo, *,
                 allocatable: Callable[[QueueInfo, TaskInfo], bool] | None = None,
                 predicate: Callable[[TaskInfo, NodeInfo], None] | None = None) -> bool:
    """The queue may take the task, the node's future idle holds it, and every predicate passes.
    ``allocatable`` and ``predicate`` are the session's ``allocatable`` and ``predicate_fn`` unless
    given (preempt's dry run gives ``simulate_allocatable`` and ``simulate_predicate``)."""
    if allocatable is None:
        allocatable = ssn.allocatable
    if predicate is None:
        predicate = ssn.predicate_fn
    if queue is not None and not allocatable(queue, task):
        return False
    if not task.init_resreq.less_equal(node.future_idle(), ZERO):
        return False
    try:
        predicate(task, node)
    except FitError:
        return False
    except Exception:  # noqa: BLE001 - a predicate that breaks means the task does not fit
        return False
    return True


# -- trial evictions -------------------------------------------------------------------------------
class TrialEvictions:
    """Evictions made on the live session one statement per victim, so that any single one can be
    undone (reprieved) and all of them discarded at the end, as if none had happened.

    While a trial eviction stands, the session sees the victim Releasing: node accounting, job
    counts and every plugin's running totals (through the deallocate event) reflect it.  Given a
    ``preemptor``, each eviction and each undo is also told to the plugins through
    ``ssn.simulate_remove_task`` / ``ssn.simulate_add_task`` (the state they keep for that
    preemptor: Volcano's simulate functions), which may raise to refuse the change.
    """

    def __init__(self, ssn: Session, preemptor: TaskInfo | None = None) -> None:
        self.ssn = ssn
        self.preemptor = preemptor
        self._open: dict[str, Any] = {}  # task uid -> statement holding its eviction
        self._saved: dict[str, tuple[TaskStatus | None, str]] = {}

    def evict(self, task: TaskInfo, reason: str = "preempt") -> None:
        if task.uid in self._open:
            return
        self._saved.setdefault(task.uid, (task.last_status, task.last_node))
        stmt = Statement(self.ssn)
        stmt.evict(task, reason)
        self._open[task.uid] = stmt
        self._tell(self.ssn.simulate_remove_task, task)

    def undo(self, task: TaskInfo) -> None:
        stmt = self._open.pop(task.uid, None)
        if stmt is None:
            return
        stmt.discard()
        last = self._saved.get(task.uid)
        if last is not None:
            task.last_status, task.last_node = last
        self._tell(self.ssn.simulate_add_task, task)

    def _tell(self, fn: Callable[[TaskInfo, TaskInfo, NodeInfo], None], task: TaskInfo) -> None:
        node = self.ssn.nodes.get(task.node_name)
        if self.preemptor is not None and node is not None:
            fn(self.preemptor, task, node)

    def discard(self) -> None:
        """Undo every standing eviction, the last first; a plugin refusing an undo does not stop the rest."""
        for uid in reversed(list(self._open)):
            stmt = self._open[uid]
            task = stmt.operations[0].task if stmt.operations else None
            if task is None:
                self._open.pop(uid).discard()
                continue
            try:
                self.undo(task)
            except Exception:  # noqa: BLE001 - the session is restored; only the plugin's view may lag
                pass
        self._saved.clear()


# What AllocateAction.candidates_for answers besides a list of nodes (shared with topology allocation).
SKIP = "skip"  # this task cannot go anywhere now: try the job's next task
STOP = "stop"  # pre-predicates failed and the job's turn ends
NO_FIT = "no-fit"  # no node fits this task and the job's turn ends
