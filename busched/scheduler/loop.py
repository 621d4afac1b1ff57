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
operators' suspends and drains) with their collaborators, wires them, and keeps the lifecycle and
the cycle.  A little over 400 lines: the wiring and the entry points and properties the replayer,
the CLI and the tests use (``view``, ``task_status``, ``handle_state``, ``bindings``,
``backoff_until``...) are kept with the lifecycle they serve.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import msgspec

from busched.builtin import finish_cycle, paused_gc, quiet_cycles, run_actions
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
from busched.scheduler import checkpoint, explain, history, overview, restore_bulk, volcano_metrics
from busched.scheduler.agents import Liveness
from busched.scheduler.bindings import BindingTable
from busched.scheduler.effective import EffectiveObjects
from busched.scheduler.election import Election
from busched.scheduler.events import StateFeed
from busched.scheduler.ledger import NodeLedgers
from busched.scheduler.lifecycle import Lifecycle
from busched.scheduler.memory import CollectorPolicy
from busched.scheduler.queries import Queries
from busched.scheduler.queue_statuses import QueueStatuses
from busched.scheduler.records import (
    FEEDBACK_PLUGIN,
    FREEZE_AFTER_EVENTS,
    CycleReport,
    NodeLive,
    SchedulerSettings,
    _version_clock,
    with_refusals,
)
from busched.scheduler.sched_events import EventRecorder
from busched.scheduler.statuses import PodGroupStatuses
from busched.scheduler.trigger import CycleTrigger

log = logging.getLogger("busched.scheduler")


