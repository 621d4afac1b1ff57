"""The cycle trigger alone (busched.scheduler.trigger.CycleTrigger): clocks injected, no bus, no sleeps
beyond an event loop turn."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from busched.scheduler.trigger import CycleTrigger


@dataclass
class Settings:
    period: float = 10.0
    trigger: bool = True
    settle: float = 0.05
    settle_max: float = 1.0
    min_interval: float = 0.05


class Clocks:
    def __init__(self) -> None:
        self.sched = 100.0
        self.mono = 500.0
        self.pending = 0


def trigger(settings: Settings | None = None) -> tuple[CycleTrigger, Clocks]:
    c = Clocks()
    t = CycleTrigger(settings or Settings(), lambda: c.sched, monotonic=lambda: c.mono, pending=lambda: c.pending)
    return t, c


def test_without_work_the_period_decides() -> None:
    t, c = trigger()
    assert t.next_timeout(ended=100.0, ended_mono=500.0) == 10.0
    c.sched = 104.0
    assert t.next_timeout(ended=100.0, ended_mono=500.0) == 6.0


def test_new_work_is_due_once_it_settled() -> None:
    t, c = trigger()
    t.new_work()
    assert t.wake.is_set()
    # settled: the last work plus settle (the min interval after the last cycle is already past)
    assert abs(t.next_timeout(ended=90.0, ended_mono=400.0) - 0.05) < 1e-9
    c.mono += 0.04
    t.new_work()  # more work pushes the settle point on
    assert abs(t.next_timeout(ended=90.0, ended_mono=400.0) - 0.05) < 1e-9
    c.mono += 0.05
    assert t.next_timeout(ended=90.0, ended_mono=400.0) <= 0


def test_a_burst_that_never_pauses_is_taken_at_settle_max() -> None:
    t, c = trigger()
    t.new_work()
    first = c.mono
    for _ in range(50):
        c.mono += 0.04
        t.new_work()
    assert abs(t.next_timeout(ended=90.0, ended_mono=400.0) - (first + 1.0 - c.mono)) < 1e-9


def test_messages_waiting_on_the_stream_hold_the_cycle_back() -> None:
    t, c = trigger()
    t.new_work()
    c.mono += 1.0
    c.pending = 3
    # settle_max caps it: the burst's cycle waits no longer than settle_max after its first work
    assert t.next_timeout(ended=90.0, ended_mono=400.0) <= 0
    t.taken()
    assert t.work_since is None
    t.new_work()
    assert abs(t.next_timeout(ended=90.0, ended_mono=400.0) - 0.05) < 1e-9


def test_min_interval_after_the_last_cycle() -> None:
    t, c = trigger(Settings(min_interval=0.5))
    t.new_work()
    assert abs(t.next_timeout(ended=100.0, ended_mono=c.mono) - 0.5) < 1e-9


def test_trigger_off_leaves_the_timer_alone() -> None:
    t, _ = trigger(Settings(trigger=False))
    t.new_work()
    assert t.next_timeout(ended=100.0, ended_mono=500.0) == 10.0


async def test_wait_returns_when_due_and_on_stop() -> None:
    t, c = trigger()
    c.sched = 200.0  # the period is long past
    await asyncio.wait_for(t.wait(ended=100.0, ended_mono=500.0), 1.0)
    c.sched = 100.0
    waiter = asyncio.create_task(t.wait(ended=100.0, ended_mono=500.0))
    await asyncio.sleep(0)
    assert not waiter.done()
    t.stop()
    await asyncio.wait_for(waiter, 1.0)
