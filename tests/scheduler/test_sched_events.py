"""Scheduling events over a real nats-server (issue 14): what a cycle did and could not do, as series on
the events stream (busched.scheduler.sched_events, busched.bus.events)."""

from __future__ import annotations

from typing import Any

from busched.agent import fleet_nodes
from busched.api.objects import ClusterSpec, JobSpec, PriorityClassSpec, QueueSpec, TaskSpec
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.apply import apply_cluster
from busched.scheduler.sched_events import GANG_READY, EventSettings
from tests.bus.test_bus_evict import WITH_PREEMPT, job
from tests.nats_fixture import FakeClock, held_by_node, wait_until


async def held_events(bus: Any, kind: str = "", key: str = "") -> list[m.Event]:
    """Every series the events stream holds (on one object, with ``kind`` and ``key``), its latest state each."""
    got: dict[tuple[str, ...], m.Event] = {}

    def keep(ev: m.Event) -> None:
        o = ev.involved_object
        got[(o.kind, o.namespace, o.name, ev.series)] = ev

    w = await bus.watch_events(keep, subject=S.events_filter(kind, key))
    try:
        await wait_until(w.caught_up.is_set, timeout=5, what="the events stream read")
    finally:
        await w.stop()
    return list(got.values())


async def alive(sched: Any, nodes: int) -> None:
    """Wait until ``sched`` has heard every node's agent: a cycle before would find no node (another message)."""
    await wait_until(lambda: sum(lv.state == "alive" for lv in sched.live.values()) == nodes, what="agents alive")


def one(events: list[m.Event], reason: str) -> m.Event:
    found = [e for e in events if e.reason == reason]
    assert len(found) == 1, f"{len(found)} {reason} series in {events}"
    return found[0]


def fit_and_misfit() -> ClusterSpec:
    return ClusterSpec(queues=[QueueSpec(name="default")],
                       jobs=[JobSpec(name="a", namespace="t", min_member=1), JobSpec(name="b", namespace="t",
                                                                                      min_member=1)],
                       tasks=[TaskSpec(name="a-0", namespace="t", job="a", requests={"cpu": "1"}),
                              TaskSpec(name="b-0", namespace="t", job="b", requests={"cpu": "5"})])


async def test_scheduled_and_failed_scheduling_one_series_whose_count_grows(harness):
    wall = FakeClock(1_700_000_000.0)
    sched = await harness.scheduler(run=False, wall_clock=wall, events=EventSettings(interval=5.0))
    agent = await harness.agent(fleet_nodes(2, cpu="4", memory="8Gi"))
    bus = await harness.bus()
    await alive(sched, 2)
    await apply_cluster(bus, fit_and_misfit())

    async def placed() -> bool:
        await sched.run_once(force=True)
        return any("t/a-0" in held for held in held_by_node(agent).values())
    await wait_until(placed, what="t/a-0 placed")
    first = wall()
    node = next(n for n, held in held_by_node(agent).items() if "t/a-0" in held)

    async def stream_has(kind: str, key: str, reason: str) -> list[m.Event]:
        evs = await held_events(bus, kind, key)
        return evs if any(e.reason == reason for e in evs) else []
    a = one(await wait_until(lambda: stream_has("task", "t/a-0", "Scheduled"), what="Scheduled"), "Scheduled")
    assert (a.event_type, a.message, a.count) == ("Normal", f"Successfully assigned t/a-0 to {node}", 1)
    assert a.involved_object == m.EventObject(kind="task", namespace="t", name="a-0")
    assert a.source.component == "busched-scheduler" and a.source.instance == sched.boot
    b = one(await wait_until(lambda: stream_has("task", "t/b-0", "FailedScheduling"), what="FailedScheduling"),
            "FailedScheduling")
    assert b.event_type == "Warning"
    assert b.message == "0/2 nodes are unavailable: 2 Insufficient cpu.", b.message  # the aggregated node reasons
    pg = one(await held_events(bus, "job", "t/b"), "Unschedulable")
    assert pg.event_type == "Warning" and pg.message.startswith("1/1 tasks in gang unschedulable: ")
    assert "0/2 nodes are unavailable: 2 Insufficient cpu." in pg.message

    # more cycles see the same: one series, its count growing in memory, on the stream at most every 5 s
    seen_b = [s for k, s in sched.sched_events.series.items() if k[:2] == ("task", "t/b-0")][0]
    before = seen_b.count
    for _ in range(3):
        wall.advance(1.0)
        await sched.run_once(force=True)
    assert seen_b.count == before + 3
    await sched.sched_events.writer  # whatever the cycles started publishing is out
    b = one(await held_events(bus, "task", "t/b-0"), "FailedScheduling")
    assert b.count < seen_b.count  # not republished within the interval
    wall.advance(5.0)
    await sched.run_once(force=True)
    await sched.sched_events.writer
    b = one(await held_events(bus, "task", "t/b-0"), "FailedScheduling")  # still one series
    assert b.count == seen_b.count == before + 4
    assert b.last_timestamp == wall() and b.first_timestamp <= first
    # the stream keeps one message per series: many cycles, few messages
    info = await bus.js.stream_info(S.EVENT_STREAM, subjects_filter=S.events_filter("task", "t/b-0"))
    assert info.state.subjects and set(info.state.subjects.values()) == {1}
    assert sched.metrics.sched_events.labels("FailedScheduling")._value.get() >= before + 4


