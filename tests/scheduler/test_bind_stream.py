"""Binds written while the session still places (busched.scheduler.bind_stream; real nats-server).

An action after allocate holds the session in its thread until the test lets it go: the binds allocate
decided must reach the agent meanwhile (record first, then decision), each exactly once, and a session
that fails after them leaves them bound, not bound twice."""

from __future__ import annotations

import asyncio
import threading

from busched.actions import ACTIONS
from busched.agent import fleet_nodes
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.apply import apply_cluster
from busched.framework.config import DEFAULT_CONFIG, load_config
from busched.scheduler import Scheduler, SchedulerSettings
from tests.nats_fixture import FAST, wait_until
from tests.scheduler.test_scheduler_pipeline import jobs

HOLD_CONFIG = DEFAULT_CONFIG.replace('actions: "enqueue, allocate, backfill"', 'actions: "enqueue, allocate, hold"')


class Gate:
    """The session's thread waits here (at the ``hold`` action) until the test opens it."""

    def __init__(self, fail: bool = False) -> None:
        self.reached = threading.Event()
        self.open = threading.Event()
        self.fail = fail

    def action(self) -> type:
        gate = self

        class Hold:
            def __init__(self, *args: object) -> None:
                pass

            def execute(self, ssn: object) -> None:
                gate.reached.set()
                assert gate.open.wait(20), "the test never opened the gate"
                if gate.fail:
                    raise RuntimeError("the session fails after allocate")

        return Hold


async def _setup(harness, gate: Gate) -> tuple[Scheduler, object, object]:
    bus = await harness.bus()
    await bus.ensure_streams()
    agent = await harness.agent(fleet_nodes(2, cpu="4", memory="8Gi"))
    sched = Scheduler(await harness.bus(), load_config(HOLD_CONFIG), SchedulerSettings(**FAST),
                      actions=ACTIONS.with_entries({"hold": gate.action()}))
    await sched.start(timeout=10)
    await wait_until(lambda: sum(lv.state == "alive" for lv in sched.live.values()) == 2, what="agents alive")
    await apply_cluster(bus, jobs(3))
    await wait_until(lambda: len(sched.specs["task"]) == 3 and len(sched.specs["job"]) == 3, what="jobs known")
    return sched, agent, bus


async def test_binds_reach_the_agent_while_the_session_still_runs(harness):
    gate = Gate()
    sched, agent, bus = await _setup(harness, gate)
    try:
        cycle = asyncio.create_task(sched.run_once(force=True))
        await wait_until(gate.reached.is_set, what="the session at the hold action")
        keys = [f"p/j{i}-0" for i in range(3)]
        # the session is still held in its thread, and the agent already runs every task it placed
        await wait_until(lambda: sum(len(t) for t in agent.running().values()) == 3, what="tasks running")
        assert not cycle.done()
        for key in keys:  # each under its own write-ahead record, fenced by it, attempt 1
            b = sched.bindings[key]
            assert b.attempt == 1 and b.published and b.rec_seq > 0
            seq, data = await bus.last_state(S.binding_subject(key))
            got = m.decode(data)
            assert seq == b.rec_seq
            assert isinstance(got, m.BindingRecord) and got.attempt == 1 and got.node == b.node
        gate.open.set()
        report = await cycle
        assert not report.error
        assert sorted(k for k, _ in report.binds) == keys  # counted once each, though written early
        assert sched.metrics.action_binds._value.get() == 3
        assert all(sched.bindings[k].attempt == 1 for k in keys)
    finally:
        gate.open.set()
        await sched.stop()


async def test_a_session_failing_after_its_binds_went_out_leaves_them_bound_once(harness):
    gate = Gate(fail=True)
    sched, agent, bus = await _setup(harness, gate)
    try:
        cycle = asyncio.create_task(sched.run_once(force=True))
        await wait_until(gate.reached.is_set, what="the session at the hold action")
        await wait_until(lambda: sum(len(t) for t in agent.running().values()) == 3, what="tasks running")
        gate.open.set()
        report = await cycle
        assert "fails after allocate" in report.error
        keys = [f"p/j{i}-0" for i in range(3)]
        await wait_until(lambda: all(sched.task_status(k) == "Running" for k in keys), what="Running")
        gate.fail = False
        for _ in range(3):  # later cycles see the tasks bound: nothing is placed again
            assert not (await sched.run_once(force=True)).binds
        assert all(sched.bindings[k].attempt == 1 for k in keys)
        assert sum(len(t) for t in agent.running().values()) == 3
    finally:
        gate.open.set()
        await sched.stop()


