"""Agents refusing binds, and binds that never reach an agent (real nats-server)."""

from __future__ import annotations

import asyncio
import time

from busched.agent import Reject, fleet_nodes
from busched.api.objects import ClusterSpec, JobSpec, QueueSpec, TaskSpec
from busched.bus import subjects as S
from busched.bus.apply import apply_cluster
from tests.nats_fixture import FakeClock, assert_no_overcommit, cycle_after, held_by_node, wait_until


def one_task(name: str = "solo", cpu: str = "1") -> ClusterSpec:
    return ClusterSpec(queues=[QueueSpec(name="default")],
                       jobs=[JobSpec(name=name, namespace="t", min_member=1)],
                       tasks=[TaskSpec(name=f"{name}-0", namespace="t", job=name, requests={"cpu": cpu})])


def task_view(sched, key: str) -> dict:  # noqa: ANN001
    return next((t for t in sched.view("tasks") if f"{t['namespace']}/{t['name']}" == key), {})


async def test_rejected_bind_is_resynced_and_placed_on_another_node(harness):
    sched = await harness.scheduler()
    first: list[tuple[str, float]] = []

    def on_bind(node: str, bind) -> str | None:  # noqa: ANN001
        first.append((node, time.monotonic()))
        if len(first) == 1:
            raise Reject("disk full")
        return None

    agent = await harness.agent(fleet_nodes(3, cpu="4", memory="8Gi"), on_bind=on_bind)
    await apply_cluster(await harness.bus(), one_task())

    await wait_until(lambda: "t/solo-0" in {k for t in held_by_node(agent).values() for k in t},
                     what="the task running somewhere")
    refused = first[0][0]
    where = {n for n, tasks in held_by_node(agent).items() if "t/solo-0" in tasks}
    assert where and refused not in where, (refused, where)
    assert held_by_node(agent)[where.pop()]["t/solo-0"] == 2  # the second attempt
    assert ("reject", refused, "t/solo-0", 1) in agent.history
    await wait_until(lambda: task_view(sched, "t/solo-0").get("status") == "Running", what="Running")
    v = task_view(sched, "t/solo-0")
    assert v["attempt"] == 2
    assert v["reason"] == f"rejected by {refused}: disk full"
    # the retry waited out the backoff (0.1 s in these tests)
    assert len(first) == 2 and first[1][1] - first[0][1] >= 0.1
    assert sched.metrics.bind_results.labels("rejected")._value.get() == 1
    assert_no_overcommit(agent)


async def test_bind_never_received_is_released_after_lease_and_its_decision_deleted(harness):
    sched = await harness.scheduler(bind_lease=0.5)
    mute = await harness.agent(fleet_nodes(1, prefix="mute"), consume=False)  # heartbeats, never reads binds
    await apply_cluster(await harness.bus(), one_task())
    await wait_until(lambda: task_view(sched, "t/solo-0").get("status") == "Binding", what="bound to the mute node")
    assert task_view(sched, "t/solo-0")["node"] == "mute-00"
    good = await harness.agent(fleet_nodes(1, prefix="good"))

    await wait_until(lambda: held_by_node(good)["good-00"], timeout=10, what="placed on the good node")
    v = task_view(sched, "t/solo-0")
    assert v["attempt"] == 2 and v["reason"].startswith("bind to mute-00 not received within")
    # the undelivered decision was deleted, so the mute node can never start it late
    bus = await harness.bus()
    assert await bus.last_decision(S.decision_subject("mute-00", "bind", "t/solo-0")) is None
    assert held_by_node(mute) == {"mute-00": {}}


async def test_agent_that_holds_a_bind_keeps_it_while_alive_however_slow(harness):
    clock = FakeClock()  # the leases pass when the test moves the scheduler's clock; cycles run when it asks
    sched = await harness.scheduler(bind_lease=0.3, clock=clock, run=False)
    release = asyncio.Event()

    async def slow(node: str, bind) -> None:  # noqa: ANN001
        await release.wait()  # holds the bind far longer than the lease, heartbeating all along

    agent = await harness.agent(fleet_nodes(2, prefix="slow"), on_bind=slow)
    await apply_cluster(await harness.bus(), one_task())

    async def status(want: str) -> bool:
        await sched.run_once()
        return task_view(sched, "t/solo-0").get("status") == want

    await wait_until(lambda: status("Binding"), what="Binding")
    node = task_view(sched, "t/solo-0")["node"]
    for _ in range(4):  # > 3 leases, a cycle after each: an unheard agent that is alive keeps the task
        await cycle_after(sched, clock, 0.3, heard=list(agent.nodes))
    v = task_view(sched, "t/solo-0")
    assert (v["status"], v["node"], v["attempt"]) == ("Binding", node, 1)
    release.set()
    await wait_until(lambda: status("Running"), what="Running")
    assert held_by_node(agent)[node] == {"t/solo-0": 1}
    assert sched.metrics.releases.labels("lease")._value.get() == 0
