"""Evictions end to end: a preemption decided by the cycle, and `busched delete` of running tasks."""

from __future__ import annotations

import asyncio

import yaml

from busched.agent import fleet_nodes
from busched.api.objects import ClusterSpec, JobSpec, PriorityClassSpec, QueueSpec, TaskSpec
from busched.bus.apply import apply_cluster
from busched.cli.main import main
from busched.framework.config import DEFAULT_CONFIG
from tests.nats_fixture import assert_no_overcommit, held_by_node, wait_until

WITH_PREEMPT = DEFAULT_CONFIG.replace('"enqueue, allocate, backfill"', '"enqueue, allocate, preempt, backfill"')


def job(name: str, n: int, pc: str, min_member: int = 1) -> ClusterSpec:
    return ClusterSpec(jobs=[JobSpec(name=name, namespace="p", min_member=min_member, priority_class_name=pc)],
                       tasks=[TaskSpec(name=f"{name}-{i}", namespace="p", job=name, priority_class_name=pc,
                                       requests={"cpu": "1"}) for i in range(n)])


async def test_preemption_evicts_on_the_agent_and_the_victims_go_back_to_pending(harness):
    sched = await harness.scheduler(WITH_PREEMPT)
    agent = await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi"))
    bus = await harness.bus()
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="default")], priority_classes=[
        PriorityClassSpec(name="low", value=10), PriorityClassSpec(name="high", value=1000)]))
    await apply_cluster(bus, job("low", 4, "low"))
    await wait_until(lambda: len(held_by_node(agent)["node-00"]) == 4, what="low fills the node")
    await apply_cluster(bus, job("high", 2, "high", min_member=2))

    await wait_until(lambda: sum(k.startswith("p/high-") for k in held_by_node(agent)["node-00"]) == 2,
                     what="high running after preemption")
    evicted = [e[2] for e in agent.history if e[0] == "evict"]
    assert len(evicted) == 2 and all(k.startswith("p/low-") for k in evicted)
    views = {f"p/{t['name']}": t for t in sched.view("tasks")}
    for key in evicted:
        assert views[key]["status"] == "Pending" and views[key]["reason"] == "evicted from node-00: preempt"
    assert_no_overcommit(agent)
    assert sched.metrics.action_evicts._value.get() == 2


async def test_busched_delete_stops_running_tasks_and_forgets_them(harness, tmp_path):
    sched = await harness.scheduler()
    agent = await harness.agent(fleet_nodes(2))
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump({
        "queues": [{"name": "default"}],
        "jobs": [{"name": "j", "namespace": "d", "minMember": 2}],
        "tasks": [{"name": f"j-{i}", "namespace": "d", "job": "j", "requests": {"cpu": "1"}} for i in range(2)]}))
    assert await asyncio.to_thread(main, ["apply", "-f", str(f), "--nats", harness.url]) == 0
    await wait_until(lambda: sum(len(t) for t in held_by_node(agent).values()) == 2, what="running")
    only_tasks = tmp_path / "tasks.yaml"
    only_tasks.write_text(yaml.safe_dump({"tasks": yaml.safe_load(f.read_text())["tasks"]}))
    assert await asyncio.to_thread(main, ["delete", "-f", str(only_tasks), "--nats", harness.url]) == 0
    await wait_until(lambda: sum(len(t) for t in held_by_node(agent).values()) == 0, what="stopped on the agent")
    await wait_until(lambda: not sched.view("tasks"), what="forgotten by the scheduler")
    assert [j["name"] for j in sched.view("jobs")] == ["j"]