async def test_preempted_names_the_preemptor_and_the_podgroup_goes_unschedulable_then_scheduled(harness):
    await harness.scheduler(WITH_PREEMPT)
    agent = await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi"))
    bus = await harness.bus()
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="default")], priority_classes=[
        PriorityClassSpec(name="low", value=10), PriorityClassSpec(name="high", value=1000)]))
    await apply_cluster(bus, job("low", 4, "low"))
    await wait_until(lambda: len(held_by_node(agent)["node-00"]) == 4, what="low fills the node")
    await apply_cluster(bus, job("high", 2, "high", min_member=2))
    await wait_until(lambda: sum(k.startswith("p/high-") for k in held_by_node(agent)["node-00"]) == 2,
                     what="high running after preemption")

    async def of_job(name: str) -> list[m.Event]:
        evs = await held_events(bus, "job", name)
        return evs if {e.reason for e in evs} >= {"Unschedulable", "Scheduled"} else []
    pg = await wait_until(lambda: of_job("p/high"), what="the podgroup's events")
    unsched, ready = one(pg, "Unschedulable"), one(pg, "Scheduled")
    assert unsched.event_type == "Warning" and "tasks in gang unschedulable" in unsched.message
    assert (ready.event_type, ready.message) == ("Normal", GANG_READY)
    assert ready.first_timestamp >= unsched.first_timestamp

    evicted = sorted(e[2] for e in agent.history if e[0] == "evict")
    tasks = await held_events(bus, "task")
    preempted = sorted((f"{e.involved_object.namespace}/{e.involved_object.name}", e) for e in tasks
                       if e.reason == "Preempted")
    assert [k for k, _ in preempted] == evicted
    for _, e in preempted:
        assert e.event_type == "Warning"
        assert e.message in ("Preempted by p/high-0 on node node-00", "Preempted by p/high-1 on node node-00")
    scheduled = {f"{e.involved_object.namespace}/{e.involved_object.name}" for e in tasks if e.reason == "Scheduled"}
    assert {"p/high-0", "p/high-1"} <= scheduled


async def test_an_overused_queue_with_pending_work_is_an_event(harness):
    sched = await harness.scheduler(run=False)
    # (pods are a dimension of the deserved share too: a node of 4 pods, so that 4 running tasks can be all of it)
    agent = await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi", pods=4))
    bus = await harness.bus()
    small = {"cpu": "1", "memory": "2Gi"}
    await apply_cluster(bus, ClusterSpec(
        queues=[QueueSpec(name="q1"), QueueSpec(name="q2")],
        jobs=[JobSpec(name="w", namespace="t", queue="q1", min_member=1)],
        tasks=[TaskSpec(name=f"w-{i}", namespace="t", job="w", requests=small) for i in range(6)]))

    async def full() -> bool:
        await sched.run_once(force=True)
        return len(held_by_node(agent)["node-00"]) == 4
    await wait_until(full, what="the node full, two tasks of q1 pending")
    # q2 asks for its share: q1 holds more than it deserves now, with work of its own still pending
    await apply_cluster(bus, ClusterSpec(jobs=[JobSpec(name="v", namespace="t", queue="q2", min_member=1)], tasks=[
        TaskSpec(name="v-0", namespace="t", job="v", requests={"cpu": "2", "memory": "4Gi"})]))
    await wait_until(lambda: "t/v-0" in sched.specs["task"], what="q2's task known")

    async def overused() -> list[m.Event]:
        await sched.run_once(force=True)
        return [e for e in await held_events(bus, "queue") if e.reason == "Overused"]
    evs = await wait_until(overused, what="the Overused event")
    assert [e.involved_object for e in evs] == [m.EventObject(kind="queue", name="q1")]
    assert evs[0].event_type == "Warning"
    assert evs[0].message == ("queue q1 is overused (its allocation reached its deserved share); "
                              "2 pending task(s) of its jobs wait")