class Scheduler:
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
                                         on_error=self._record_not_written)
        self.pg_status = self.statuses.recorded  # job -> its last podgroup status
        self.queue_statuses = QueueStatuses(self.settings, clock, lambda items: self.bus.publish_all(items),
                                            next_version=self._next_version, on_error=self._record_not_written)
        self.sched_events = EventRecorder(self.settings.events, lambda items: self.bus.publish_all(items),
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
            self.table.ledgers = NodeLedgers(self.settings.shard, boot)
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
        self.checkpoints = checkpoint.CheckpointWriter(bus, st.checkpoint, lambda: bus.may_write(),
                                                       storage=st.streams.storage, replicas=st.streams.replicas)
        self._checkpoint_task: asyncio.Task[None] | None = None
        self.restored: checkpoint.Restored | None = None  # what the start took from a checkpoint, if it did

    # the state feed's and the effective objects' entry points, as the scheduler always had them
    def handle_state(self, subject: str, data: bytes, seq: int = 0) -> str:
        """Apply one state-stream message (`busched.scheduler.events`)."""
        return self.feed.handle_state(subject, data, seq)

    def handle_state_batch(self, items: list[tuple[str, bytes, int]]) -> None:
        self.feed.handle_state_batch(items)

    def sync_cache(self) -> None:
        self.effective.sync_cache()

    def snapshot(self, memo: bool | None = None) -> Any:
        """The cache's snapshot, with the nodes each task is kept off (as of the last `_update_refusals`).
        A query's snapshot is a private copy (``memo=False``): lending the objects again between the cycle's
        snapshot and its session (which runs in a thread) superseded the cycle's, and that cycle failed."""
        self.effective.sync_cache()
        snap = self.cache.snapshot(memo=memo)
        snap.refused = self._refused
        return snap

    def effective_task(self, key: str, spec: Any) -> Any:
        return self.effective.effective_task(key, spec)

    def task_status(self, key: str) -> str:
        """Volcano's task status name as `busched get tasks` shows it."""
        return self.effective.task_status(key)

    def view(self, kind: str) -> list[dict[str, Any]]:
        """What `busched get` shows (`busched.scheduler.queries`)."""
        return self.queries.view(kind)

    def lookup(self, kind: str, name: str, *, describe: bool = False) -> dict[str, Any]:
        """One object's `view` row; with ``describe`` also its spec and its recent events."""
        return self.queries.lookup(kind, name, describe=describe)

    # the binding table's, as the scheduler always showed them (the replayer sets some)
    @property
    def boot(self) -> str:
        """This scheduler's incarnation: the writer of its binding records."""
        return self.table.boot

    @boot.setter
    def boot(self, value: str) -> None:
        self.table.boot = value

    @property
    def backoff_until(self) -> dict[str, float]:
        return self.table.backoff_until

    @backoff_until.setter
    def backoff_until(self, value: dict[str, float]) -> None:
        self.table.backoff_until = value

    @property
    def excluded(self) -> dict[str, dict[str, float]]:
        return self.table.excluded

    @excluded.setter
    def excluded(self, value: dict[str, dict[str, float]]) -> None:
        self.table.excluded = value

    @property
    def _caught_up(self) -> bool:
        return self.table.caught_up

    @_caught_up.setter
    def _caught_up(self, value: bool) -> None:
        self.table.caught_up = value

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
                                                    self.settings.checkpoint)
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

    # == one cycle ====================================================================================================
    async def run_once(self, *, force: bool = False) -> CycleReport:
        """One cycle.  It is skipped (``report.skipped``) when it could not decide anything: the last
        cycle decided nothing and neither the cache nor the nodes a task is kept off have changed
        since (`QuietCycles`).  Whatever the clock changes (heartbeats lapsing, leases, backoffs
        ending) is applied to the cache before that check, so it makes the cycle due.  ``force``
        runs it anyway."""
        async with self._lock:
            if not self.election.check():  # a standby, or deposed: no cycle, no write
                report = CycleReport(self.cycle, skipped=True)
                return report
            self.cycle += 1
            # the session's clock, read once here and never inside it: what sla, tdm and rescheduling see
            report = CycleReport(self.cycle, now=self.wall_clock())
            t0, c0 = time.perf_counter(), time.process_time()
            await self._flush_outbox()
            self.statuses.write_soon()
            self.queue_statuses.write_soon()
            await self._expire(report)
            await self._flush_outbox()  # records of what the clock stopped, before their decisions
            await self.table.republish()
            await self.feed.flush_purges()
            self.lifecycle.enforce()  # suspended jobs' live attempts stopped, before the snapshot
            with paused_gc():
                await self.effective.sync_cache_yielding()
            self.trigger.taken()  # from here to the snapshot nothing else is handled
            config, plugins = self._cycle_config()
            excluded_key = self._excluded_key
            if not force and excluded_key == self._quiet_excluded and not self._gate.due(self.cache.generation):
                report.skipped = True
                await self._flush_outbox()
                overview.note(self, report)
                return report
            kw = dict(plugins=plugins, actions=self.actions, seed=self.settings.seed,
                      uid=f"{self.boot}-{self.cycle}", now=report.now)
            inputs = history.inputs(self)  # where the snapshot stands on the stream, what it reads beside it
            # as run_cycle: no collector passes over the whole cluster mid-build, nor between the
            # snapshot and the session over it (after a restart such a pass took half a second)
            with paused_gc():
                before = self.cache.generation
                stages = report.stages
                stages["prepare"] = time.perf_counter() - t0
                snap = self.snapshot()
                stages["snapshot"] = time.perf_counter() - t0
                if self.table.ledgers is not None:
                    self.table.ledgers.snapshot_taken()  # the view the binds are decided on (nothing handled since)
                try:
                    ssn = await self._in_cycle(run_actions, snap, config, **kw)
                except Exception as e:  # noqa: BLE001
                    return self._failed(report, e)
                # the decisions are final once the actions have run: they go out before the session
                # closes (recomputing every job's status), and before the collector may pass over
                # what the cycle left
                stages["actions"] = time.perf_counter() - t0
                binds = [d for d in ssn.decisions if d.kind == "bind"]
                evicts = [d for d in ssn.decisions if d.kind == "evict"]
                await self.table.publish_binds(binds, report)
                await self.table.publish_evicts(evicts, report)
                stages["publish"] = time.perf_counter() - t0
                stages["cpu"] = time.process_time() - c0  # this process's CPU seconds to here
                self.sched_events.before_close(ssn)
                try:
                    await self._in_cycle(finish_cycle, ssn)
                except Exception as e:  # noqa: BLE001
                    return self._failed(report, e)
            # the jobs' new statuses reach the cache with the next sync (which makes the next cycle due)
            # and the stream in the background (busched.scheduler.statuses)
            changed = await self.statuses.collect(ssn)
            if not self.settings.shard:  # each shard sees its own nodes' part of a queue: no one total to write
                self.queue_statuses.collect(ssn)
            await history.record(self, inputs, ssn, report.now)  # after the decisions went out
            self.sched_events.record(ssn, report, changed)  # published in the background, after the record
            self._gate.done(ssn, before, self.cache.generation)
            self._quiet_excluded = excluded_key
            await self._flush_outbox()
            await self.table.republish()
            self.statuses.write_soon()
            self.queue_statuses.write_soon()
            report.seconds = time.perf_counter() - t0
            self.metrics.cycles.inc()
            self.metrics.cycle_seconds.observe(report.seconds)
            self.queries.update_gauges()
            volcano_metrics.observe(self, ssn, report)
            overview.note(self, report, ssn)
            ssn.release()  # read for the last time: freed by reference counting as `ssn` goes, not by the collector
            if report.binds or report.evicts or report.released:
                log.info("cycle %d: %d binds, %d evicts, %d released in %.3fs", self.cycle, len(report.binds),
                         len(report.evicts), len(report.released), report.seconds)
            return report

    # == leader election (busched.scheduler.election) ==================================================================
    async def _elected(self, epoch: int) -> None:
        """We won the lease: write our epoch on the stream, wait until our own feed has applied it (every
        record of the previous leader before it is then in our tables, and any after it is void), then
        recover the binds in flight (republish what never reached the decision stream) as after a restart."""
        self.table.epoch = epoch
        ack = await self.bus.publish(S.leader_subject(self.settings.lease_key),
                                     m.LeaderEpoch(version=self._next_version(), shard=self.settings.lease_key,
                                                   epoch=epoch, holder=self.boot))
        if not ack.ok:
            raise RuntimeError(f"epoch {epoch} not written: {ack.error}")
        # from here the server itself refuses our unconditioned state writes (statuses) once a newer epoch is written
        self.bus.write_condition = (S.leader_subject(self.settings.lease_key), ack.seq)
        deadline = self.clock() + self.settings.lease
        while self.table.fence_epoch < epoch:
            left = deadline - self.clock()
            if left <= 0:
                raise RuntimeError(f"epoch {epoch} written at sequence {ack.seq} but not read back in time")
            seen = self.table.epochs
            try:
                await asyncio.wait_for(seen.wait(), left)
            except asyncio.TimeoutError:
                pass
        async with self._lock:
            await self.table.recover()
        self.trigger.new_work()

    def _role_changed(self, role: str, epoch: int) -> None:
        self.metrics.leader.labels(self.settings.lease_key).set(1 if role == "leader" else 0)
        self.metrics.leader_epoch.labels(self.settings.lease_key).set(epoch)
        if role == "leader":
            self.trigger.new_work()

    async def _wait_role(self) -> None:
        """A standby waits for its role to change (or the scheduler to stop), bringing its cache up to date
        with what the feed gathered every ``period`` meanwhile: its first cycle as leader starts warm."""
        changed = asyncio.ensure_future(self.election.changed.wait())
        stopping = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({changed, stopping}, timeout=self.settings.period,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()
            stopping.cancel()
        if self.election.role == "standby" and not self._stop.is_set():
            async with self._lock:
                with paused_gc():
                    await self.effective.sync_cache_yielding()

    async def _expire(self, report: CycleReport) -> None:
        """Apply what the clock changed: agents silent too long (only while silence means something), binds
        not taken within their lease, backoffs that ended."""
        now = self.clock()
        calm = self.liveness.calm(now)
        if calm:
            self.liveness.check(now, report)
        await self.table.expire(report, now, calm)

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

    async def _in_cycle(self, fn: Any, *args: Any, **kw: Any) -> Any:
        """A part of the session's work: in a worker thread (the event loop goes on meanwhile) or here."""
        if self.settings.cycle_in_thread:
            return await asyncio.to_thread(fn, *args, **kw)
        return fn(*args, **kw)

    def _failed(self, report: CycleReport, e: Exception) -> CycleReport:
        self.metrics.cycle_errors.inc()
        log.exception("cycle %d: session failed", self.cycle)
        report.error = f"{type(e).__name__}: {e}"
        overview.note(self, report)
        self._gate.done(_NO_SESSION, 0, 1)  # due again
        return report

    def use_config(self, config: SchedulerConfig) -> None:
        """Run the next cycles with ``config`` (a reload: `busched.cli.reload`).  A cycle already
        running keeps the configuration it started with; the quiet-cycle gate is rebuilt (the plugins
        may differ in reading the clock) and the next cycle is due, so the new configuration decides
        at once even on an unchanged cluster."""
        self.config = config  # (`_cycle_config` makes the run configuration of it)
        self._gate = quiet_cycles(config, self.plugins)  # a new gate: the next cycle is due
        self.metrics.config_reloads.labels("applied").inc()
        self.metrics.config_reload_ok.set(1)
        self.metrics.config_reload_time.set(self.wall_clock())
        self.trigger.new_work()

    def _cycle_config(self) -> tuple[SchedulerConfig, Any]:
        """The configuration and plugin registry a cycle runs with (the configured ones and the
        busched-agent-feedback predicate last, made once per configuration, not per cycle), after
        bringing the refusals in force up to date (`_update_refusals`)."""
        self._update_refusals()
        if self._run_config[0] is not self.config:  # the replayer swaps configurations
            self._run_config = (self.config, with_refusals(self.config))
        return self._run_config[1], self._run_plugins

    def _update_refusals(self) -> None:
        """The nodes each task is kept off now (refusals whose time is up dropped), as the next snapshot's
        ``refused``; an exclusion ending or shrinking may let a task fit where it could not, so it counts as a
        change of the cache (the memo of unfit jobs and the quiet gate read the cache)."""
        now = self.clock()
        refused: dict[str, frozenset[str]] = {}
        for key, nodes in list(self.excluded.items()):
            keep = {n: t for n, t in nodes.items() if t > now}
            if keep:
                self.excluded[key] = keep
                refused[key] = frozenset(keep)
            else:
                del self.excluded[key]
        now_key = frozenset(refused.items())
        if any(item not in now_key for item in self._excluded_key):
            self.cache.room_made()
        self._excluded_key = now_key
        self._refused = refused

    async def _flush_outbox(self) -> None:
        """Write the queued records; binding records on condition that their subject is where we last saw it."""
        if not self._outbox:
            return
        items = list(self._outbox.items())
        self._outbox.clear()
        out: list[tuple[Any, ...]] = []
        keys: list[str] = []
        epoch, shard = self.table.epoch, self.settings.shard
        for subj, (msg, mid) in items:
            if type(msg) is m.BindingRecord:
                if msg.epoch != epoch or msg.shard != shard:
                    # written with the epoch we hold now: a record queued while we were a standby (an agent's
                    # result heard then) carried epoch 0, and after our own epoch on the stream every reader,
                    # we too, took it for a deposed leader's and ignored it (the task ran again)
                    msg = msgspec.structs.replace(msg, epoch=epoch, shard=shard)
                key = f"{msg.namespace}/{msg.name}"
                b = self.table.bindings.get(key)
                out.append((subj, msg, mid, b.rec_seq if b is not None else 0))
                keys.append(key)
            else:
                if type(msg) is m.EvictDecision and (msg.epoch != epoch or msg.shard != shard):
                    msg = msgspec.structs.replace(msg, epoch=epoch, shard=shard)  # a stale evict: as above
                out.append((subj, msg, mid))
                keys.append("")
        acks = await self.bus.publish_all(out)
        lost: list[str] = []
        for (subj, rec), key, ack in zip(items, keys, acks):
            if ack.ok:
                if key:
                    b = self.table.bindings.get(key)
                    if b is not None:
                        self.table.record_stored(b, ack.seq)
            elif ack.conflict and key:
                lost.append(key)
            else:
                self.metrics.publish_errors.labels("record").inc()
                self._outbox.setdefault(subj, rec)
        if lost:
            await self.table.lost_race(lost)



class _NoSession:
    decisions = (None,)  # counts as a cycle that decided something: the next one is due


_NO_SESSION: Any = _NoSession()
