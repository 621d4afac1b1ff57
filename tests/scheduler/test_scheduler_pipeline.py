"""What the scheduler does around its cycles (real nats-server): following the state stream,
podgroup statuses written in the background, garbage collected between cycles."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import weakref

from busched.agent import fleet_nodes
from busched.api.objects import ClusterSpec, JobSpec, QueueSpec, TaskSpec
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.apply import apply_cluster
from busched.scheduler import Scheduler, SchedulerSettings
from busched.scheduler.memory import YOUNG_MIN, CollectorPolicy
from tests.nats_fixture import FAST, wait_until


def jobs(n: int, prefix: str = "j") -> ClusterSpec:
    return ClusterSpec(queues=[QueueSpec(name="default")],
                       jobs=[JobSpec(name=f"{prefix}{i}", namespace="p", min_member=1) for i in range(n)],
                       tasks=[TaskSpec(name=f"{prefix}{i}-0", namespace="p", job=f"{prefix}{i}", requests={"cpu": "1"})
                              for i in range(n)])


async def test_podgroup_statuses_wait_out_the_interval_and_are_written_once_each(harness):
    bus = await harness.bus()
    await bus.ensure_streams()
    written: list[m.PodGroupStatus] = []
    await bus.subscribe(f"{S.STATE_PREFIX}.podgroup.>", lambda s, d: written.append(m.decode(d)))
    await bus.flush()
    agent = await harness.agent(fleet_nodes(2, cpu="4", memory="8Gi"))
    now = [0.0]  # the scheduler's clock stands still unless the test moves it
    settings = SchedulerSettings(**{**FAST, "status_interval": 5.0, "heartbeat_timeout": 3600.0, "bind_lease": 3600.0})
    sched = Scheduler(await harness.bus(), None, settings, clock=lambda: now[0])
    await sched.start(timeout=10)
    try:
        await wait_until(lambda: sum(lv.state == "alive" for lv in sched.live.values()) == 2, what="agents alive")
        await apply_cluster(bus, jobs(3))
        await wait_until(lambda: len(sched.specs["job"]) == 3, what="jobs known")

        async def running() -> bool:
            await sched.run_once()
            return all(sched.task_status(f"p/j{i}-0") == "Running" for i in range(3)) and all(
                sched.pg_status.get(f"p/j{i}") is not None and sched.pg_status[f"p/j{i}"].phase == "Running"
                for i in range(3))

        await wait_until(running, timeout=30, what="every job Running")
        # a barrier, not a pause: whatever the scheduler has published has reached the server (its flush), and
        # the server has delivered it to `written` before answering our flush; the status writer itself only moves
        # with the scheduler's clock, which stands still
        await sched.bus.flush()
        await bus.flush()
        # the clock has not moved: every change so far waits, one status per job, the latest
        assert written == []
        assert {k: st.version for k, st in sched.statuses.waiting.items()} == {
            S.podgroup_subject(k): st.version for k, st in sched.pg_status.items()}
        assert all(st.phase == "Running" for st in sched.statuses.waiting.values())
        now[0] += 5.0
        await sched.run_once()
        await wait_until(lambda: len(written) == 3, what="the waiting statuses written")
        assert {f"{st.namespace}/{st.name}": st.version for st in written} == {
            k: st.version for k, st in sched.pg_status.items()}
        assert not sched.statuses.waiting
    finally:
        await sched.stop()
    assert agent.running()


async def test_stop_writes_the_statuses_still_waiting(harness):
    bus = await harness.bus()
    await bus.ensure_streams()
    sched = Scheduler(await harness.bus(), None, SchedulerSettings(**{**FAST, "status_interval": 3600.0}))
    await sched.start(timeout=10)
    st = m.PodGroupStatus(version=7, namespace="p", name="x", phase="Inqueue")
    sched.statuses.waiting[S.podgroup_subject("p/x")] = st
    await sched.stop()
    got = await bus.read_state(S.podgroup_subject("p/x"))
    assert [m.decode(d) for _, d in got] == [st]


async def test_a_caught_up_scheduler_does_not_read_its_own_records_back(harness):
    bus = await harness.bus()
    await bus.ensure_streams()
    seen: list[str] = []  # every state message, as a core subscriber sees them
    await bus.subscribe(f"{S.STATE_PREFIX}.>", lambda s, d: seen.append(s))
    await bus.flush()
    await harness.agent(fleet_nodes(2, cpu="4", memory="8Gi"))
    sched = await harness.scheduler()
    assert sched.watch.subjects == S.followed_subjects()
    await apply_cluster(bus, jobs(4, "r"))
    await wait_until(lambda: all(sched.task_status(f"p/r{i}-0") == "Running" for i in range(4)),
                     timeout=30, what="all Running")
    own = [s for s in seen if S.parse_state_subject(s)[0] in ("binding", "podgroup")]
    assert len([s for s in own if ".binding." in s]) == 4  # written (write-ahead) ...
    others = [s for s in seen if S.parse_state_subject(s)[0] in S.FOLLOWED_KINDS]
    # ... but the watch handled exactly the others' messages
    await wait_until(lambda: sched.watch.count == len(others), timeout=30, what="every other message handled")
    # a barrier, not a pause: the watch reads the stream in order, so once a queue applied after everything is
    # known, any of our own records read back would have been handled (and counted) before it
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="barrier")]))
    await wait_until(lambda: "barrier" in sched.specs["queue"], what="the barrier queue")
    assert sched.watch.count == len(others) + 1


def test_collector_policy_frees_the_cycles_garbage_and_gives_the_collector_back():
    was = gc.isenabled()
    gc.enable()
    try:
        p = CollectorPolicy()
        p.after_cycle()  # inactive: nothing
        assert p.young == 0 and p.full == 0
        p.enter()
        assert not gc.isenabled() and gc.get_freeze_count() > 0
        frozen = gc.get_freeze_count()

        class Node:
            pass

        def garbage() -> weakref.ref:
            first = prev = Node()
            for _ in range(YOUNG_MIN * 2):
                n = Node()
                n.prev, prev.next = prev, n
                prev = n
            prev.next = first  # one big reference cycle
            return weakref.ref(first)

        ref = garbage()
        assert ref() is not None  # unreachable, but only a collection frees a cycle
        p.after_cycle()
        assert ref() is None and p.young + p.full == 1
        assert gc.get_freeze_count() >= frozen  # the survivors moved out of the collector's way
        keep = [garbage() for _ in range(0)]  # noqa: F841
        p.exit()
        assert gc.isenabled() and gc.get_freeze_count() == 0
        gc.disable()
        p2 = CollectorPolicy()
        p2.enter()
        p2.exit()
        assert not gc.isenabled()  # what it found is what it leaves
    finally:
        gc.unfreeze()
        if was:
            gc.enable()
        else:
            gc.disable()


async def test_run_forever_manages_the_collector_while_it_runs(harness):
    assert gc.isenabled()
    sched = Scheduler(await harness.bus(), None, SchedulerSettings(**FAST))
    await sched.start(timeout=10)
    loop = asyncio.create_task(sched.run_forever())
    try:
        await wait_until(lambda: sched.cycle >= 2, what="two cycles")
        assert sched.collector.active and not gc.isenabled()
    finally:
        await sched.stop()
        await asyncio.wait_for(loop, 10)
    assert not sched.collector.active and gc.isenabled() and gc.get_freeze_count() == 0


async def start_recording(harness, **settings):  # noqa: ANN001, ANN201, F811
    """A scheduler running for ever with ``settings`` over FAST, every cycle's report kept."""
    sched = Scheduler(await harness.bus(), None, SchedulerSettings(**{**FAST, **settings}))
    reports: list = []
    run_once = sched.run_once

    async def recording(**kw):  # noqa: ANN003, ANN202
        r = await run_once(**kw)
        reports.append(r)
        return r

    sched.run_once = recording
    await sched.start(timeout=10)
    harness._schedulers.append(sched)
    harness._loops.append(asyncio.create_task(sched.run_forever()))
    return sched, reports


