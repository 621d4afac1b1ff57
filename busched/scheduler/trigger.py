"""When the next cycle starts: once new work has settled, or ``period`` after the last one.

Volcano cycles on a timer (1 s by default): a job submitted just after a cycle waits for the next
one, and a burst of submissions that straddles a tick is split over two cycles, the first run on
half the burst (each cycle costs a snapshot and a session over the whole cluster, however little
it places).  Here a cycle also starts when *new work* has *settled*:

* new work is what could let a cycle decide something the last one could not: an object applied
  or deleted (a task, job, queue, node...), a task back to Pending (refused, lost, evicted), a
  task finished or failed (its resources free), a node's agent coming alive.  Agents reporting
  their tasks accepted or Running are not: nothing new can be placed because of them;
* it has settled when the scheduler has read everything on the state stream (the consumer has
  nothing pending) and nothing new came for ``settle`` seconds, so a burst (``busched apply`` of
  thousands of objects) is scheduled in one cycle; a burst that never pauses starts its cycle
  ``settle_max`` after its first arrival anyway;
* a triggered cycle starts at least ``min_interval`` after the previous one ended, so a trickle of
  submissions cannot keep the scheduler cycling back to back.

Without new work, a cycle starts ``period`` after the previous one ended (as Volcano's
``wait.Until``: a cycle longer than the period is not followed by another at once, which would
leave the event loop no time for the agents' answers to its binds): leases, heartbeats and
backoffs are applied by them (and a cycle with nothing to do is skipped, `QuietCycles`).  ``trigger=False``
gives the timer alone.  Settling is measured with the real monotonic clock (it is about the
network going quiet), the period with the scheduler's clock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol


class TriggerSettings(Protocol):
    period: float
    trigger: bool
    settle: float
    settle_max: float
    min_interval: float


class CycleTrigger:
    """Decides when the next cycle starts.  ``clock`` is the scheduler's (the period), ``monotonic`` the
    real one (settling); ``pending`` says how many messages wait on the state stream unread."""

    def __init__(self, settings: TriggerSettings, clock: Callable[[], float], *,
                 monotonic: Callable[[], float] = time.monotonic, pending: Callable[[], int] = lambda: 0) -> None:
        self.settings = settings
        self.clock = clock
        self.monotonic = monotonic
        self.pending = pending
        self.wake = asyncio.Event()  # new work arrived, or stop
        self.stopped = False
        self.work_since: float | None = None  # monotonic time of the first work no cycle has taken yet
        self.work_last = 0.0

    def new_work(self) -> None:
        """Something arrived that a cycle could act on."""
        now = self.monotonic()
        if self.work_since is None:
            self.work_since = now
        self.work_last = now
        self.wake.set()

    def taken(self) -> None:
        """The cycle about to take its snapshot covers every work that arrived so far."""
        self.work_since = None

    def stop(self) -> None:
        self.stopped = True
        self.wake.set()

    def next_timeout(self, ended: float, ended_mono: float) -> float:
        """Seconds until the next cycle is due (<= 0: now), as things stand."""
        st = self.settings
        timeout = st.period - (self.clock() - ended)
        if st.trigger and self.work_since is not None:
            now = self.monotonic()
            settled = max(self.work_last + st.settle, ended_mono + st.min_interval)
            if self.pending() > 0:
                settled = max(settled, now + st.settle)  # more is waiting on the stream: look again then
            at = min(settled, max(self.work_since + st.settle_max, ended_mono + st.min_interval))
            timeout = at - now  # work pending: the timer's cycle waits for it (at most settle_max)
        return timeout

    async def wait(self, ended: float, ended_mono: float) -> None:
        """Wait until the next cycle is due: new work settled, ``period`` after the last cycle ended
        (``ended`` on the scheduler's clock, ``ended_mono`` on the monotonic one), or stop."""
        while not self.stopped:
            self.wake.clear()
            timeout = self.next_timeout(ended, ended_mono)
            if timeout <= 0:
                return
            try:
                await asyncio.wait_for(self.wake.wait(), timeout)
            except TimeoutError:
                pass
