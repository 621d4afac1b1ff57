"""`busched.bench.e2e_loop`: the e2e bench's measure of how long the event loop was kept from running."""

from __future__ import annotations

import asyncio
import sys
import threading
import time

from busched.bench.e2e_loop import STALL, LoopStalls


def test_a_thread_holding_the_gil_past_the_loops_timer_is_a_stall():
    """A thread that takes the GIL while the loop waits for a 20 ms timer and keeps it for 150 ms (no switch
    forced: the interval raised above that) keeps the loop from running well past its timer: one stall of
    about 130 ms, inside the window given, and the selector is the class's own again after `stop`."""

    def hog() -> None:
        time.sleep(0.005)  # (the GIL released: the loop goes on to its wait)
        end = time.perf_counter() + 0.15
        while time.perf_counter() < end:
            pass

    async def main() -> tuple[LoopStalls, float, float, bool]:
        loop = asyncio.get_running_loop()
        stalls = LoopStalls(loop)
        a = time.time()
        stalls.start()
        old = sys.getswitchinterval()
        sys.setswitchinterval(0.5)
        try:
            th = threading.Thread(target=hog)
            th.start()
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
    """The loop's own waits, ended by their timers with nobody else holding the GIL: none counts, and nothing
    is counted before `start` or after `stop`."""

    async def main() -> LoopStalls:
        stalls = LoopStalls(asyncio.get_running_loop())
        await asyncio.sleep(0.01)
        stalls.start()
        for _ in range(5):
            await asyncio.sleep(0.005)
        stalls.stop()
        return stalls

    stalls = asyncio.run(main())
    # (a loaded machine may hold the thread off a CPU for a moment: allow what the OS alone could cause)
    assert len(stalls.stalls) <= 1 and sum(s for _, s in stalls.stalls) < 0.05, stalls.stalls
