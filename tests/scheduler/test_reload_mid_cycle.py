"""A configuration applied while a cycle is under way (`Scheduler.use_config`, e.g. a reload) makes the next cycle
due, even on an unchanged cluster: the cycle under way must not tell the new quiet-cycle gate that it decided
(it ran the old configuration).  Before, it did, and every later cycle was skipped until something changed."""

from __future__ import annotations

import asyncio

from busched.framework.config import load_config
from tests.nats_fixture import wait_until
from tests.scheduler.test_bind_stream import HOLD_CONFIG, Gate, _setup


async def test_a_configuration_applied_mid_cycle_makes_the_next_cycle_due(harness):
    gate = Gate()
    gate.open.set()
    sched, agent, bus = await _setup(harness, gate)
    try:
        assert (await sched.run_once(force=True)).binds  # placed the three tasks
        await wait_until(lambda: sum(len(t) for t in agent.running().values()) == 3, what="tasks running")

        async def quiet() -> bool:  # their results taken in: the cycles after are skipped
            return (await sched.run_once()).skipped
        await wait_until(quiet, what="a quiet cycle")
        gate.reached.clear()
        gate.open.clear()
        cycle = asyncio.create_task(sched.run_once(force=True))
        await wait_until(gate.reached.is_set, what="the session held")
        sched.use_config(load_config(HOLD_CONFIG))  # applied while the cycle runs the old one
        gate.open.set()
        await cycle
        nxt = await sched.run_once()  # not forced: the gate decides
        assert not nxt.skipped, "the new configuration's first cycle was skipped"
    finally:
        gate.open.set()
        await sched.stop()
