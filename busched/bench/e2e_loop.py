"""How long an e2e run's event loop was kept from running (`busched bench e2e --stages`, ``loop``).

The scheduler's event loop and the worker thread its session runs in share one GIL.  While the session
thread holds it, the loop does not run, even when a message has arrived or a timer is due: the records
the bind stream (`busched.scheduler.bind_stream`) should write while the session places, the answers to
them, the agents' results all wait.  Issue 17's eighth stop found the loop kept out for the whole of a
5,000-bind session (0.25-0.28 s) in the runs where no record went out before the actions ended, and
interleaved with it (the session's 0.33 s of CPU then taking 0.9-1.1 s) in the others; which of the two
happens is decided by the GIL, not by the code.  These figures show it, run by run, without adding a
wakeup of their own (a ticking task would change what it measures):

* the loop's selector is wrapped, and a wait for I/O that returned more than `STALL` seconds later than
  its timeout allowed is a *stall*: the loop was due to run and did not.  A wait that ended early because
  a message arrived, and then waited for the GIL, is not seen: the stalls are a lower bound;
* the loop thread's CPU seconds, and the seconds it was runnable but had no CPU (``/proc``'s schedstat:
  the machine's other load, not the GIL), in the measured window.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

__all__ = ["LoopStalls", "STALL"]

STALL = 0.002  # seconds past its timeout that a wait for I/O must return to count as a stall


def _schedstat() -> tuple[float, float] | None:
    """(seconds on a CPU, seconds runnable without one) of the calling thread so far; None where not kept."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            run, wait = f.read().split()[:2]
    except (OSError, ValueError):
        return None
    return int(run) / 1e9, int(wait) / 1e9


class LoopStalls:
    """The stalls of ``loop`` (a selector event loop) between `start` and `stop`, both called from its thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, clock: Callable[[], float] = time.time,
                 timer: Callable[[], float] = time.perf_counter) -> None:
        self.stalls: list[tuple[float, float]] = []  # (when the wait began, on ``clock``; seconds past its timeout)
        self.running = False
        self.cpu0 = self.cpu1 = 0.0
        self.sched0: tuple[float, float] | None = None
        self.sched1: tuple[float, float] | None = None
        self._selector: Any = getattr(loop, "_selector", None)  # (asyncio's selector loops keep it there)
        if self._selector is None:
            return
        select = self._selector.select

        def timed_select(timeout: float | None = None) -> Any:
            if not self.running or timeout is None:
                return select(timeout)
            t, at = timer(), clock()
            try:
                return select(timeout)
            finally:
                late = timer() - t - max(timeout, 0.0)
                if late > STALL:
                    self.stalls.append((at, late))

        self._selector.select = timed_select

    def start(self) -> None:
        self.running = True
        self.cpu0, self.sched0 = time.thread_time(), _schedstat()

    def stop(self) -> None:
        if not self.running:
            return
        self.running = False
        self.cpu1, self.sched1 = time.thread_time(), _schedstat()
        if self._selector is not None and "select" in vars(self._selector):
            del self._selector.select  # the class's own again

    def report(self, t0: float, windows: list[tuple[float, float]]) -> dict[str, Any]:
        """The figures, times in seconds from ``t0``; ``windows`` (start, end) on the same clock as the stalls,
        e.g. the session's actions: the stalls that began inside them are summed apart."""
        longest = max(self.stalls, key=lambda s: s[1], default=None)
        inside = sum(s for at, s in self.stalls if any(a <= at < b for a, b in windows))
        runqueue = (round(self.sched1[1] - self.sched0[1], 3)
                    if self.sched0 is not None and self.sched1 is not None else None)
        return {"cpu_s": round(self.cpu1 - self.cpu0, 3), "runqueue_s": runqueue, "stalls": len(self.stalls),
                "stalled_s": round(sum(s for _, s in self.stalls), 3), "stalled_in_actions_s": round(inside, 3),
                "longest_stall": [round(longest[0] - t0, 3), round(longest[1], 3)] if longest else None}