async def test_new_work_starts_a_cycle_without_waiting_for_the_period(harness):
    await harness.agent(fleet_nodes(2, cpu="4", memory="8Gi"))
    sched, reports = await start_recording(harness, period=3600.0)
    await wait_until(lambda: sum(lv.state == "alive" for lv in sched.live.values()) == 2, what="agents alive")
    await apply_cluster(await harness.bus(), jobs(3, "n"))
    await wait_until(lambda: all(sched.task_status(f"p/n{i}-0") == "Running" for i in range(3)),
                     timeout=30, what="all Running")
    # the cycle that placed them may still be finishing (its tail yields to the event loop, where the agents'
    # answers can arrive first): count from once it has returned
    await wait_until(lambda: sum(len(r.binds) for r in reports) == 3, what="the placing cycle returned")
    # the agents' Running reports are not new work: no cycle follows them within the hour's period
    n = len(reports)
    # kept: the trigger that would start a cycle waits out its settle time on time.monotonic and the event loop's
    # timer, not on the injected clock, so only real time shows that none follows
    await asyncio.sleep(0.3)
    assert len(reports) == n
    # a finished task is: its resources are free
    await harness._agents[0].report_phase(*next((node, k) for node, held in harness._agents[0].running().items()
                                                for k in held), "Succeeded")
    await wait_until(lambda: len(reports) > n, what="a cycle after a task finished")


