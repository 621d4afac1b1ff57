"""One scheduling cycle of `Scheduler` (`run_once`) and what only a cycle uses.

`run_once` brings the cache up to date (the clock's changes, `_expire`; the changes gathered since
the last cycle), runs the actions over a snapshot, publishes the decisions and closes the session;
beside it are the configuration it runs with (`use_config`, `_cycle_config`, the refusals in force,
`_update_refusals`), the outbox it flushes (`_flush_outbox`) and how a failed session is counted
(`_failed`).  They stand apart from `busched.scheduler.loop` (the composition root and the
lifecycle) because a cycle is read on its own: what it does, in order, with the helpers it calls
next to it.  A mixin of `Scheduler`: the methods stay methods, and the state stays the scheduler's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import msgspec

from busched.builtin import finish_cycle, paused_gc, quiet_cycles, run_actions
from busched.bus import messages as m
from busched.bus.client import Bus
from busched.cache.cache import Cache
from busched.framework.config import SchedulerConfig
from busched.framework.cycle import QuietCycles
from busched.metrics import SchedulerMetrics
from busched.scheduler import history, overview, volcano_metrics
from busched.scheduler.agents import Liveness
from busched.scheduler.bind_stream import BindStream
from busched.scheduler.bindings import BindingTable
from busched.scheduler.effective import EffectiveObjects
from busched.scheduler.election import Election
from busched.scheduler.events import StateFeed
from busched.scheduler.lifecycle import Lifecycle
from busched.scheduler.queries import Queries
from busched.scheduler.queue_statuses import QueueStatuses
from busched.scheduler.records import CycleReport, SchedulerSettings, with_refusals
from busched.scheduler.sched_events import EventRecorder
from busched.scheduler.statuses import PodGroupStatuses
from busched.scheduler.trigger import CycleTrigger

__all__ = ["Cycles"]

log = logging.getLogger("busched.scheduler")


class Cycles:
    """`run_once` and its helpers, of `Scheduler` (see the module's docstring)."""

    # the scheduler's state these keep (busched.scheduler.loop.Scheduler sets it)
    bus: Bus
    config: SchedulerConfig
    settings: SchedulerSettings
    metrics: SchedulerMetrics
    plugins: Any
    actions: Any
    clock: Callable[[], float]
    wall_clock: Callable[[], float]
    cache: Cache
    cycle: int
    _outbox: dict[str, tuple[m.Msg, str | None]]
    _lock: asyncio.Lock
    _gate: QuietCycles
    _excluded_key: frozenset[Any]
    _quiet_excluded: frozenset[Any] | None
    _refused: dict[str, frozenset[str]]
    _run_plugins: Any
    _run_config: tuple[SchedulerConfig, SchedulerConfig]
    trigger: CycleTrigger
    statuses: PodGroupStatuses
    queue_statuses: QueueStatuses
    sched_events: EventRecorder
    table: BindingTable
    effective: EffectiveObjects
    feed: StateFeed
    liveness: Liveness
    lifecycle: Lifecycle
    queries: Queries
    election: Election
    # the scheduler's properties and method these read (busched.scheduler.entry_points)
    boot: str
    excluded: dict[str, dict[str, float]]
    snapshot: Callable[..., Any]

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
            # the gate of this cycle's configuration: one applied meanwhile (`use_config`) comes with a new
            # gate, which this cycle must not tell it decided (it ran the old configuration)
            gate = self._gate
            if not force and excluded_key == self._quiet_excluded and not gate.due(self.cache.generation):
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
                # binds go out as the actions decide them (a session in a worker thread; a sharded
                # scheduler's node ledgers write each node's binds of the cycle as one batch, after it)
                stream = (BindStream(self.table, report)
                          if self.settings.cycle_in_thread and self.table.ledgers is None else None)
                if stream is not None:
                    kw["opened"] = stream.opened
                    stream.start()
                try:
                    ssn = await self._in_cycle(run_actions, snap, config, **kw)
                except Exception as e:  # noqa: BLE001
                    if stream is not None:
                        await stream.finish(None)
                    return self._failed(report, e)
                except BaseException:
                    if stream is not None:
                        stream.cancel()
                    raise
                # the decisions are final once the actions have run: they go out before the session
                # closes (recomputing every job's status), and before the collector may pass over
                # what the cycle left
                stages["actions"] = time.perf_counter() - t0
                try:
                    if stream is not None:
                        await stream.finish(ssn)
                    else:
                        await self.table.publish_binds([d for d in ssn.decisions if d.kind == "bind"], report)
                    await self.table.publish_evicts([d for d in ssn.decisions if d.kind == "evict"], report)
                except BaseException:
                    ssn.abandon()  # never closed: what it lent is assembled afresh (busched.fastpath.lending)
                    raise
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
            gate.done(ssn, before, self.cache.generation)
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

    async def _expire(self, report: CycleReport) -> None:
        """Apply what the clock changed: agents silent too long (only while silence means something), binds
        not taken within their lease, backoffs that ended."""
        now = self.clock()
        calm = self.liveness.calm(now)
        if calm:
            self.liveness.check(now, report)
        await self.table.expire(report, now, calm)

    async def _in_cycle(self, fn: Any, *args: Any, **kw: Any) -> Any:
        """A part of the session's work: in a worker thread (the event loop goes on meanwhile) or here."""
        if self.settings.cycle_in_thread:
            return await asyncio.to_thread(fn, *args, **kw)
        return fn(*args, **kw)

    def _failed(self, report: CycleReport, e: Exception) -> CycleReport:
        self.metrics.cycle_errors.inc()
        log.exception("cycle %d: session failed", self.cycle)
        report.error = f"{type(e).__name__}: {e}"
        if report.binds or report.failed_binds:  # written (or refused: busched.scheduler.write_bounds) while it
            # placed (busched.scheduler.bind_stream): they are news all the same
            self.sched_events.record_binds(report)
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
