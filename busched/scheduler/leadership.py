"""How `Scheduler` takes up and follows its role in the leader election (`busched.scheduler.election`).

Elected, it writes its epoch on the stream and waits to read it back before recovering the binds in
flight (`_elected`); its role shows in the metrics (`_role_changed`); a standby keeps its cache warm
while it waits (`_wait_role`).  They stand apart from `busched.scheduler.loop` because they are the
election's callbacks into the scheduler, and read together as one protocol.  A mixin of `Scheduler`:
the methods stay methods, and the state stays the scheduler's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from busched.builtin import paused_gc
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.client import Bus
from busched.metrics import SchedulerMetrics
from busched.scheduler.bindings import BindingTable
from busched.scheduler.effective import EffectiveObjects
from busched.scheduler.election import Election
from busched.scheduler.records import SchedulerSettings
from busched.scheduler.trigger import CycleTrigger

__all__ = ["Leadership"]


class Leadership:
    """`_elected`, `_role_changed`, `_wait_role` of `Scheduler` (see the module's docstring)."""

    # the scheduler's state these keep (busched.scheduler.loop.Scheduler sets it)
    bus: Bus
    settings: SchedulerSettings
    metrics: SchedulerMetrics
    clock: Callable[[], float]
    _next_version: Callable[[], int]
    _lock: asyncio.Lock
    _stop: asyncio.Event
    table: BindingTable
    effective: EffectiveObjects
    trigger: CycleTrigger
    election: Election
    boot: str  # (a property: busched.scheduler.entry_points)

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
