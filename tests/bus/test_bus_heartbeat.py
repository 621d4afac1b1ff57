"""An agent that stops heartbeating has its tasks rescheduled (real nats-server)."""

from __future__ import annotations

from busched.agent import fleet_nodes
from busched.api.objects import ClusterSpec, JobSpec, QueueSpec, TaskSpec
from busched.bus.apply import apply_cluster
from tests.nats_fixture import assert_no_overcommit, held_by_node, wait_until

WORK = ClusterSpec(
    queues=[QueueSpec(name="default")],
    jobs=[JobSpec(name="gang", namespace="w", min_member=3), JobSpec(name="solo", namespace="w", min_member=1)],
    tasks=[TaskSpec(name=f"gang-{i}", namespace="w", job="gang", requests={"cpu": "1", "memory": "1Gi"})
           for i in range(3)] + [TaskSpec(name="solo-0", namespace="w", job="solo", requests={"cpu": "1"})])
KEYS = {"w/gang-0", "w/gang-1", "w/gang-2", "w/solo-0"}


async def test_tasks_of_an_agent_that_stops_heartbeating_are_rescheduled(harness):
    sched = await harness.scheduler()  # heartbeat timeout 1 s, heartbeats every 0.1 s
    doomed = await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi", prefix="doomed"))
    await apply_cluster(await harness.bus(), WORK)
    await wait_until(lambda: set(held_by_node(doomed)["doomed-00"]) == KEYS, what="all four on the doomed node")

    spare = await harness.agent(fleet_nodes(2, cpu="2", memory="4Gi", prefix="spare"))
    doomed.pause_heartbeats()  # alive on the bus, silent: the scheduler must give its tasks up

    def moved() -> bool:
        held = held_by_node(spare)
        return {k for tasks in held.values() for k in tasks} == KEYS
    await wait_until(moved, timeout=10, what="all four tasks running on the spare nodes")
    assert_no_overcommit(spare)
    await wait_until(lambda: {t["status"] for t in sched.view("tasks")} == {"Running"}, what="results seen")
    views = {f"{t['namespace']}/{t['name']}": t for t in sched.view("tasks")}
    for key in KEYS:
        v = views[key]
        assert v["status"] == "Running" and v["node"].startswith("spare-") and v["attempt"] == 2, v
        assert v["reason"].startswith("node doomed-00 lost: no heartbeat"), v
    assert {n["name"]: n["state"] for n in sched.view("nodes")}["doomed-00"] == "lost"

    # when it speaks again, whatever it still runs from before is evicted, not double-run
    doomed.pause_heartbeats(False)
    await wait_until(lambda: held_by_node(doomed)["doomed-00"] == {}, what="stale tasks evicted from doomed-00")
    assert {n["name"]: n["state"] for n in sched.view("nodes")}["doomed-00"] == "alive"
    assert {k for tasks in held_by_node(spare).values() for k in tasks} == KEYS
