"""`busched.bench.e2e_loop`: the e2e bench's measure of how long the event loop was kept from running."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from typing import Any

import pytest

from busched.bench.e2e_loop import STALL, LoopStalls


def test_a_thread_holding_the_gil_past_the_loops_timer_is_a_stall():
    """A thread that takes the GIL while the loop waits for a 20 ms timer and keeps it for 150 ms (no switch
    forced: the interval raised above that) keeps the loop from running well past its timer: one stall of
    about 130 ms, inside the window given, and the selector is the class's own again after `stop`.  The thread
    starts once the loop waits on its selector (a fixed 5 ms head start was not enough on a loaded machine: the
    loop's thread, held off a CPU, reached its wait after the thread had taken the GIL, and no stall was seen)."""
    waiting = threading.Event()

    def hog() -> None:
        waiting.wait(5)  # (the loop in its wait, the GIL released)
        end = time.perf_counter() + 0.15
        while time.perf_counter() < end:
            pass

    async def main() -> tuple[LoopStalls, float, float, bool]:
        loop = asyncio.get_running_loop()
        selector: Any = loop._selector  # type: ignore[attr-defined]
        select = selector.select

        def marking(timeout: float | None = None) -> Any:
            if timeout is not None and timeout > 0:
                waiting.set()
            return select(timeout)

        selector.select = marking  # (under the one `LoopStalls` puts on)
        stalls = LoopStalls(loop)
        a = time.time()
        stalls.start()
        old = sys.getswitchinterval()
        sys.setswitchinterval(0.5)
        try:
            th = threading.Thread(target=hog)
            th.start()
            while th.is_alive():
                await asyncio.sleep(0.02)
            th.join()
        finally:
            sys.setswitchinterval(old)
        stalls.stop()
        return stalls, a, time.time(), "select" in vars(loop._selector)  # type: ignore[attr-defined]

    stalls, a, b, wrapped = asyncio.run(main())
    assert stalls.stalls and max(s for _, s in stalls.stalls) > 0.08, stalls.stalls
    r = stalls.report(a, [(a, b)])
    assert r["stalls"] == len(stalls.stalls) and r["longest_stall"][1] > 0.08, r
    assert r["stalled_in_actions_s"] == r["stalled_s"] >= r["longest_stall"][1] > STALL, r
    assert 0 <= r["longest_stall"][0] < b - a and r["cpu_s"] >= 0, r
    assert not wrapped


def test_waits_that_end_on_time_are_not_stalls():
    """The loop's own waits, ended by their timers with nobody else holding the GIL: none counts but what the
    OS alone caused, and nothing is counted before `start` or after `stop`.  On a loaded machine the thread
    waits for a CPU after its timer fires (CI's 2-core VM, and 2 CPU burners here: 3 of 60 runs counted two
    stalls of 3-5 ms); that wait is the thread's runqueue time (``/proc``'s schedstat, kept by `LoopStalls`),
    so the lateness counted must be within it, plus an epoll wait's rounding up to the millisecond each."""

    async def main() -> LoopStalls:
        stalls = LoopStalls(asyncio.get_running_loop())
        await asyncio.sleep(0.01)
        stalls.start()
        for _ in range(5):
            await asyncio.sleep(0.005)
        stalls.stop()
        return stalls

    stalls = asyncio.run(main())
    assert stalls.sched0 is not None and stalls.sched1 is not None  # (Linux keeps it: what the OS caused is known)
    runqueue = stalls.sched1[1] - stalls.sched0[1]
    late = sum(s for _, s in stalls.stalls)
    assert late <= runqueue + 0.0015 * len(stalls.stalls), (stalls.stalls, runqueue)


def test_only_a_wait_returning_more_than_stall_past_its_timeout_counts():
    """The rule itself on a clock the test moves (the test above can only bound the lateness by what the OS
    caused): a wait back 1 ms past its timeout is the selector's own rounding, one back 3 ms is a stall of 3 ms;
    a wait without a timeout, or one made before `start`, never counts."""

    class Selector:
        def __init__(self) -> None:
            self.now = 100.0
            self.takes = 0.0

        def select(self, timeout: float | None = None) -> list[Any]:
            self.now += self.takes
            return []

    class Loop:
        def __init__(self) -> None:
            self._selector = Selector()

    loop = Loop()
    sel = loop._selector
    stalls = LoopStalls(loop, clock=lambda: sel.now, timer=lambda: sel.now)  # type: ignore[arg-type]
    sel.takes = 0.5
    sel.select(0.1)  # before `start`
    stalls.start()
    for timeout, takes in ((0.010, 0.011), (0.010, 0.013), (0.0, 0.001), (0.0, 0.0035), (None, 1.0)):
        sel.takes = takes
        at = sel.now
        sel.select(timeout)
        if timeout is not None and takes - timeout > STALL:
            assert stalls.stalls[-1] == (at, pytest.approx(takes - timeout)), stalls.stalls
    stalls.stop()
    assert [round(s, 4) for _, s in stalls.stalls] == [0.003, 0.0035], stalls.stalls