async def test_without_the_trigger_new_work_waits_for_the_period(harness):
    await harness.agent(fleet_nodes(2, cpu="4", memory="8Gi"))
    sched, reports = await start_recording(harness, period=3600.0, trigger=False)
    await wait_until(lambda: reports, what="the first cycle")
    await apply_cluster(await harness.bus(), jobs(3, "w"))
    await wait_until(lambda: len(sched.specs["job"]) == 3, what="jobs known")
    await asyncio.sleep(0.3)  # kept: a wrongly triggered cycle would come after the real-time settle (as above)
    assert len(reports) == 1 and sched.task_status("p/w0-0") == "Pending"


async def test_a_burst_of_work_is_scheduled_in_one_cycle(harness):
    await harness.agent(fleet_nodes(4, cpu="16", memory="32Gi"))
    sched, reports = await start_recording(harness, period=3600.0)
    await wait_until(lambda: sum(lv.state == "alive" for lv in sched.live.values()) == 4, what="agents alive")
    await apply_cluster(await harness.bus(), jobs(40, "b"))  # 81 objects, published together
    await wait_until(lambda: all(sched.task_status(f"p/b{i}-0") == "Running" for i in range(40)),
                     timeout=30, what="all Running")
    # the placing cycle may still be finishing when its tasks already run (as above): count once it returned
    await wait_until(lambda: sum(len(r.binds) for r in reports) >= 40, what="the placing cycle returned")
    assert [len(r.binds) for r in reports if r.binds] == [40]


async def test_write_ahead_in_chunks_records_every_bind_before_its_decision(harness, monkeypatch):
    from busched.scheduler import bindings

    monkeypatch.setattr(bindings, "WRITE_AHEAD_CHUNK", 4)
    bus = await harness.bus()
    await bus.ensure_streams()
    wire: list[tuple[str, str]] = []  # (what, task) in the order the server handled them

    def seen(subject: str, data: bytes) -> None:
        msg = m.decode(data)
        if isinstance(msg, m.BindingRecord):
            wire.append(("record", f"{msg.namespace}/{msg.name}"))
        elif isinstance(msg, m.BindDecision):
            wire.append(("decision", f"{msg.task.namespace}/{msg.task.name}"))

    await bus.subscribe(f"{S.STATE_PREFIX}.binding.>", seen)
    await bus.subscribe(f"{S.DECISION_PREFIX}.>", seen)
    await bus.flush()
    await harness.agent(fleet_nodes(3, cpu="8", memory="16Gi"))
    sched, reports = await start_recording(harness, period=3600.0)
    await wait_until(lambda: sum(lv.state == "alive" for lv in sched.live.values()) == 3, what="agents alive")
    await apply_cluster(bus, jobs(18, "c"))
    await wait_until(lambda: all(sched.task_status(f"p/c{i}-0") == "Running" for i in range(18)),
                     timeout=30, what="all Running")
    await bus.flush()
    first = {}
    for i, (what, task) in enumerate(wire):
        first.setdefault((what, task), i)
    assert {t for w, t in first if w == "decision"} == {f"p/c{i}-0" for i in range(18)}
    assert all(first[("record", t)] < first[("decision", t)] for w, t in first if w == "decision")
    # the placing cycle may still be finishing when its tasks already run: count once it returned
    await wait_until(lambda: sum(len(r.binds) for r in reports) >= 18, what="the placing cycle returned")
    assert sum(len(r.binds) for r in reports) == 18