WITH_RECLAIM = WITH_PREEMPT.replace("preempt", "reclaim")


async def test_evicted_names_the_reclaiming_queue(harness):
    await harness.scheduler(WITH_RECLAIM)
    agent = await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi"))
    bus = await harness.bus()
    small = {"cpu": "1", "memory": "2Gi"}
    await apply_cluster(bus, ClusterSpec(
        queues=[QueueSpec(name="q1"), QueueSpec(name="q2")],
        jobs=[JobSpec(name="w", namespace="t", queue="q1", min_member=1)],
        tasks=[TaskSpec(name=f"w-{i}", namespace="t", job="w", requests=small) for i in range(4)]))
    await wait_until(lambda: len(held_by_node(agent)["node-00"]) == 4, what="q1 fills the node")
    await apply_cluster(bus, ClusterSpec(jobs=[JobSpec(name="v", namespace="t", queue="q2", min_member=2)], tasks=[
        TaskSpec(name=f"v-{i}", namespace="t", job="v", requests=small) for i in range(2)]))
    await wait_until(lambda: sum(k.startswith("t/v-") for k in held_by_node(agent)["node-00"]) == 2,
                     what="q2 running after reclaim")

    evicted = sorted(e[2] for e in agent.history if e[0] == "evict")
    assert len(evicted) == 2

    async def evictions() -> list[m.Event]:
        evs = [e for e in await held_events(bus, "task") if e.reason == "Evicted"]
        return evs if len(evs) == len(evicted) else []
    evs = await wait_until(evictions, what="the Evicted events")
    assert sorted(f"{e.involved_object.namespace}/{e.involved_object.name}" for e in evs) == evicted
    for e in evs:
        assert e.event_type == "Warning"
        assert e.message in (f"Evicted to reclaim resources for queue q2 (t/v-{i} on node node-00)" for i in (0, 1))


async def test_stopping_publishes_the_latest_counts(harness):
    wall = FakeClock(1_700_000_000.0)
    sched = await harness.scheduler(run=False, wall_clock=wall, events=EventSettings(interval=3600.0))
    await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi"))
    bus = await harness.bus()
    await alive(sched, 1)
    await apply_cluster(bus, fit_and_misfit())

    async def failing() -> bool:
        await sched.run_once(force=True)
        return any(k[:2] == ("task", "t/b-0") for k in sched.sched_events.series)
    await wait_until(failing, what="t/b-0 failing to fit")
    for _ in range(3):
        wall.advance(1.0)
        await sched.run_once(force=True)
    count = next(s.count for k, s in sched.sched_events.series.items() if k[:2] == ("task", "t/b-0"))
    assert count >= 4
    await sched.stop()  # within the hour: only the way out publishes the grown count
    b = one(await held_events(bus, "task", "t/b-0"), "FailedScheduling")
    assert (b.count, b.last_timestamp) == (count, wall())


async def test_a_restarted_scheduler_goes_on_counting_a_series(harness):
    wall = FakeClock(1_700_000_000.0)
    first = await harness.scheduler(run=False, wall_clock=wall)
    await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi"))
    bus = await harness.bus()
    await alive(first, 1)
    await apply_cluster(bus, fit_and_misfit())

    async def failing(sched: Any) -> bool:
        await sched.run_once(force=True)
        return any(k[:2] == ("task", "t/b-0") for k in sched.sched_events.series)
    await wait_until(lambda: failing(first), what="t/b-0 failing to fit")
    wall.advance(1.0)
    await first.run_once(force=True)
    await first.stop()
    before = one(await held_events(bus, "task", "t/b-0"), "FailedScheduling")
    assert before.count >= 2 and before.source.instance == first.boot

    wall.advance(60.0)
    second = await harness.scheduler(run=False, wall_clock=wall)  # another boot, nothing in memory
    await alive(second, 1)
    await wait_until(lambda: failing(second), what="t/b-0 failing to fit again")
    await second.sched_events.writer
    after = one(await held_events(bus, "task", "t/b-0"), "FailedScheduling")
    assert after.source.instance == second.boot != first.boot
    assert (after.count, after.first_timestamp) == (before.count + 1, before.first_timestamp)
    assert after.last_timestamp == wall()
