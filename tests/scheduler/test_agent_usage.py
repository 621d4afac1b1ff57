"""Agents report their nodes' load and their tasks' start times; the usage and cdp plugins use them live.

Over a real nats-server: the simulated agent measures a node's load from its running tasks' requests
(`busched.agent.usage.RequestsMeter`) and says when each task started (``task.phase Running``'s
``startTime``); the scheduler keeps both in its cache (``NodeInfo.usage``, the task's start time), so the
usage plugin refuses a node over its threshold and cdp keeps a task that started moments ago from being
a victim.
"""

from __future__ import annotations

import time

from busched.agent import fleet_nodes
from busched.api.objects import ClusterSpec, JobSpec, NodeUsageSpec, PriorityClassSpec, QueueSpec, TaskSpec
from busched.api.timestamp import parse_time
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.apply import apply_cluster
from busched.framework.config import DEFAULT_CONFIG
from tests.nats_fixture import held_by_node, wait_until

USAGE = DEFAULT_CONFIG + """  - name: usage
    arguments:
      thresholds: {cpu: 80, mem: 80}
"""
CDP = DEFAULT_CONFIG.replace('"enqueue, allocate, backfill"', '"enqueue, allocate, preempt, backfill"').replace(
    "  - name: conformance\n", "  - name: conformance\n  - name: cdp\n")


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def job(name: str, cpu: str, *, pc: str = "", annotations: dict[str, str] | None = None) -> ClusterSpec:
    return ClusterSpec(jobs=[JobSpec(name=name, namespace="u", min_member=1, priority_class_name=pc)],
                       tasks=[TaskSpec(name=f"{name}-0", namespace="u", job=name, priority_class_name=pc,
                                       requests={"cpu": cpu, "memory": "1Gi"}, annotations=annotations or {})])


def status(sched, key: str) -> dict:  # noqa: ANN001
    return next((t for t in sched.view("tasks") if f"{t['namespace']}/{t['name']}" == key), {})


async def cycles(sched, n: int = 3) -> None:  # noqa: ANN001
    start = sched.cycle
    await wait_until(lambda: sched.cycle >= start + n, what=f"{n} cycles")


async def test_an_agents_reported_load_makes_the_usage_plugin_refuse_its_node(harness):
    sched = await harness.scheduler(USAGE)
    agent = await harness.agent(fleet_nodes(1, cpu="10", memory="100Gi"), usage_interval=0.2)
    bus = await harness.bus()
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="default")]))
    await apply_cluster(bus, job("big", "9"))
    await wait_until(lambda: "u/big-0" in held_by_node(agent)["node-00"], what="big running")
    # 9 of 10 cpus requested: the agent reports a 90% load, which reaches the cache
    await wait_until(lambda: (sched.cache.objects["node"]["node-00"].usage or NodeUsageSpec()).cpu.get("10m") == 90,
                     what="the load in the cache")
    usage = sched.cache.objects["node"]["node-00"].usage
    assert usage.memory == {"5m": 1.0, "10m": 1.0} and abs(parse_time(usage.time) - time.time()) < 60
    assert next(n for n in sched.view("nodes") if n["name"] == "node-00")["usage"]["cpu"]["10m"] == 90  # busched get

    await apply_cluster(bus, job("small", "1"))  # fits by requests (9 + 1 of 10), not by load
    await wait_until(lambda: status(sched, "u/small-0"), what="small applied")
    await cycles(sched)
    assert "u/small-0" not in held_by_node(agent)["node-00"]
    assert status(sched, "u/small-0")["status"] == "Pending"

    await agent.report_phase("node-00", "u/big-0", "Succeeded")  # the load drops with it
    await wait_until(lambda: "u/small-0" in held_by_node(agent)["node-00"], what="small placed once the load fell")


async def test_a_refused_or_older_load_is_not_kept(harness):
    sched = await harness.scheduler(run=False)
    bus = await harness.bus()
    now = time.time()

    async def beat(seq: int, usage: NodeUsageSpec) -> None:
        await bus.publish_core(S.heartbeat_subject("n1"), m.NodeHeartbeat(node="n1", boot="b", seq=seq,
                                                                        usage=usage))

    await beat(1, NodeUsageSpec(time=now, cpu={"10m": 50}))
    await wait_until(lambda: sched.liveness.live.get("n1") and sched.liveness.live["n1"].usage is not None,
                     what="the first load kept")
    refused = sched.metrics.events_rejected.labels("invalid", "heartbeat")._value.get()
    await beat(2, NodeUsageSpec(time="yesterday", cpu={"10m": 60}))  # not a time: refused, named
    await beat(3, NodeUsageSpec(time=now - 60, cpu={"10m": 70}))  # older than the one held: ignored
    await beat(4, NodeUsageSpec(time=now + 1, cpu={"10m": 40}))
    await wait_until(lambda: sched.liveness.live["n1"].usage.cpu == {"10m": 40}, what="the newest load kept")
    assert sched.metrics.events_rejected.labels("invalid", "heartbeat")._value.get() == refused + 1
    assert "heartbeat of node n1: usage.time" in sched.feed.last_refusal


async def test_cdp_protects_a_task_its_agent_reported_started_moments_ago(harness):
    clock = Clock(time.time())
    sched = await harness.scheduler(CDP, wall_clock=clock)
    agent = await harness.agent(fleet_nodes(1, cpu="2", memory="8Gi"))
    bus = await harness.bus()
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="default")], priority_classes=[
        PriorityClassSpec(name="low", value=10), PriorityClassSpec(name="high", value=1000)]))
    await apply_cluster(bus, job("low", "2", pc="low", annotations={"volcano.sh/cooldown-time": "10m"}))
    await wait_until(lambda: "u/low-0" in held_by_node(agent)["node-00"], what="low running")
    started = agent.nodes["node-00"].tasks["u/low-0"].start_time
    await wait_until(lambda: sched.cache.objects["task"]["u/low-0"].start_time == started,
                     what="the start time in the cache")

    await apply_cluster(bus, job("high", "2", pc="high"))
    await wait_until(lambda: status(sched, "u/high-0"), what="high applied")
    await cycles(sched, 5)
    assert not [e for e in agent.history if e[0] == "evict"]  # started moments ago: no victim
    assert "u/low-0" in held_by_node(agent)["node-00"]

    clock.t = started + 601  # the cooldown is over: preempt takes it
    await wait_until(lambda: "u/high-0" in held_by_node(agent)["node-00"], what="high placed after the cooldown")
    assert [e[2] for e in agent.history if e[0] == "evict"] == ["u/low-0"]