def test_collector_policies_of_two_schedulers_give_the_collector_back_once_both_left():
    was = gc.isenabled()
    gc.enable()
    try:
        a, b = CollectorPolicy(), CollectorPolicy()
        a.enter()
        b.enter()
        a.exit()
        assert not gc.isenabled()  # b still runs
        b.exit()
        assert gc.isenabled() and gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()
        if not was:
            gc.disable()


async def test_binds_go_out_before_the_session_closes(harness):
    """Decisions are final once the actions have run (Volcano binds as allocate commits): the binding
    records are stored and the decisions sent before the session recomputes every job's status."""
    from busched.framework.config import DEFAULT_CONFIG, PluginOption, Tier, load_config
    from busched.plugins import PLUGINS

    bus = await harness.bus()
    await bus.ensure_streams()
    seen_at_close: list[dict[str, bool]] = []
    sched: list[Scheduler] = []

    class Witness:
        def __init__(self, args: object) -> None:
            pass

        def on_session_open(self, ssn: object) -> None:
            pass

        def on_session_close(self, ssn: object) -> None:
            seen_at_close.append({k: b.published for k, b in sched[0].bindings.items()})

    base = load_config(DEFAULT_CONFIG)
    config = dataclasses.replace(base, tiers=base.tiers + (Tier(plugins=(PluginOption("witness"),)),))
    s = Scheduler(await harness.bus(), config, SchedulerSettings(**{**FAST, "require_heartbeat": False}),
                  plugins=PLUGINS.with_entries({"witness": Witness}))
    sched.append(s)
    await s.start(timeout=10)
    try:
        await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi"))
        await apply_cluster(bus, jobs(2))
        await wait_until(lambda: len(s.specs["job"]) == 2 and len(s.specs["node"]) == 1, what="jobs and node known")
        report = await s.run_once(force=True)
        assert len(report.binds) == 2
        assert seen_at_close[-1] == {"p/j0-0": True, "p/j1-0": True}
    finally:
        await s.stop()


async def test_a_query_between_the_cycles_snapshot_and_its_session_does_not_fail_the_cycle(harness):
    """`busched get nodes` (or the status page) answered while the cycle's session is being opened in its
    thread: the query's snapshot is a private copy, so the objects lent to the cycle stay the cycle's (the
    query's snapshot used to lend them again, and the cycle failed: "snapshot superseded")."""
    bus = await harness.bus()
    await bus.ensure_streams()
    await harness.agent(fleet_nodes(2, cpu="4", memory="8Gi"))
    sched = Scheduler(await harness.bus(), None, SchedulerSettings(**FAST))
    await sched.start(timeout=10)
    try:
        await wait_until(lambda: sum(lv.state == "alive" for lv in sched.live.values()) == 2, what="agents alive")
        await apply_cluster(bus, jobs(3))
        await wait_until(lambda: len(sched.specs["task"]) == 3, what="tasks known")
        original = sched._in_cycle
        answered: list[list] = []

        async def query_first(fn, *args, **kw):
            if fn.__name__ == "run_actions":
                answered.append(sched.queries.view("nodes"))
            return await original(fn, *args, **kw)

        sched._in_cycle = query_first
        report = await sched.run_once(force=True)
        assert answered and len(answered[0]) == 2
        assert not report.error, report.error
        assert len(report.binds) == 3
    finally:
        await sched.stop()
