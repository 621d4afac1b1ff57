"""Support for the tests over a real nats-server: `Harness` (an in-process cluster of schedulers and agents,
each on its own connection), `wait_until` and the checks on what agents hold.

The fixtures built on these (`nats_server`, `harness`) live in tests/conftest.py, so pytest hands them to any
test that names them; test modules import from here only the helpers they call::

    from tests.nats_fixture import held_by_node, wait_until
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from busched.bus.server import NatsServer

__all__ = ["Harness", "FakeClock", "cycle_after", "wait_until", "held_by_node", "assert_no_overcommit",
           "NatsServer", "FAST"]


async def wait_until(cond: Callable[[], Any | Awaitable[Any]], timeout: float = 10.0, interval: float = 0.02,
                     what: str = "condition") -> Any:
    """Poll ``cond`` (sync or async) until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if asyncio.iscoroutine(v):
            v = await v
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


class FakeClock:
    """A clock that moves only when the test says (`advance`); call it for the time."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


async def cycle_after(sched: Any, clock: FakeClock, seconds: float, heard: list[str]) -> Any:
    """Move the scheduler's ``clock`` on by ``seconds``, wait until the nodes in ``heard`` (whose agents still
    heartbeat) have been heard at the new time, then run one cycle; its report.  For a scheduler started with
    ``clock=clock`` and ``run=False``: what a cycle checks against the clock (heartbeat timeouts, grace periods,
    leases) is then checked at exactly the time the test set, with the live agents as fresh as at any moment."""
    clock.advance(seconds)
    await wait_until(lambda: all(sched.live[n].last_seen >= clock.now for n in heard),
                     what=f"{', '.join(heard)} heard at the new time")
    return await sched.run_once()


# -- an in-process cluster: scheduler(s) and agents, each on its own connection ----------------------------------------
FAST = dict(period=0.05, heartbeat_timeout=1.0, node_lost_grace=0.3, bind_lease=0.6, backoff_initial=0.1,
            backoff_max=1.0)


class Harness:
    def __init__(self, url: str) -> None:
        self.url = url
        self._buses: list[Any] = []
        self._loops: list[asyncio.Task[Any]] = []
        self._schedulers: list[Any] = []
        self._agents: list[Any] = []

    async def bus(self) -> Any:
        from busched.bus import Bus

        b = await Bus.connect(self.url)
        self._buses.append(b)
        return b

    async def scheduler(self, config: Any = None, *, run: bool = True, wall_clock: Any = None, clock: Any = None,
                        **settings: Any) -> Any:
        """``wall_clock``: the cycles' ``now`` (epoch seconds); ``clock``: the monotonic one (heartbeat timeouts,
        grace periods, leases, backoffs, the period between cycles); either e.g. a test's `FakeClock`.  With a
        clock that stands still, a running loop cycles only for new work: pass ``run=False`` and call
        ``run_once`` where the test wants a cycle."""
        from busched.scheduler import Scheduler, SchedulerSettings

        kw = {k: v for k, v in (("wall_clock", wall_clock), ("clock", clock)) if v is not None}
        s = Scheduler(await self.bus(), config, SchedulerSettings(**{**FAST, **settings}), **kw)
        await s.start(timeout=10)
        self._schedulers.append(s)
        if run:
            self._loops.append(asyncio.create_task(s.run_forever()))
        return s

    async def agent(self, nodes: list[Any], **kw: Any) -> Any:
        from busched.agent import Agent

        kw.setdefault("heartbeat_interval", 0.1)
        a = Agent(await self.bus(), nodes, **kw)
        await a.start()
        self._agents.append(a)
        return a

    async def close(self) -> None:
        for a in self._agents:
            await a.stop()
        for s in self._schedulers:
            await s.stop()
        for t in self._loops:
            try:
                await asyncio.wait_for(t, 5)
            except (asyncio.CancelledError, asyncio.TimeoutError):
                t.cancel()
        for b in self._buses:
            await b.close()


def held_by_node(*agents: Any) -> dict[str, dict[str, int]]:
    """node -> {task: attempt} across agents."""
    out: dict[str, dict[str, int]] = {}
    for a in agents:
        out.update(a.running())
    return out


def assert_no_overcommit(*agents: Any) -> None:
    from busched.api.resource import Resource

    for a in agents:
        for n in a.nodes.values():
            used = Resource()
            for t in n.tasks.values():
                used.add(t.request)
            assert used.less_equal(n.allocatable), f"node {n.name} over its allocatable: {used} > {n.allocatable}"
