"""One scheduling cycle's world: the snapshot, the plugins' callbacks, and the decisions made.

A session opens over a `ClusterSnapshot`, lets each configured plugin register
callbacks on named extension points, and offers actions one method per point
(``job_order_fn``, ``predicate_fn``, ``job_ready`` ...).  Each method walks the
tiers with one combine policy from `busched.framework.tiers`.  Actions never see
plugins.  Decisions (binds, evictions) are recorded on the session; closing it
recomputes podgroup status.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from busched.api.fit import Code, FitError, Status
from busched.api.job import JobInfo, PodGroupPhase, unsettled
from busched.api.node import NodeInfo
from busched.api.queue import QueueInfo
from busched.api.resource import Resource
from busched.api.task import TaskInfo, TaskStatus
from busched.framework import hypernodes as topology
from busched.framework import plugin_errors
from busched.framework import reuse
from busched.framework import tiers as tw
from busched.framework.config import SchedulerConfig
from busched.framework.pqueue import PriorityQueue
from busched.api.snapshot import ClusterSnapshot
from busched.kernels.fit import NodeArrays

__all__ = ["Session", "POINTS", "Decision", "EventHandler"]

# extension point -> the plugin switch that enables it (None: always on)
POINTS: dict[str, str | None] = {
    "job_order": "job_order",
    "queue_order": "queue_order",
    "victim_queue_order": None,
    "cluster_order": "cluster_order",
    "task_order": "task_order",
    "sub_job_order": "sub_job_order",
    "preemptable": "preemptable",
    "reclaimable": "reclaimable",
    "job_ready": "job_ready",
    "job_pipelined": "job_pipelined",
    "sub_job_ready": "sub_job_ready",
    "sub_job_pipelined": "sub_job_pipelined",
    "predicate": "predicate",
    "pre_predicate": "predicate",
    "best_node": "best_node",
    "node_order": "node_order",
    "batch_node_order": "node_order",
    "node_map": "node_order",
    "node_reduce": "node_order",
    "hyper_node_order": "hyper_node_order",
    "overused": "overused",
    "preemptive": "preemptive",
    "allocatable": "allocatable",
    "job_valid": None,
    "job_enqueueable": "job_enqueued",
    "job_enqueued": "job_enqueued",
    "target_job": "target_job",
    "reserved_nodes": "reserved_nodes",
    "victim_tasks": "victim",
    "job_starving": "job_starving",
    "hyper_node_gradient_for_job": "hyper_node_gradient",
    "hyper_node_gradient_for_sub_job": "hyper_node_gradient",
}


@dataclass
class EventHandler:
    """Plugins that keep running totals (drf, proportion, capacity) follow allocations with these."""

    allocate: Callable[[TaskInfo], None] | None = None
    deallocate: Callable[[TaskInfo], None] | None = None


@dataclass
class Decision:
    kind: str  # bind | evict
    task: str  # "namespace/name"
    node: str
    reason: str = ""


@dataclass
class ValidateResult:
    passed: bool
    reason: str = ""
    message: str = ""


class SessionError(RuntimeError):
    pass


class Session:
    def __init__(self, snapshot: ClusterSnapshot, config: SchedulerConfig, *, seed: int = 0,
                 uid: str = "session", now: float = 0.0) -> None:
        self.uid = uid
        self.now = now  # the cycle's clock (seconds); plugins read time only from here
        self.config = config
        self.tiers = config.tiers
        self.jobs: dict[str, JobInfo] = snapshot.jobs
        self.node_list: list[NodeInfo] = snapshot.nodes
        self.nodes: dict[str, NodeInfo] = {n.name: n for n in snapshot.nodes}
        self.queues: dict[str, QueueInfo] = snapshot.queues
        self.priority_classes = snapshot.priority_classes
        self.hypernodes = snapshot.hypernodes
        self.resource_quotas = snapshot.resource_quotas
        self.others = snapshot.others
        self.refused: dict[str, frozenset[str]] = snapshot.refused  # task -> nodes that refused it recently
        self.shard = snapshot.shard
        self.nodes_in_shard: frozenset[str] = (snapshot.shard.nodes if snapshot.shard.mode
                                               else frozenset(self.nodes))
        # the nodes' allocatable summed (again only when one changed: busched.framework.reuse)
        self.total_resource = reuse.summed(self, "total_resource", list(self.node_list), _allocatable).clone()
        self.rng = random.Random(seed)
        # the jobs enqueue, allocate and backfill may have work in (the rest they would skip)
        self.unsettled_jobs: list[JobInfo] = (snapshot.unsettled if snapshot.unsettled is not None
                                              else [j for j in self.jobs.values() if unsettled(j)])
        self.decisions: list[Decision] = []
        self.event_handlers: list[EventHandler] = []
        self.plugins: dict[str, Any] = {}
        self.enqueue_enabled = config.has_action("enqueue")
        self._fns: dict[str, dict[str, Any]] = {p: {} for p in POINTS}
        self._resolved: dict[str, tw.Tiers] = {}
        self.cycle_state: dict[str, dict[str, Any]] = {}  # per-task scratch, keyed by task uid
        # state several plugins share for this session only (the predicates' pod view); it lives and
        # dies with the session (a global map keyed by session would keep every session alive)
        self.shared: dict[str, Any] = {}
        self.dirty_jobs: set[str] = set()
        self._arrays: NodeArrays | None = None
        self.last_node_index = 0  # where the next sampled node search starts
        # the hypernode tree (busched.framework.hypernodes); jobs' network topology adjusted to it
        self.topology: topology.Topology = topology.open_topology(self)
        self._lease = snapshot.lease
        if self._lease is not None:
            if self._lease.superseded:
                raise SessionError("snapshot superseded: a later snapshot lent its objects again; "
                                   "take a new one (busched.cache.shared)")
            self._lease.in_session = self._lease.opened = True

    @property
    def arrays(self) -> NodeArrays:
        """The node x resource matrices, built on first use and kept current by node listeners."""
        if self._arrays is None:
            # seeded from the last session's arrays where the nodes are the same lent objects
            state = self.others.get("plugin_state")
            like = state.get("node_arrays") if state is not None else None
            self._arrays = NodeArrays(self.node_list, like=like)
            if state is not None:
                state["node_arrays"] = self._arrays
        return self._arrays

    # -- registration (plugins) ---------------------------------------------------
    def add_fn(self, point: str, plugin: str, fn: Any) -> None:
        if point not in POINTS:
            raise SessionError(f"unknown extension point {point!r}")
        self._fns[point][plugin] = fn
        self._resolved.pop(point, None)

    def add_event_handler(self, handler: EventHandler) -> None:
        self.event_handlers.append(handler)

    def _tiers(self, point: str) -> tw.Tiers:
        r = self._resolved.get(point)
        if r is None:
            r = self._resolved[point] = tw.resolve(self.tiers, self._fns[point], POINTS[point])
        return r

    def has(self, point: str) -> bool:
        return any(self._tiers(point))

    def switch_on(self, plugin: str, switch: str) -> bool:
        """Whether ``plugin`` is configured with ``switch`` (an attribute name of SWITCHES) on."""
        for tier in self.tiers:
            for p in tier.plugins:
                if p.name == plugin:
                    return p.enabled(switch)
        return False

    def simulates_evictions(self) -> bool:
        """Whether a plugin with pre-predicate state follows trial evictions (Volcano calls its
        simulate hooks only for plugins whose preemptable or allocatable switch is on)."""
        pre = self._fns["pre_predicate"]
        return any(p.name in pre and (p.enabled("preemptable") or p.enabled("allocatable"))
                   for tier in self.tiers for p in tier.plugins)

    # -- orders ------------------------------------------------------------------
    def job_order_compare(self, l: JobInfo, r: JobInfo) -> int:
        return tw.first_decision(self._tiers("job_order"), l, r)

    def job_order_key(self) -> Callable[[JobInfo], tuple] | None:
        """A sort key equal to `job_order_fn` when every job-order plugin offers one, else None.
        Only for a queue whose jobs do not change while they wait (busched.kernels.order)."""
        from busched.kernels.order import job_order_key

        return job_order_key(self)

    def job_order_fn(self, l: JobInfo, r: JobInfo) -> bool:
        c = self.job_order_compare(l, r)
        if c:
            return c < 0
        if l.created != r.created:
            return l.created < r.created
        return l.uid < r.uid

    def queue_order_fn(self, l: QueueInfo, r: QueueInfo) -> bool:
        c = tw.first_decision(self._tiers("queue_order"), l, r)
        if c:
            return c < 0
        if l.created != r.created:
            return l.created < r.created
        return l.uid < r.uid

    def victim_queue_order_fn(self, l: QueueInfo, r: QueueInfo, preemptor: QueueInfo) -> bool:
        c = tw.first_decision(self._tiers("victim_queue_order"), l, r, preemptor)
        if c:
            return c < 0
        return not self.queue_order_fn(l, r)

    def task_order_compare(self, l: TaskInfo, r: TaskInfo) -> int:
        return tw.first_decision(self._tiers("task_order"), l, r)

    def task_order_fn(self, l: TaskInfo, r: TaskInfo) -> bool:
        c = self.task_order_compare(l, r)
        if c:
            return c < 0
        return _compare_task_index(l, r)

    def sort_tasks(self, tasks: Iterable[TaskInfo]) -> list[TaskInfo]:
        return sorted(tasks, key=functools.cmp_to_key(lambda a, b: -1 if self.task_order_fn(a, b)
                                                      else (1 if self.task_order_fn(b, a) else 0)))

    def build_victims_queue(self, victims: list[TaskInfo], preemptor: TaskInfo) -> PriorityQueue[TaskInfo]:
        """Victims in eviction order: queue, job and task order reversed (BuildVictimsPriorityQueue)."""

        def job_then_task(lj: JobInfo, rj: JobInfo, l: TaskInfo, r: TaskInfo) -> bool:
            c = self.job_order_compare(lj, rj)
            if c:
                return c > 0
            return not self.task_order_fn(l, r)

        def less(l: TaskInfo, r: TaskInfo) -> bool:
            if l.job == r.job:
                return not self.task_order_fn(l, r)
            lj, rj = self.jobs.get(l.job), self.jobs.get(r.job)
            pj = self.jobs.get(preemptor.job)
            if lj is None or rj is None:
                if lj is None and rj is None:
                    return not self.task_order_fn(l, r)
                return lj is None
            if pj is None:
                return job_then_task(lj, rj, l, r)
            if lj.queue != rj.queue:
                return self.victim_queue_order_fn(self.queues[lj.queue], self.queues[rj.queue],
                                                  self.queues[pj.queue])
            return job_then_task(lj, rj, l, r)

        return PriorityQueue(less, victims)

    # -- job predicates --------------------------------------------------------------
    def job_ready(self, job: JobInfo) -> bool:
        return tw.all_pass(self._tiers("job_ready"), job)

    def job_pipelined(self, job: JobInfo) -> bool:
        return tw.vote(self._tiers("job_pipelined"), job)

    def job_starving(self, job: JobInfo) -> bool:
        return tw.starving_vote(self._tiers("job_starving"), job)

    # -- sub-jobs and hypernodes (busched.api.subjob, busched.framework.hypernodes) -------
    def sub_job_ready(self, job: JobInfo, sub_job: Any) -> bool:
        if not job.contains_sub_job_policy():
            return self.job_ready(job)
        return tw.all_pass(self._tiers("sub_job_ready"), sub_job)

    def sub_job_pipelined(self, job: JobInfo, sub_job: Any) -> bool:
        if not job.contains_sub_job_policy():
            return self.job_pipelined(job)
        return tw.vote(self._tiers("sub_job_pipelined"), sub_job)

    def sub_job_order_fn(self, l: Any, r: Any) -> bool:
        c = tw.first_decision(self._tiers("sub_job_order"), l, r)
        if c:
            return c < 0
        if l.match_index != r.match_index:
            return l.match_index < r.match_index
        return l.uid < r.uid

    def hyper_node_gradient_for_job_fn(self, job: JobInfo, hypernode: Any,
                                       purpose: str = "allocate") -> list[list[Any]]:
        """Hypernodes to try for a job, in gradients; the first plugin with an answer decides."""
        for row in self._tiers("hyper_node_gradient_for_job"):
            for _, fn in row:
                return fn(job, hypernode, purpose)
        return [[hypernode]]

    def hyper_node_gradient_for_sub_job_fn(self, sub_job: Any, hypernode: Any,
                                           purpose: str = "allocate") -> list[list[Any]]:
        for row in self._tiers("hyper_node_gradient_for_sub_job"):
            for _, fn in row:
                return fn(sub_job, hypernode, purpose)
        return [[hypernode]]

    def hyper_node_order_map_fn(self, sub_job: Any,
                                hypernodes: dict[str, list[NodeInfo]]) -> dict[str, dict[str, float]]:
        """Each hypernode-order plugin's scores: plugin -> hypernode -> score."""
        out: dict[str, dict[str, float]] = {}
        for row in self._tiers("hyper_node_order"):
            for name, fn in row:
                out[name] = fn(sub_job, hypernodes)
        return out

    def job_valid(self, job: JobInfo) -> ValidateResult | None:
        for row in self._tiers("job_valid"):
            for _, fn in row:
                vr = fn(job)
                if vr is not None and not vr.passed:
                    return vr
        return None

    def job_enqueueable(self, job: JobInfo) -> bool:
        return tw.vote(self._tiers("job_enqueueable"), job)

    def job_enqueued(self, job: JobInfo) -> None:
        for row in self._tiers("job_enqueued"):
            for _, fn in row:
                fn(job)

    def target_job(self, jobs: list[JobInfo]) -> JobInfo | None:
        for row in self._tiers("target_job"):
            for _, fn in row:
                return fn(jobs)
        return None

    def reserved_nodes(self) -> None:
        for row in self._tiers("reserved_nodes"):
            for _, fn in row:
                fn()

    # -- queue predicates -------------------------------------------------------------
    def overused(self, queue: QueueInfo) -> bool:
        return tw.any_true(self._tiers("overused"), queue)

    def allocatable(self, queue: QueueInfo, task: TaskInfo) -> bool:
        return tw.all_pass(self._tiers("allocatable"), queue, task)

    def preemptive(self, queue: QueueInfo, task: TaskInfo) -> bool:
        return tw.all_pass(self._tiers("preemptive"), queue, task)

    # -- victims -----------------------------------------------------------------------
    def preemptable(self, preemptor: TaskInfo, preemptees: list[TaskInfo]) -> list[TaskInfo]:
        return tw.intersect_victims(self._tiers("preemptable"), preemptor, preemptees) or []

    def reclaimable(self, reclaimer: TaskInfo, reclaimees: list[TaskInfo]) -> list[TaskInfo]:
        return tw.intersect_victims(self._tiers("reclaimable"), reclaimer, reclaimees) or []

    def victim_tasks(self, tasks: list[TaskInfo]) -> list[TaskInfo]:
        return tw.union_victims(self._tiers("victim_tasks"), tasks)

    # -- node selection ---------------------------------------------------------------------
    # (a callback that raises anything but a FitError fails the task, naming the plugin:
    # busched.framework.plugin_errors; the try costs nothing until something raises)
    def pre_predicate_fn(self, task: TaskInfo) -> None:
        """Raise `FitError` when a task can fit no node at all."""
        for row in self._tiers("pre_predicate"):
            for name, fn in row:
                try:
                    fn(task)
                except FitError:
                    raise
                except Exception as e:
                    raise plugin_errors.failed(name, task, "", e, self) from e

    def predicate_fn(self, task: TaskInfo, node: NodeInfo) -> None:
        """Raise the first failing plugin's `FitError`."""
        for row in self._tiers("predicate"):
            for name, fn in row:
                try:
                    fn(task, node)
                except FitError:
                    raise
                except Exception as e:
                    raise plugin_errors.failed(name, task, node.name, e, self) from e

    def predicate_for_allocate(self, task: TaskInfo, node: NodeInfo) -> None:
        try:
            self.predicate_fn(task, node)
        except FitError as e:
            if e.has(Code.Unschedulable, Code.UnschedulableAndUnresolvable, Code.Error, Code.Skip, Code.Wait):
                raise
        except Exception as e:  # a plugin bug must not kill the cycle: the node is just unusable
            raise FitError(task.key, node.name, [Status(Code.Error, str(e))]) from e

    def predicate_for_preempt(self, task: TaskInfo, node: NodeInfo) -> None:
        try:
            self.predicate_fn(task, node)
        except FitError as e:
            if e.has(Code.UnschedulableAndUnresolvable, Code.Error, Code.Skip, Code.Wait):
                raise
        except Exception as e:
            raise FitError(task.key, node.name, [Status(Code.Error, str(e))]) from e

    def node_order_fn(self, task: TaskInfo, node: NodeInfo) -> float:
        total: float = 0  # (as sum() gave it)
        for row in self._tiers("node_order"):
            for name, fn in row:
                try:
                    total += fn(task, node)
                except Exception as e:
                    raise plugin_errors.failed(name, task, node.name, e, self) from e
        return total

    def batch_node_order_fn(self, task: TaskInfo, nodes: list[NodeInfo]) -> dict[str, float]:
        out: dict[str, float] = {}
        for row in self._tiers("batch_node_order"):
            for plugin, fn in row:
                try:
                    scores = fn(task, nodes)
                except Exception as e:
                    raise plugin_errors.failed(plugin, task, "", e, self) from e
                for name, s in scores.items():
                    out[name] = out.get(name, 0.0) + s
        return out

    def node_order_map_fn(self, task: TaskInfo, node: NodeInfo) -> tuple[dict[str, float], float]:
        """Per plugin map scores (for a later reduce) and the summed plain node-order score."""
        maps: dict[str, float] = {}
        order = 0.0
        order_fns = self._fns["node_order"]
        map_fns = self._fns["node_map"]
        for tier in self.tiers:
            for p in tier.plugins:
                if not p.enabled("node_order"):
                    continue
                try:
                    if p.name in order_fns:
                        order += order_fns[p.name](task, node)
                    if p.name in map_fns:
                        maps[p.name] = map_fns[p.name](task, node)
                except Exception as e:
                    raise plugin_errors.failed(p.name, task, node.name, e, self) from e
        return maps, order

    def node_order_reduce_fn(self, task: TaskInfo, plugin_scores: dict[str, list[list[Any]]]) -> dict[str, float]:
        """Each reduce callback may rewrite its plugin's ``[[node, score], ...]`` list in place."""
        out: dict[str, float] = {}
        for row in self._tiers("node_reduce"):
            for name, fn in row:
                scores = plugin_scores.get(name, [])
                try:
                    fn(task, scores)
                except Exception as e:
                    raise plugin_errors.failed(name, task, "", e, self) from e
                for node, s in scores:
                    out[node] = out.get(node, 0.0) + s
        return out

    def best_node_fn(self, task: TaskInfo, node_scores: dict[float, list[NodeInfo]]) -> NodeInfo | None:
        for row in self._tiers("best_node"):
            for name, fn in row:
                try:
                    r = fn(task, node_scores)
                except Exception as e:
                    raise plugin_errors.failed(name, task, "", e, self) from e
                if r is not None:
                    return r
        return None

    # -- state changes ---------------------------------------------------------------------
    def _on_allocate(self, task: TaskInfo) -> None:
        for eh in self.event_handlers:
            if eh.allocate is not None:
                eh.allocate(task)

    def _on_deallocate(self, task: TaskInfo) -> None:
        for eh in self.event_handlers:
            if eh.deallocate is not None:
                eh.deallocate(task)

    def statement(self) -> Any:
        from busched.framework.statement import Statement

        return Statement(self)

    def pipeline(self, task: TaskInfo, hostname: str) -> None:
        job = self.jobs[task.job]
        job.update_task_status(task, TaskStatus.Pipelined)
        task.node_name = hostname
        self.nodes[hostname].add_task(task)
        self._on_allocate(task)

    def allocate(self, task: TaskInfo, node: NodeInfo) -> None:
        """Allocate outside a statement (backfill); dispatch the job's allocated tasks once it is ready."""
        job = self.jobs[task.job]
        job.update_task_status(task, TaskStatus.Allocated)
        task.node_name = node.name
        node.add_task(task)
        self._on_allocate(task)
        if self.job_ready(job):
            for t in job.tasks_in(TaskStatus.Allocated):
                self.dispatch(t)

    def dispatch(self, task: TaskInfo) -> None:
        """Hand a task to the binder: a bind decision, and the task is Binding."""
        self.decisions.append(Decision("bind", task.key, task.node_name))
        job = self.jobs[task.job]
        job.update_task_status(task, TaskStatus.Binding)
        node = self.nodes.get(task.node_name)
        if node is not None and task.uid in node.tasks:
            node.tasks[task.uid].status = TaskStatus.Binding

    def evict(self, task: TaskInfo, reason: str) -> None:
        """Evict outside a statement: a decision now, the task Releasing."""
        self.decisions.append(Decision("evict", task.key, task.node_name, reason))
        job = self.jobs.get(task.job)
        if job is not None:
            job.update_task_status(task, TaskStatus.Releasing)
        node = self.nodes.get(task.node_name)
        if node is not None:
            node.update_task(task)
        self._on_deallocate(task)

    # -- fit errors --------------------------------------------------------------------------
    def unresolvable_filtered_nodes(self, task: TaskInfo) -> list[NodeInfo]:
        job = self.jobs.get(task.job)
        fe = job.nodes_fit_errors.get(task.uid) if job else None
        if fe is None:
            return self.node_list
        skip = fe.unresolvable_nodes()
        if not skip:
            return self.node_list
        return [n for n in self.node_list if n.name not in skip]

    # -- close ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Recompute every job's podgroup phase (Volcano's jobStatus at closeSession).

        A *steady* job (lent, its phase what its tasks give when it is not unschedulable, kept from
        session to session: busched.framework.reuse) keeps its phase unless this session wrote it
        or marked it unschedulable; only those are looked at again."""
        steady, others = reuse.split(self, "close.steady", list(self.jobs.values()), _is_steady)
        seen: Any = None  # many jobs share one conditions list (gang's): look at each list once
        unschedulable = False
        for job in steady.values():
            conds = job.conditions
            if conds is not seen:
                seen = conds
                unschedulable = self._unschedulable(conds)
            if unschedulable or job.written:
                job.phase = pod_group_phase(job, unschedulable)
        for job in others.values():
            if job.has_podgroup:
                job.phase = pod_group_phase(job, self._unschedulable(job.conditions))
        if self._lease is not None:
            self._lease.closed = True  # the lent jobs and nodes may be lent again
            self._lease.in_session = False

    def abandon(self) -> None:
        """The session failed before closing: its lent objects are not lent again."""
        if self._lease is not None:
            self._lease.in_session = False

    def _unschedulable(self, conds: list[dict[str, Any]]) -> bool:
        return any(c.get("type") == "Unschedulable" and c.get("status") == "True"
                   and c.get("transitionID") == self.uid for c in conds)


def _is_steady(job: JobInfo) -> bool:
    return (job.has_podgroup and not job.written
            and reuse.job_value(job, ("phase", job.phase, False), lambda j: pod_group_phase(j, False)) == job.phase)


def _allocatable(n: NodeInfo) -> Resource:
    return n.allocatable


def pod_group_phase(job: JobInfo, unschedulable: bool) -> str:
    if job.count(TaskStatus.Running) and unschedulable:
        return PodGroupPhase.Unknown
    scheduled = job.scheduled_task_num() + job.releasing_scheduled_task_num()
    if scheduled >= job.min_available:
        if scheduled == job.completed_task_num():
            return PodGroupPhase.Completed
        return PodGroupPhase.Running
    if job.phase != PodGroupPhase.Inqueue:
        return PodGroupPhase.Pending
    return job.phase


def _pod_index(name: str) -> int | None:
    parts = name.split("-")
    if len(parts) >= 3:
        try:
            return int(parts[-1])
        except ValueError:
            return None
    return None


def _compare_task_index(l: TaskInfo, r: TaskInfo) -> bool:
    """Volcano's CompareTask: pod index from the name, then creation order, then uid."""
    li, ri = _pod_index(l.name), _pod_index(r.name)
    if li is None or ri is None or li == ri:
        if l.created != r.created:
            return l.created < r.created
        return l.uid < r.uid
    return li < ri


def fit_error(task: TaskInfo, node: NodeInfo, reason: str, plugin: str = "",
              code: Code = Code.Unschedulable) -> FitError:
    return FitError(task.key, node.name, [Status(code, reason, plugin)])
