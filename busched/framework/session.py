"""One scheduling cycle's world: the snapshot, the plugins' callbacks, and the decisions made.

A session opens over a `ClusterSnapshot`, lets each configured plugin register
callbacks on the typed extension points of `busched.framework.points`, freezes
them into per-point tier lists once every plugin is open (`Session.freeze`),
and offers actions one method per point (``job_order_fn``, ``predicate_fn``,
``job_ready`` ...), each the point's combine policy from
`busched.framework.tiers` over those lists (the orders here, the rest in
`busched.framework.dispatchers`).  Actions never see plugins; the
fast paths (busched.fastpath) and explain read the lists and the plugins'
vectorised twins through ``ssn.hooks`` (`busched.framework.hooks`).  Decisions (binds,
evictions) are recorded on the session; closing it recomputes podgroup status
(`busched.framework.phase`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from busched import fastpath
from busched.api.job import JobInfo, unsettled
from busched.api.node import NodeInfo
from busched.api.queue import QueueInfo
from busched.api.resource import Resource
from busched.api.snapshot import ClusterSnapshot
from busched.api.task import TaskInfo, TaskStatus
from busched.fastpath import memo as reuse
from busched.fastpath import order as fastpath_order
from busched.fastpath import sums
from busched.fastpath.fit import NodeArrays
from busched.framework import hypernodes as topology
from busched.framework import orders, phase, plugin_errors, points
from busched.framework import tiers as tw
from busched.framework.config import SchedulerConfig
from busched.framework.decision import Decision, fit_error
from busched.framework.dispatchers import Dispatchers
from busched.framework.hooks import EventHandler, Hooks
from busched.framework.phase import pod_group_phase
from busched.framework.points import Point, PredicateTwin, ValidateResult
from busched.framework.pqueue import PriorityQueue

__all__ = ["Decision", "EventHandler", "Session", "SessionError", "ValidateResult", "fit_error", "pod_group_phase"]

F = TypeVar("F")
W = TypeVar("W")


class SessionError(RuntimeError):
    pass


class Session(Dispatchers):
    """One cycle's session; the points' dispatchers asked of jobs, queues, tasks and nodes (``job_ready``,
    ``predicate_fn`` ...) are `Dispatchers` (busched.framework.dispatchers)."""

    def __init__(self, snapshot: ClusterSnapshot, config: SchedulerConfig, *, seed: int = 0,
                 uid: str = "session", now: float = 0.0) -> None:
        self.uid = uid
        self.now = now  # the cycle's clock (seconds); plugins read time only from here
        self.config = config
        self.tiers = config.tiers
        self.jobs: dict[str, JobInfo] = snapshot.jobs
        self.node_list: list[NodeInfo] = snapshot.nodes
        self.others = snapshot.others
        # state several plugins share for this session only (the predicates' pod view); it lives and
        # dies with the session (a global map keyed by session would keep every session alive)
        self.shared: dict[str, Any] = {}
        # name -> node, kept from the last session's with the replaced nodes put in (read only)
        self.nodes: dict[str, NodeInfo] = reuse.by_name(self, "session.nodes", snapshot.nodes)
        self.queues: dict[str, QueueInfo] = snapshot.queues
        self.priority_classes = snapshot.priority_classes
        self.hypernodes = snapshot.hypernodes
        self.resource_quotas = snapshot.resource_quotas
        self.refused: dict[str, frozenset[str]] = snapshot.refused  # task -> nodes that refused it recently
        self.shard = snapshot.shard
        self.nodes_in_shard: frozenset[str] = (snapshot.shard.nodes if snapshot.shard.mode
                                               else reuse.names_of(self, "session.nodes", self.nodes))
        # the nodes' allocatable summed (again only when one changed: busched.fastpath.sums)
        self.total_resource = sums.summed(self, "total_resource", list(self.node_list), _allocatable).clone()
        self.rng = random.Random(seed)
        # the jobs enqueue, allocate and backfill may have work in (the rest they would skip)
        self.unsettled_jobs: list[JobInfo] = (snapshot.unsettled if snapshot.unsettled is not None
                                              else [j for j in self.jobs.values() if unsettled(j)])
        self.decisions: list[Decision] = []
        self.event_handlers: list[EventHandler] = []
        self.plugins: dict[str, Any] = {}
        self.enqueue_enabled = config.has_action("enqueue")
        self.hooks = Hooks(self.tiers)  # the plugins' callbacks (busched.framework.hooks)
        self._lists = self.hooks.lists  # point -> its callbacks by tier, for the dispatchers
        self.cycle_state: dict[str, dict[str, Any]] = {}  # per-task scratch, keyed by task uid
        self.dirty_jobs: set[str] = set()
        # what queue-sharing plugins computed of each queue (Volcano's proportion and capacity hand these to
        # its metrics): queue name -> {"deserved": Resource, "share": float, "real_capability": Resource};
        # filled at close, read by the scheduler's metrics and status page
        self.queue_figures: dict[str, dict[str, Any]] = {}
        self._arrays: NodeArrays | None = None
        # the fast path, chosen once (None: the kernels are off, every caller takes its plain path)
        self.fast: fastpath.FastPath | None = fastpath.open_for(snapshot.others)
        self.last_node_index = 0  # where the next sampled node search starts
        # the hypernode tree (busched.framework.hypernodes); jobs' network topology adjusted to it
        self.topology: topology.Topology = topology.open_topology(self)
        self.released = False  # release() called: its plugins and callbacks dropped
        self._lease = snapshot.lease
        if self._lease is not None:
            if self._lease.superseded:
                raise SessionError("snapshot superseded: a later snapshot lent its objects again; "
                                   "take a new one (busched.fastpath.lending)")
            self._lease.in_session = self._lease.opened = True

    @property
    def arrays(self) -> NodeArrays:
        """The node x resource matrices, built on first use and kept current by node listeners."""
        if self._arrays is None:  # seeded from the last session's where the nodes are the same lent objects
            if self.released:
                raise SessionError("session released: its node arrays are the next session's to build")
            self._arrays = NodeArrays.kept(self.node_list, self.others.get("plugin_state"))
        return self._arrays

    # -- work kept from session to session, done again only for what changed (busched.fastpath.memo)
    # ``ssn.memo(job_or_node, key, fn)``: fn(obj), kept while the object's tasks and spec do not change
    memo = staticmethod(reuse.job_value)
    # ``ssn.incremental(key, objects, full, update)`` / ``ssn.split(key, objects, test)`` /
    # ``ssn.summed(key, objects, part)``: a result over all the session's jobs (nodes), updated
    # for those that changed
    incremental = reuse.incremental
    split = reuse.split
    summed = sums.summed

    # -- registration (plugins) and the resolved lists (actions, fast paths) -----------
    def add_fn(self, point: Point[F, W], plugin: str, fn: F, twin: W | None = None) -> None:
        """Register ``plugin``'s callback on ``point``, with its vectorised twin or sort key if it has one."""
        self.hooks.add(point, plugin, fn, twin)

    def add_event_handler(self, handler: EventHandler) -> None:
        self.event_handlers.append(handler)

    def freeze(self) -> None:
        """Resolve every point's lists once every plugin has registered (`open_session` calls it)."""
        self.hooks.freeze()

    def has(self, point: Point[Any, Any]) -> bool:
        return any(self._lists[point])

    def predicate_twins(self, fn: Callable[[TaskInfo, NodeInfo], None]) -> list[PredicateTwin] | None:
        """The twins answering for ``fn`` when ``fn`` is this session's allocate predicate (it raises
        exactly where a predicate plugin does) and every predicate plugin has one; else None."""
        if fn != self.predicate_for_allocate:
            return None
        out: list[PredicateTwin] = []
        for _, _, twin in self.hooks.with_twins(points.PREDICATE):
            if twin is None:
                return None
            out.append(twin)
        return out

    # what the fast path reads (it never names a point): each callback of a point it vectorises, in
    # tier order, with its twin (None: the callback has none)
    def job_order_twins(self) -> list[tuple[str, points.JobOrderFn, points.JobKey | None]]:
        return self.hooks.with_twins(points.JOB_ORDER)

    def task_order_twins(self) -> list[tuple[str, points.TaskOrderFn, points.TaskKey | None]]:
        return self.hooks.with_twins(points.TASK_ORDER)

    def node_order_twins(self) -> list[tuple[str, points.NodeOrderFn, points.NodeOrderTwin | None]]:
        return self.hooks.with_twins(points.NODE_ORDER)

    def batch_node_order_twins(self) -> list[tuple[str, points.BatchNodeOrderFn, points.BatchNodeOrderTwin | None]]:
        return self.hooks.with_twins(points.BATCH_NODE_ORDER)

    def switch_on(self, plugin: str, switch: str) -> bool:
        """Whether ``plugin`` is configured with ``switch`` (an attribute name of SWITCHES) on."""
        return self.hooks.switch_on(plugin, switch)


    def _failed(self, plugin: str, args: tuple[Any, ...], error: Exception) -> Exception:
        """A callback raised something not a FitError: the task fails, naming the plugin."""
        node = args[1] if len(args) > 1 else None
        return plugin_errors.failed(plugin, args[0], node.name if isinstance(node, NodeInfo) else "", error, self)

    # -- orders (fallbacks and the victims queue: busched.framework.orders) -------------
    def job_order_compare(self, l: JobInfo, r: JobInfo) -> int:
        return tw.first_decision(self._lists[points.JOB_ORDER], l, r)

    def job_order_key(self) -> Callable[[JobInfo], tuple[Any, ...]] | None:
        """A sort key equal to `job_order_fn` when every job-order plugin offers one, else None.
        Only for a queue whose jobs do not change while they wait (busched.fastpath.order)."""
        return fastpath_order.job_order_key(self)

    def task_order_key(self, tasks: list[TaskInfo]) -> Callable[[TaskInfo], tuple[Any, ...]] | None:
        """A sort key equal to `task_order_fn` over ``tasks``, or None (busched.fastpath.order)."""
        return fastpath_order.task_order_key(self, tasks)

    def job_order_fn(self, l: JobInfo, r: JobInfo) -> bool:
        c = self.job_order_compare(l, r)
        if c:
            return c < 0
        if l.created != r.created:
            return l.created < r.created
        return l.uid < r.uid

    def queue_order_fn(self, l: QueueInfo, r: QueueInfo) -> bool:
        c = tw.first_decision(self._lists[points.QUEUE_ORDER], l, r)
        if c:
            return c < 0
        if l.created != r.created:
            return l.created < r.created
        return l.uid < r.uid

    def victim_queue_order_fn(self, l: QueueInfo, r: QueueInfo, preemptor: QueueInfo) -> bool:
        c = tw.first_decision(self._lists[points.VICTIM_QUEUE_ORDER], l, r, preemptor)
        if c:
            return c < 0
        return not self.queue_order_fn(l, r)

    def task_order_compare(self, l: TaskInfo, r: TaskInfo) -> int:
        return tw.first_decision(self._lists[points.TASK_ORDER], l, r)

    def task_order_fn(self, l: TaskInfo, r: TaskInfo) -> bool:
        c = self.task_order_compare(l, r)
        if c:
            return c < 0
        return orders.compare_task_index(l, r)

    def sort_tasks(self, tasks: Iterable[TaskInfo]) -> list[TaskInfo]:
        return orders.sort_tasks(self, tasks)

    def build_victims_queue(self, victims: list[TaskInfo], preemptor: TaskInfo) -> PriorityQueue[TaskInfo]:
        return orders.victims_queue(self, victims, preemptor)

    # -- state changes ---------------------------------------------------------------------
    def _on_allocate(self, task: TaskInfo) -> None:
        for eh in self.event_handlers:
            if eh.allocate is not None:
                eh.allocate(task)

    def _on_deallocate(self, task: TaskInfo) -> None:
        for eh in self.event_handlers:
            if eh.deallocate is not None:
                eh.deallocate(task)

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
        self.decisions.append(Decision("bind", task.key, task.node_name, annotations=task.bind_annotations))
        job = self.jobs[task.job]
        job.update_task_status(task, TaskStatus.Binding)
        node = self.nodes.get(task.node_name)
        if node is not None:
            held = node.tasks.get(task.uid)
            if held is not None:
                held.status = TaskStatus.Binding

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

    # -- close ----------------------------------------------------------------------------------
    def jobs_logged(self) -> list[JobInfo] | None:
        """The lent jobs this session wrote or whose outputs it changed so far, in order, a job maybe more
        than once (busched.api.outputs); None when the snapshot keeps no such log (not lent, or the
        reference): then every job is to be looked at.  With it, a job neither named here nor tested
        anew by a kept split (``split``) is as the last session left it."""
        lease = self._lease
        return lease.log if lease is not None else None

    def close(self) -> None:
        """Recompute every job's podgroup phase (phase.close_phases); then lend its objects again."""
        phase.close_phases(self)
        if self._lease is not None:
            self._lease.closed = True
            self._lease.in_session = False

    def release(self) -> None:
        """The session is done with (its decisions applied, its statuses and figures read): drop what
        ties it in reference cycles, so that it and its big structures (the job map's views, the pod
        view's per-node maps, the plugins' state) are freed by reference counting when its last holder
        lets go, rather than left for a collection the scheduler makes rarely (busched.scheduler.memory).
        The plugins' callbacks close over the session and the session holds them; the pod view holds
        it too.  What it read and decided (jobs, nodes, queues, decisions, queue_figures) stays
        readable; its plugins and callbacks are gone, so nothing may run through it afterwards."""
        self.released = True
        self.plugins = {}
        self.event_handlers = []
        for value in self.shared.values():  # shared state that holds what holds it lets go (the pod view)
            release = getattr(value, "release", None)
            if release is not None:
                release()
        self.shared = {}
        self.cycle_state = {}
        # its node arrays stay in the cache's plugin state, to seed the next session's (NodeArrays.kept,
        # which reads their rows and carried values); their per-session kernel state (the score plan, the
        # pod view's arrays) leads back here and is the next session's to build
        if self._arrays is not None:
            self._arrays.cache.clear()
            self._arrays = None
        self.hooks = Hooks(())  # no callbacks: every dispatcher answers as with no plugin
        self._lists = self.hooks.lists

    def abandon(self) -> None:
        """The session failed before closing: its lent objects are not lent again."""
        if self._lease is not None:
            self._lease.in_session = False


def _allocatable(n: NodeInfo) -> Resource:
    return n.allocatable
