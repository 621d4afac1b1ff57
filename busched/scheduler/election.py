"""The scheduler's role: leader or standby, from its shard's lease (`busched.bus.lease`).

With ``SchedulerSettings.lease`` at 0 (in-process tests, replay) there is no election: the scheduler
leads from the start with epoch 0, as a single scheduler always did.  Otherwise it starts as a
*standby*: it follows the state stream hot (its cache and tables warm, heartbeats heard, ``get``
answered) but runs no cycle and writes nothing; every ``lease / 10`` seconds it steps its lease
(`Lease.step`: claim when the holder's key has not changed for a whole lease); the leader renews it
every ``lease / 3``.

When the claim succeeds the scheduler is *elected*: ``on_elected(epoch)`` writes the epoch on the
state stream and waits until its own feed has applied it (so every record the previous leader wrote
before it is in the tables), then recovers in-flight binds; only then is it *leader* and cycles run.

A leader renews from a keeper thread on a connection of its own when one is given
(``keeper``, `busched.bus.lease_keeper`): a cycle busy on the event loop no longer lets the lease lapse;
the loop only ticks the keeper and checks the lease is still valid.

A leader that cannot renew (another holder, or a renewal not acknowledged in time) or whose lease may
have lapsed by its own monotonic clock is *deposed*: it writes nothing from that instant (`may_write`
is what the bus asks before every write, `busched.bus.client.Bus.fence`) and its scheduler stops, so
that `busched run` joins again as a fresh standby (its tables may hold writes that never landed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

log = logging.getLogger("busched.scheduler")


class LeaseLike(Protocol):
    """What the election needs of `busched.bus.lease.Lease`."""

    epoch: int
    duration: float
    current: Any

    async def step(self) -> bool: ...

    def valid(self, now: float | None = None) -> bool: ...

    def lost(self) -> None: ...

    async def release(self) -> None: ...


class KeeperLike(Protocol):
    """What the election needs of `busched.bus.lease_keeper.Keeper`."""

    @property
    def running(self) -> bool: ...

    def start(self, timeout: float = 10.0) -> bool: ...

    def tick(self) -> None: ...

    def stop(self, timeout: float = 5.0) -> None: ...


class Election:
    """One scheduler's role.  `run` steps the lease until ``stop`` is set or the scheduler is deposed."""

    def __init__(self, lease: LeaseLike | None, *, shard: str, on_elected: Callable[[int], Awaitable[None]],
                 on_role: Callable[[str, int], None] = lambda role, epoch: None,
                 keeper: Callable[[], KeeperLike | None] | None = None) -> None:
        self.lease = lease
        self.keeper_factory = keeper
        self.keeper: KeeperLike | None = None  # renewing while we lead, when a factory is given
        self.shard = shard
        self.on_elected = on_elected
        self.on_role = on_role
        self.role = "leader" if lease is None else "standby"  # standby | elected | leader | deposed
        self.epoch = 0
        self.changed = asyncio.Event()  # set at every change of role
        self.reason = ""  # why the last change happened

    @property
    def enabled(self) -> bool:
        return self.lease is not None

    @property
    def leading(self) -> bool:
        """Cycles may run: elected and recovered, and the lease still valid."""
        return self.role == "leader" and self.may_write()

    @property
    def deposed(self) -> bool:
        return self.role == "deposed"

    def may_write(self) -> bool:
        """Whether this scheduler may write to the streams now: always without an election; otherwise only
        while elected (or leading) and the lease cannot have lapsed by our clock."""
        if self.lease is None:
            return True
        return self.role in ("elected", "leader") and self.lease.valid()

    def check(self) -> bool:
        """Depose a leader whose lease may have lapsed (asked before each cycle); True while leading."""
        if self.role in ("elected", "leader") and not self.may_write():
            self._set("deposed", "the lease may have lapsed before it was renewed")
        return self.leading

    async def run(self, stop: asyncio.Event) -> None:
        if self.lease is None:
            return
        try:
            await self._run(stop)
        finally:
            await self._stop_keeper()

    async def _run(self, stop: asyncio.Event) -> None:
        assert self.lease is not None
        while not stop.is_set() and not self.deposed:
            keeper = self.keeper
            if keeper is not None and keeper.running:
                keeper.tick()  # our loop runs: the keeper renews (its own thread and connection)
                held = self.lease.valid()
            else:
                try:
                    held = await self.lease.step()
                except Exception as e:  # noqa: BLE001 - the bus is down: we hold it only while it is valid
                    log.info("lease %s: %s", self.shard, e or type(e).__name__)
                    held = self.lease.valid()
            if held and self.role == "standby":
                self.epoch = self.lease.epoch
                self._set("elected", f"claimed the lease, epoch {self.epoch}")
                try:
                    await self.on_elected(self.epoch)
                except Exception as e:  # noqa: BLE001 - not a leader we can trust: give the lease up
                    log.exception("shard %s: taking over as leader failed", self.shard)
                    self.lease.lost()
                    self._set("deposed", f"taking over failed: {e}")
                    break
                if self.may_write():
                    self._set("leader", f"leading with epoch {self.epoch}")
                    await self._start_keeper()
                else:
                    self._set("deposed", "the lease lapsed while taking over")
            elif not held and self.role in ("elected", "leader"):
                await self._stop_keeper()
                self.lease.lost()
                self._set("deposed", "the lease was not renewed in time, or another scheduler holds it")
            elif not held:
                cur = self.lease.current
                self.epoch = max(self.epoch, self.lease.epoch)
                self.on_role(self.role, cur.record.epoch if cur is not None else 0)
            # the holder renews every third of the lease; a standby looks ten times a lease, so it sees a renewal
            # at most a tenth of a lease late (its count starts then) and takes over soon after the lease ends
            interval = self.lease.duration / (3 if self.role in ("elected", "leader") else 10)
            try:
                await asyncio.wait_for(stop.wait(), interval)
            except asyncio.TimeoutError:
                pass

    async def release(self) -> None:
        """A clean stop: the lease is given up so a standby takes over at its next step."""
        if self.lease is not None and self.role in ("elected", "leader"):
            self._set("deposed", "stopped")
            await self._stop_keeper()  # no renewal after the release
            await self.lease.release()

    async def _start_keeper(self) -> None:
        if self.keeper_factory is None or self.keeper is not None:
            return
        keeper = self.keeper_factory()
        if keeper is not None and await asyncio.to_thread(keeper.start):
            self.keeper = keeper

    async def _stop_keeper(self) -> None:
        keeper, self.keeper = self.keeper, None
        if keeper is not None:
            await asyncio.to_thread(keeper.stop)

    def _set(self, role: str, reason: str) -> None:
        if role == self.role:
            return
        (log.warning if role == "deposed" else log.info)("shard %s: %s -> %s: %s", self.shard, self.role, role,
                                                          reason)
        self.role = role
        self.reason = reason
        self.changed.set()
        self.changed = asyncio.Event()
        self.on_role(role, self.epoch)