async def test_a_failed_session_s_binds_all_go_out_even_those_the_stream_had_not_looked_at(harness, monkeypatch):
    """Every decision the session appended is final (Volcano binds as allocate commits), so a session that fails
    before the stream's next look still has all of them written, once, with their Scheduled events."""
    from busched.scheduler import bind_stream

    monkeypatch.setattr(bind_stream, "POLL", 30.0)  # the stream looks once, before allocate: never after
    gate = Gate(fail=True)
    gate.open.set()
    sched, agent, bus = await _setup(harness, gate)
    try:
        report = await sched.run_once(force=True)
        assert "fails after allocate" in report.error
        keys = [f"p/j{i}-0" for i in range(3)]
        assert sorted(k for k, _ in report.binds) == keys
        await wait_until(lambda: sum(len(t) for t in agent.running().values()) == 3, what="tasks running")
        assert all(sched.bindings[k].attempt == 1 and sched.bindings[k].published for k in keys)
        scheduled = {k[1] for k in sched.sched_events.series if k[3] == "Scheduled" and k[0] == "task"}
        assert scheduled >= set(keys), scheduled
        gate.fail = False
        assert not (await sched.run_once(force=True)).binds  # nothing placed again
    finally:
        await sched.stop()


async def test_the_session_hands_the_loop_its_binds_as_it_appends_them(harness, monkeypatch):
    """Hand-offs (busched.scheduler.bind_stream, off by default): every `HANDOFF` decisions the session appends
    it wakes the loop and waits, so its binds are written (record, then decision) before its next action even
    when the loop would not have looked on its own (its timer 30 s away: the GIL held, as on a quiet machine)."""
    from busched.scheduler import bind_stream

    monkeypatch.setattr(bind_stream, "POLL", 30.0)
    monkeypatch.setattr(bind_stream, "HANDOFF", 1)
    monkeypatch.setattr(bind_stream, "PAUSE", 0.5)  # (the loop's time at each hand-off: plenty for both writes)
    keys = [f"p/j{i}-0" for i in range(3)]
    seen: list[list[bool]] = []
    holder: list[Scheduler] = []

    class Look:
        def __init__(self, *args: object) -> None:
            pass

        def execute(self, ssn: object) -> None:  # in the session's thread, right after allocate
            table = holder[0].bindings
            seen.append([k in table and table[k].published and table[k].rec_seq > 0 for k in keys])

    gate = Gate()
    gate.open.set()
    bus = await harness.bus()
    await bus.ensure_streams()
    agent = await harness.agent(fleet_nodes(2, cpu="4", memory="8Gi"))
    sched = Scheduler(await harness.bus(), load_config(HOLD_CONFIG.replace("allocate, hold", "allocate, look")),
                      SchedulerSettings(**FAST), actions=ACTIONS.with_entries({"look": Look}))
    holder.append(sched)
    await sched.start(timeout=10)
    try:
        await wait_until(lambda: sum(lv.state == "alive" for lv in sched.live.values()) == 2, what="agents alive")
        await apply_cluster(bus, jobs(3))
        await wait_until(lambda: len(sched.specs["task"]) == 3, what="jobs known")
        report = await sched.run_once(force=True)
        assert not report.error and sorted(k for k, _ in report.binds) == keys, report
        assert seen == [[True, True, True]], seen  # all three written and decided before the next action began
        await wait_until(lambda: sum(len(t) for t in agent.running().values()) == 3, what="tasks running")
        assert all(sched.bindings[k].attempt == 1 for k in keys)  # each once
    finally:
        await sched.stop()
