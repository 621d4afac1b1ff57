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


class Trigger:
    def _new_work(self) -> None:
        """Something arrived that a cycle could act on."""
        now = time.monotonic()
        if self._work_since is None:
            self._work_since = now
        self._work_last = now
        self._wake.set()

    def _cycle_taken(self) -> None:
        """The cycle about to take its snapshot covers every work that arrived so far."""
        self._work_since = None

    async def _wait_next_cycle(self, ended: float, ended_mono: float) -> None:
        """Wait until the next cycle is due: new work settled, ``period`` after the last cycle ended
        (``ended`` on the scheduler's clock, ``ended_mono`` on the monotonic one), or stop."""
        st = self.settings
        while not self._stop.is_set():
            self._wake.clear()
            timeout = st.period - (self.clock() - ended)
            if st.trigger and self._work_since is not None:
                now = time.monotonic()
                settled = max(self._work_last + st.settle, ended_mono + st.min_interval)
                if self.watch is not None and self.watch.pending > 0:
                    settled = max(settled, now + st.settle)  # more is waiting on the stream: look again then
                at = min(settled, max(self._work_since + st.settle_max, ended_mono + st.min_interval))
                timeout = at - now  # work pending: the timer's cycle waits for it (at most settle_max)
            if timeout <= 0:
                return
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except asyncio.TimeoutError:
                pass
