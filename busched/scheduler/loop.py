"""`Scheduler` itself: lifecycle and the cycle loop.

`start` subscribes to heartbeats and ``get`` requests, catches up with the state stream, recovers
in-flight binds and from then on follows only what others write on the stream; `run_forever` runs
`run_once` until `stop`: once new work has settled, and otherwise ``period`` seconds after the last
cycle ended (`busched.scheduler.trigger`), collecting garbage between cycles
(`busched.scheduler.memory`).  One cycle reads the wall clock once, at its start (``wall_clock``,
the session's ``now`` and ``CycleReport.now``; nothing inside a session reads a clock), applies what
the monotonic clock changed (`Scheduler._expire`: liveness, then the binding table) and
the changes gathered since the last cycle (`EffectiveObjects.sync_cache_yielding`), takes a snapshot of
the cache, runs the configured actions (`run_actions`, in a worker thread), publishes binds and
evicts, closes the session (`finish_cycle`) and queues podgroup statuses for the jobs whose phase or
conditions changed (written in the background, `busched.scheduler.statuses`).  A cycle that could not
decide anything is skipped (`QuietCycles`).  Records that must reach the state stream wait in an outbox
(subject -> latest record) until published.

A task a node refused recently is kept off that node by the busched-agent-feedback predicate
(`busched.plugins.refused_nodes`), added to the configuration once, at construction; the nodes each
task is kept off are an input of the snapshot (``ClusterSnapshot.refused``), brought up to date at
the start of every cycle (`Scheduler._update_refusals`).

`Scheduler` is the composition root: it builds the owned parts (the state feed, the effective
objects, the binding table, liveness, the podgroup statuses, the trigger, the queries, the
operators' suspends and drains) with their collaborators, wires them, and keeps the lifecycle.  Three
mixins hold the rest, as methods of the same class: one cycle and what only a cycle uses
(`busched.scheduler.cycles`), the election's callbacks (`busched.scheduler.leadership`), and the
entry points and properties the replayer, the CLI and the tests use (``view``, ``task_status``,
``handle_state``, ``boot``, ``backoff_until``..., `busched.scheduler.entry_points`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from busched.builtin import paused_gc, quiet_cycles
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.client import Bus, StateWatch
from busched.cache.cache import Cache
from busched.framework.config import (
    DEFAULT_CONFIG,
    SchedulerConfig,
    load_config,
)
from busched.metrics import SchedulerMetrics
from busched.plugins.refused_nodes import RefusedNodesPlugin
from busched.scheduler import checkpoint, checkpoint_writer, explain, restore_bulk
from busched.scheduler.agents import Liveness
from busched.scheduler.bindings import BindingTable
from busched.scheduler.cycles import Cycles
from busched.scheduler.effective import EffectiveObjects
from busched.scheduler.election import Election
from busched.scheduler.entry_points import EntryPoints
from busched.scheduler.events import StateFeed
from busched.scheduler.leadership import Leadership
from busched.scheduler.ledger import NodeLedgers
from busched.scheduler.lifecycle import Lifecycle
from busched.scheduler.memory import CollectorPolicy
from busched.scheduler.queries import Queries
from busched.scheduler.queue_statuses import QueueStatuses
from busched.scheduler.records import (
    FEEDBACK_PLUGIN,
    FREEZE_AFTER_EVENTS,
    NodeLive,
    SchedulerSettings,
    _version_clock,
    with_refusals,
)
from busched.scheduler.sched_events import EventRecorder
from busched.scheduler.statuses import PodGroupStatuses
from busched.scheduler.trigger import CycleTrigger

log = logging.getLogger("busched.scheduler")


class Scheduler(EntryPoints, Leadership, Cycles):
    """One scheduler instance over a `Bus`.  ``await start()``, then `run_forever` or `run_once`."""

    def __init__(self, bus: Bus, config: SchedulerConfig | str | None = None,
                 settings: SchedulerSettings | None = None, *, metrics: SchedulerMetrics | None = None,
                 plugins: Any = None, actions: Any = None, clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.bus = bus
        if config is None:
            config = DEFAULT_CONFIG
        self.config = load_config(config) if isinstance(config, str) else config
        self.settings = settings or SchedulerSettings()
        self.metrics = metrics or SchedulerMetrics()
        self.plugins = plugins
        self.actions = actions
        self.clock = clock  # monotonic: leases, heartbeats, backoffs, when cycles run
        self.wall_clock = wall_clock  # epoch seconds: a cycle's `now` (sla, tdm, rescheduling), read once per cycle
        boot = uuid.uuid4().hex[:8]
        self.cache = Cache()
        self._next_version = _version_clock()
        # what we know, beside the cache
        self.specs: dict[str, dict[str, Any]] = {k: {} for k in m.UPSERTS}
        self._outbox: dict[str, tuple[m.Msg, str | None]] = {}  # subject -> latest record to (re)publish
        self.watch: StateWatch | None = None
        self.cycle = 0
        self.started_at = 0.0
        self.ready = False
        self.catchup_seconds = 0.0
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._gate = quiet_cycles(self.config, self.plugins)
        self._excluded_key: frozenset[Any] = frozenset()
        self._quiet_excluded: frozenset[Any] | None = None  # the exclusions of the last cycle
        self._refused: dict[str, frozenset[str]] = {}  # task -> nodes it is kept off, for the next snapshot
        # the configuration and registry cycles run with: the configured ones and the refusals predicate
        from busched.plugins import PLUGINS

        base = plugins if plugins is not None else PLUGINS
        self._run_plugins = (base if FEEDBACK_PLUGIN in base
                             else base.with_entries({FEEDBACK_PLUGIN: RefusedNodesPlugin}))
        self._run_config = (self.config, with_refusals(self.config))
        self.collector = CollectorPolicy()
        # the owned parts
        self.trigger = CycleTrigger(self.settings, clock, pending=self._stream_pending)
        self._new_work = self.trigger.new_work
        self.statuses = PodGroupStatuses(self.settings, clock, lambda items: self.bus.publish_all(items),
                                         job_specs=self.specs["job"], next_version=self._next_version,
                                         refresh_job=lambda key: self.effective.refresh_job(key),
                                         on_error=self._record_not_written,
                                         on_dropped=self.metrics.writes_cut.labels("podgroup.status", "conditions").inc)
        self.pg_status = self.statuses.recorded  # job -> its last podgroup status
        self.queue_statuses = QueueStatuses(self.settings, clock, lambda items: self.bus.publish_all(items),
                                            next_version=self._next_version, on_error=self._record_not_written)
        self.sched_events = EventRecorder(self.settings.events, lambda items: self.bus.publish_all(
                                              items, timeout=self.settings.events.publish_timeout),
                                          boot=lambda: self.boot, stream=self.settings.streams.events_max_age > 0,
                                          last=lambda subject: self.bus.last_event(subject),
                                          on_error=self.metrics.publish_errors.labels("events").inc,
                                          on_event=lambda reason: self.metrics.sched_events.labels(reason).inc())
        live: dict[str, NodeLive] = {}  # node -> its agent's liveness: kept by liveness, read by the table
        self.table = BindingTable(self.settings, clock, bus, boot=boot, metrics=self.metrics,
                                  next_version=self._next_version, task_specs=self.specs["task"],
                                  node_specs=self.specs["node"], live=live, outbox=self._outbox,
                                  refresh_task=lambda key: self.effective.refresh_task(key),
                                  new_work=self._new_work, finish_delete=lambda key: self.feed.finish_delete(key),
                                  purge_object=lambda kind, key: self.feed.purge_object(kind, key),
                                  reject=lambda reason, kind, text: self.feed.reject(reason, kind, text),
                                  count=lambda kind, what: self.feed.count(kind, what), ready=lambda: self.ready,
                                  journal=self)
        self.bindings = self.table.bindings  # task -> its latest bind attempt
        self.results = self.table.results  # task -> what its agent last said
        self.failures = self.table.failures
        self.reasons = self.table.reasons
        self.effective = EffectiveObjects(self.settings, self.cache, self.specs, table=self.table, live=live,
                                          pg_status=self.pg_status)
        self.feed = StateFeed(self.settings, clock, bus, cache=self.cache, specs=self.specs, table=self.table,
                              effective=self.effective, live=live, pg_status=self.pg_status, outbox=self._outbox,
                              new_work=self._new_work, metrics=self.metrics)
        self.seqs = self.feed.seqs
        if self.settings.shard:  # Volcano's node sharding: the snapshot's shard, binds written with node ledgers
            self.cache.own_shard = (self.settings.shard, self.settings.shard_mode)
            self.table.ledgers = NodeLedgers(self.settings.shard, boot,
                                             on_dropped=self.metrics.writes_cut.labels("ledger", "tasks").inc,
                                             max_bytes=self.settings.max_event_bytes)
            self.feed.on_ledger = self.table.ledgers.heard
        self.feed.on_queue_status = self.queue_statuses.record
        self.refused = self.feed.refused  # (kind, key) -> why the object's last change was refused
        self.liveness = Liveness(self.settings, clock, live=live, bindings=self.bindings, results=self.results,
                                 stop_attempt=self.table.stop_attempt, release=self.table.release,
                                 connected=lambda: self.bus.connected, ready=lambda: self.ready,
                                 refresh_node=self.effective.refresh_node, new_work=self._new_work,
                                 send_evict=self._queue_record, next_version=self._next_version,
                                 reject=self.feed.reject, on_heartbeat=self.metrics.heartbeats.inc)
        self.live = live
        self.lifecycle = Lifecycle(specs=self.specs, seqs=self.seqs, table=self.table, effective=self.effective,
                                   lock=self._lock, new_work=self._new_work)
        self.queries = Queries(specs=self.specs, table=self.table, live=live, pg_status=self.pg_status,
                               refused=self.refused, effective_task=self.effective.effective_task,
                               task_status=self.effective.task_status,
                               snapshot=lambda: self.snapshot(memo=False),
                               gather=lambda name: explain.gather(self, name), metrics=self.metrics,
                               max_payload=lambda: self.bus.max_payload, lock=self._lock,
                               in_thread=self.settings.cycle_in_thread, journal=self,
                               queue_status=self.queue_statuses.recorded)
        st = self.settings
        lease = (bus.lease(shard=st.lease_key, holder=boot, duration=st.lease, clock=clock, storage=st.streams.storage,
                           replicas=st.streams.replicas) if st.lease > 0 else None)
        keeper = (lambda: bus.lease_keeper(lease)) if lease is not None and st.lease_keeper else None
        self.election = Election(lease, shard=st.lease_key, on_elected=self._elected, on_role=self._role_changed,
                                 keeper=keeper)
        self._election_task: asyncio.Task[None] | None = None
        # (the checkpoint's templates bounded by the state messages' own size limit: checkpoint_shared)
        self.checkpoint_settings = dataclasses.replace(st.checkpoint, max_event_bytes=st.max_event_bytes)
        self.checkpoints = checkpoint_writer.CheckpointWriter(bus, self.checkpoint_settings,
                                                              lambda: bus.may_write(), storage=st.streams.storage,
                                                              replicas=st.streams.replicas)
        self._checkpoint_task: asyncio.Task[None] | None = None
        self.restored: checkpoint.Restored | None = None  # what the start took from a checkpoint, if it did

    # == lifecycle ====================================================================================================
    async def start(self, *, timeout: float = 60.0) -> None:
        """Subscribe, catch up with the state stream, recover in-flight binds; `ready` is True after this."""
        t0 = time.perf_counter()
        self.started_at = self.clock()
        if self.election.enabled:
            self.bus.fence = self.election.may_write  # a standby writes nothing, nor a leader once deposed
        await self.bus.ensure_streams(self.settings.streams)
        if self.table.ledgers is not None:
            await self.bus.allow_atomic()
        self.bus.connection_listeners.append(self.liveness.on_connection)
        await self.bus.subscribe(f"{S.HEARTBEAT_PREFIX}.*", self.handle_heartbeat)
        await self.bus.serve(S.API_GET, self.queries.serve_get)
        await self.bus.serve(S.API_DRAIN, self.lifecycle.serve_drain)
        with paused_gc():  # the whole catch-up, between batches too
            # from the checkpoint and the messages after it when there is a usable one (the same input as a
            # full read: busched.scheduler.checkpoint), then every message after what it covered
            restored = None
            if self.settings.checkpoint.read:
                # its messages in bulk (busched.scheduler.restore_bulk): the same checks, without the live
                # path's per-event bookkeeping
                restored = await checkpoint.restore(self.bus, restore_bulk.restored_handler(self.feed),
                                                    self.checkpoint_settings, entries=True)
            self.restored = restored
            if restored is not None:
                self.checkpoints.written_seq = restored.seq  # the next is due once the stream has grown past it
            self.watch = await self.bus.watch_state(batch_handler=self.handle_state_batch,
                                                    start=restored.seq + 1 if restored is not None else 0)
            try:
                await asyncio.wait_for(self.watch.caught_up.wait(), timeout)
            except asyncio.TimeoutError:
                raise RuntimeError(f"state stream not caught up within {timeout}s "
                                   f"(at {self.watch.last_seq} of {self.watch.target})") from None
            await self.feed.replay_rejected()  # the objects whose last message was refused, first
            if self.election.enabled:
                self.table.settle_orphans()  # in-flight binds are recovered once elected (`_elected`)
            else:
                # no election: write with the newest epoch on the stream (an elected leader's, if one ever ran),
                # so the records and decisions are not taken for a deposed leader's
                self.table.epoch = self.table.fence_epoch
                await self.table.recover()
            # from here the podgroup records on the stream are our own echoes: leave them out (binding records
            # are followed: another scheduler's must not be missed; ours are skipped by sequence)
            await self.watch.narrow(S.followed_subjects())
            if self.watch.count + (restored.messages if restored is not None else 0) >= FREEZE_AFTER_EVENTS:
                # What a big catch-up built (specs, cache, conversion memo) lives as long as the scheduler:
                # keep it out of every later collection, instead of re-enabling the collector on millions of
                # young objects and paying for several full passes over them during the first cycles.
                gc.freeze()
        self.catchup_seconds = time.perf_counter() - t0
        self.metrics.catchup_seconds.set(self.catchup_seconds)
        self.ready = True
        self.metrics.ready.set(1)
        self._role_changed(self.election.role, self.election.epoch)
        if self.election.enabled:
            self._election_task = asyncio.create_task(self.election.run(self._stop))
        if self.settings.checkpoint.interval > 0:
            self._checkpoint_task = asyncio.create_task(self.checkpoints.run(self._stop))
        log.info("caught up with the state stream in %.3fs: %d nodes, %d jobs, %d tasks, %d live binds",
                 self.catchup_seconds, len(self.specs["node"]), len(self.specs["job"]), len(self.specs["task"]),
                 sum(1 for b in self.bindings.values() if b.live))

    async def stop(self) -> None:
        self._stop.set()
        self.trigger.stop()
        if self._election_task is not None:
            await asyncio.gather(self._election_task, return_exceptions=True)
        if self._checkpoint_task is not None:
            self._checkpoint_task.cancel()  # a checkpoint half made is not written; the last one stands
            await asyncio.gather(self._checkpoint_task, return_exceptions=True)
        self.ready = False
        self.metrics.ready.set(0)
        if self.watch is not None:
            await self.watch.stop()
        try:
            await self._flush_outbox()
            await self.statuses.flush()
            await self.queue_statuses.flush()
            await self.sched_events.flush()
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass
        await self.election.release()  # (after the last writes: a standby takes over at once)
        if self.liveness.on_connection in self.bus.connection_listeners:
            self.bus.connection_listeners.remove(self.liveness.on_connection)

    async def run_forever(self) -> None:
        if not self.ready:
            await self.start()
        if self.settings.manage_gc:
            self.collector.enter()
        try:
            while not self._stop.is_set():
                if not self.election.check():
                    if self.election.deposed:
                        return  # `busched run` joins again as a fresh standby
                    await self._wait_role()
                    continue
                binds = False
                try:
                    binds = bool((await self.run_once()).binds)
                except Exception:  # noqa: BLE001 - one bad cycle must not stop the scheduler
                    log.exception("cycle %d failed", self.cycle)
                    self.metrics.cycle_errors.inc()
                # the agents are about to answer a cycle's binds: its garbage waits for the next cycle
                self.collector.after_cycle(defer=binds)
                await self.trigger.wait(self.clock(), time.monotonic())
        finally:
            self.collector.exit()

    def handle_heartbeat(self, subject: str, data: bytes) -> None:
        """A heartbeat message (busched.scheduler.agents)."""
        self.liveness.handle_heartbeat(subject, data)

    def _queue_record(self, subject: str, msg: m.Msg, mid: str | None) -> None:
        """Queue a message for the stream (the latest per subject is written at the next flush)."""
        self._outbox[subject] = (msg, mid)

    def _stream_pending(self) -> int:
        """Messages waiting on the state stream, not yet handled."""
        return self.watch.pending if self.watch is not None else 0

    def _record_not_written(self) -> None:
        self.metrics.publish_errors.labels("record").inc()
