"""Renewing a held lease from a thread of its own, on a connection of its own.

A leader renews its lease every third of the lease (`busched.bus.lease`).  Renewed on the scheduler's
event loop, a renewal waits behind whatever the loop is doing: a cycle placing 5,000 tasks publishes its
binds and records there, and a stretch of a second or so let a 2 s lease lapse, so a busy leader deposed
itself (6 to 30 times a run in ``busched bench failover``) — exactly when it was most useful.

A `Keeper` renews from a daemon thread running its own asyncio loop and NATS connection, so a busy
event loop no longer starves it (the thread gets the interpreter at least every switch interval, 5 ms).
What it must not do is keep a *wedged* scheduler in office: the scheduler's loop calls `tick` whenever
it runs its election step, and the keeper renews only while the last tick is younger than ``stall``
seconds; a loop stuck longer lets the lease lapse, and a standby takes over as if the leader had died.
A process paused whole (SIGSTOP) stops its keeper with it: the lease lapses as before.

The lease's own state (`Lease.valid`, its revision and epoch) is shared between the two threads under
the lease's lock; a step-down (`Lease.lost`) is never undone by a renewal that was on its way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import nats

from busched.bus.asks import Policy, ask
from busched.bus.connect import NatsOptions
from busched.bus.lease import BUCKET, Lease

__all__ = ["Keeper"]

log = logging.getLogger("busched.bus")


class Keeper:
    """Renews ``lease`` (held by the caller) every ``duration / 3`` from its own thread and connection, while
    the owner's loop has ticked within ``stall`` seconds.  `start` once the lease is held; `stop` before
    releasing it or on stepping down."""

    def __init__(self, options: NatsOptions, lease: Lease, *, stall: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options
        self.lease = lease
        self.stall = stall if stall is not None else max(10.0, 5 * lease.duration)
        self.clock = clock
        self.renewals = 0  # successful renewals (tests, the log)
        self._last_tick = clock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self.error: BaseException | None = None  # why the keeper could not start (its connection)

    def tick(self) -> None:
        """The owner's loop is alive (called from its election step)."""
        self._last_tick = self.clock()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self.error is None

    def start(self, timeout: float = 10.0) -> bool:
        """Connect and start renewing; False (and the owner renews on its own loop) when the keeper's
        connection cannot be made within ``timeout``."""
        self.tick()
        self._thread = threading.Thread(target=self._main, name=f"lease-{self.lease.shard}", daemon=True)
        self._thread.start()
        self._ready.wait(timeout)
        if self.error is not None or not self._ready.is_set():
            log.warning("lease %s: no keeper thread (%s); renewing on the event loop", self.lease.shard,
                        self.error or "connection timed out")
            self.stop()
            return False
        return True

    def stop(self, timeout: float = 5.0) -> None:
        """Stop renewing (the lease is left as it is: released by its owner, or lapsing)."""
        loop, stop, thread = self._loop, self._stop, self._thread
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # its loop already closed
                loop.call_soon_threadsafe(stop.set)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self._thread = None

    # -- the keeper's thread ------------------------------------------------------------------------------------
    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as e:  # noqa: BLE001 - reported through `error` and the log
            self.error = e
            self._ready.set()

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        kw = self.options.connect_kwargs()
        kw["name"] = f"{kw.get('name') or 'busched'}-lease"
        try:
            nc = await asyncio.wait_for(nats.connect(max_reconnect_attempts=-1, reconnect_time_wait=0.5,
                                                     allow_reconnect=True, **kw), self.options.connect_timeout + 5)
            wait = max(0.5, self.lease.duration / 3)
            js = nc.jetstream(timeout=wait)
            # one ask, bounded by a renewal's wait: the owner's election step waits for this start, and asked
            # again through an election it would let the lease lapse meanwhile (the owner renews instead)
            kv = await ask("kv.bucket", lambda: js.key_value(BUCKET), Policy(ask_s=wait, asks=1, total_s=wait),
                           detail=BUCKET)
        except BaseException as e:  # noqa: BLE001
            self.error = e
            self._ready.set()
            return
        self._ready.set()
        interval = self.lease.duration / 3
        stalled = False
        try:
            while not self._stop.is_set() and self.lease.held:
                if self.clock() - self._last_tick > self.stall:
                    if not stalled:
                        log.warning("lease %s: the scheduler's loop has not run for %.1fs: not renewing (a "
                                    "standby takes over)", self.lease.shard, self.clock() - self._last_tick)
                    stalled = True
                else:
                    stalled = False
                    await self._renew(kv)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), interval)
        finally:
            with contextlib.suppress(Exception):
                await nc.close()

    async def _renew(self, kv: Any) -> None:
        if await self.lease.renew(kv):
            self.renewals += 1
