"""What agents measure of their nodes' load (busched.agent.usage) and how it reaches the scheduler.

The meters alone with injected clocks (and a /proc of the test's own); the executor SDK's ``usage`` and
the process executor's over a real nats-server and scheduler.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from busched.agent import fleet_nodes
from busched.agent.executor import Exit, TaskRun
from busched.agent.node import AgentNode, HeldTask
from busched.agent.process import ProcessExecutor
from busched.agent.usage import PERIODS, ProcMeter, RequestsMeter, percent
from busched.api.objects import ClusterSpec, JobSpec, NodeSpec, NodeUsageSpec, QueueSpec, TaskSpec
from busched.api.resource import Resource
from busched.bus.apply import apply_cluster
from tests.nats_fixture import wait_until


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _node(cpu: str = "4", memory: str = "8Gi") -> AgentNode:
    spec = NodeSpec(name="n1", allocatable={"cpu": cpu, "memory": memory})
    return AgentNode(spec, Resource.from_list(spec.allocatable))


def _hold(n: AgentNode, key: str, cpu: str, memory: str) -> None:
    req = {"cpu": cpu, "memory": memory}
    n.tasks[key] = HeldTask(key, 1, TaskSpec(name=key, requests=req), Resource.from_list(req))


def test_percent_is_bounded():
    assert (percent(1, 4), percent(5, 4), percent(-1, 4), percent(1, 0), percent(float("nan"), 1)) == (
        25.0, 100.0, 0.0, 0.0, 0.0)


def test_the_simulated_load_is_the_requests_over_allocatable_measured_once_per_interval():
    clock, n = Clock(), _node()
    meter = RequestsMeter(clock, interval=30)
    empty = meter.measure(n)
    assert empty == NodeUsageSpec(time=clock.t, cpu=dict.fromkeys(PERIODS, 0.0), memory=dict.fromkeys(PERIODS, 0.0))
    _hold(n, "a", "3", "2Gi")
    clock.t += 10
    assert meter.measure(n) is empty  # within the interval: the same measurement (the scheduler skips it)
    clock.t += 20
    first = meter.measure(n)
    assert (first.time, first.cpu["10m"], first.memory["5m"]) == (clock.t, 75.0, 25.0)
    clock.t += 30
    again = meter.measure(n)
    assert again.time == clock.t and again.cpu == first.cpu  # measured again before it could go stale


def _proc(tmp: Path, busy: int, idle: int, total_kb: int, avail_kb: int) -> None:
    (tmp / "stat").write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 2 3 4\n")
    (tmp / "meminfo").write_text(f"MemTotal:       {total_kb} kB\nMemFree:  1 kB\nMemAvailable:   {avail_kb} kB\n")


def test_the_host_load_is_read_from_proc_and_averaged_per_period(tmp_path: Path):
    clock = Clock()
    meter = ProcMeter(clock, proc=tmp_path, interval=30)
    _proc(tmp_path, busy=100, idle=300, total_kb=1000, avail_kb=750)
    first = meter.measure()
    assert first is not None and (first.cpu["10m"], first.memory["10m"]) == (25.0, 25.0)  # since boot
    _proc(tmp_path, busy=180, idle=320, total_kb=1000, avail_kb=250)  # 80 busy of 100 ticks since
    clock.t += 10
    assert meter.measure() is first  # at most one sample per interval
    clock.t += 290  # 300 s after the first: it is at the edge of 5m, so both periods hold both samples
    second = meter.measure()
    assert second is not None and second.time == clock.t
    assert second.cpu == {"5m": 52.5, "10m": 52.5} and second.memory == {"5m": 50.0, "10m": 50.0}
    _proc(tmp_path, busy=180, idle=420, total_kb=1000, avail_kb=250)  # idle since
    clock.t += 301  # 601 s after the first, which has left both periods; 5m holds the new sample only
    third = meter.measure()
    assert third is not None and third.cpu == {"5m": 0.0, "10m": 40.0} and third.memory["10m"] == 75.0


def test_an_unreadable_proc_reports_what_was_measured_before(tmp_path: Path):
    meter = ProcMeter(Clock(), proc=tmp_path / "missing")
    assert meter.measure() is None


class Loaded:
    """An integrator's executor (docs/executors.md) that knows its node's load."""

    def __init__(self) -> None:
        self.load: NodeUsageSpec | None = None
        self.fail = False

    async def start(self, run: TaskRun) -> None:
        return None

    async def wait(self, run: TaskRun) -> Exit:
        await asyncio.Event().wait()
        return Exit(0)

    async def stop(self, run: TaskRun, grace: float) -> None:
        return None

    async def status(self, run: TaskRun) -> Exit | None:
        return None

    async def usage(self, node: str) -> NodeUsageSpec | None:
        if self.fail:
            raise RuntimeError("the metrics daemon is down")
        return self.load


async def test_an_executor_supplies_the_load_its_heartbeats_carry(harness: Any):
    sched = await harness.scheduler()
    ex = Loaded()
    agent = await harness.agent(fleet_nodes(1), executor=ex)
    await apply_cluster(await harness.bus(), ClusterSpec(queues=[QueueSpec(name="default")]))
    ex.load = NodeUsageSpec(time=1_700_000_000, cpu={"10m": 12.5}, memory={"10m": 40})
    await wait_until(lambda: sched.liveness.live["node-00"].usage == ex.load, what="the executor's load kept")
    assert sched.cache.objects["node"]["node-00"].usage == ex.load
    ex.fail = True  # a failing measurement never stops the beats
    beats = agent.nodes["node-00"].hb_seq
    await wait_until(lambda: agent.nodes["node-00"].hb_seq >= beats + 3, what="beats go on")
    assert sched.liveness.live["node-00"].state == "alive"


async def test_the_process_executor_reports_this_hosts_load_and_start_times(harness: Any, tmp_path: Path):
    sched = await harness.scheduler()
    agent = await harness.agent(fleet_nodes(1), executor=ProcessExecutor(tmp_path / "state", cgroup=None))
    await apply_cluster(await harness.bus(), ClusterSpec(
        queues=[QueueSpec(name="default")], jobs=[JobSpec(name="j", namespace="t", min_member=1)],
        tasks=[TaskSpec(name="j-0", namespace="t", job="j", requests={"cpu": "1", "memory": "1Gi"},
                        command=["sleep", "30"])]))
    await wait_until(lambda: sched.task_status("t/j-0") == "Running", timeout=15, what="running")
    await wait_until(lambda: sched.cache.objects["node"]["node-00"].usage is not None, what="the host's load")
    usage = sched.cache.objects["node"]["node-00"].usage
    assert set(usage.cpu) == set(PERIODS) and 0 <= usage.memory["10m"] <= 100
    started = agent.nodes["node-00"].tasks["t/j-0"].start_time
    assert started > 0
    await wait_until(lambda: sched.cache.objects["task"]["t/j-0"].start_time == started, what="its start time")
