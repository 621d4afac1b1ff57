"""The SDK's entry point: nodes completed or refused with a clear error, and run_agent serving an
executor over a real nats-server until stopped."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from busched.agent import NodeSpec, ProcessExecutor, complete_nodes, run_agent
from busched.api.objects import ClusterSpec, JobSpec, QueueSpec, TaskSpec
from busched.bus.apply import apply_cluster
from tests.nats_fixture import wait_until


def test_pods_default_to_110_and_nothing_else_changes() -> None:
    [n] = complete_nodes([NodeSpec(name="n1", allocatable={"cpu": "4", "memory": "8Gi"}, labels={"a": "b"})])
    assert n.allocatable == {"cpu": "4", "memory": "8Gi", "pods": 110} and n.labels == {"a": "b"}
    [m] = complete_nodes([NodeSpec(name="n1", allocatable={"cpu": "4", "memory": "8Gi", "pods": 3})])
    assert m.allocatable["pods"] == 3


@pytest.mark.parametrize("nodes, message", [
    ([NodeSpec(name="n1", allocatable={"cpu": "4"})], "node n1: allocatable has no memory"),
    ([NodeSpec(name="n1")], "node n1: allocatable has no cpu and no memory"),
    ([NodeSpec(name="n1", allocatable={"cpu": "1", "memory": "1"})] * 2, "node n1: given twice"),
])
def test_a_node_that_could_run_nothing_is_refused(nodes: list[NodeSpec], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        complete_nodes(nodes)


async def test_run_agent_runs_tasks_until_stopped(harness: Any, tmp_path: Path) -> None:
    sched = await harness.scheduler()
    stop = asyncio.Event()
    agent = asyncio.create_task(run_agent([NodeSpec(name="n1", allocatable={"cpu": "2", "memory": "1Gi"})],
                                          ProcessExecutor(tmp_path / "state", cgroup=None), nats=harness.url,
                                          stop=stop, heartbeat=0.1))
    await apply_cluster(await harness.bus(), ClusterSpec(
        queues=[QueueSpec(name="default")], jobs=[JobSpec(name="j", namespace="t", min_member=1)],
        tasks=[TaskSpec(name="a", namespace="t", job="j", requests={"cpu": "1"}, command=["true"])]))
    await wait_until(lambda: sched.task_status("t/a") == "Succeeded", timeout=15, what="succeeded")
    stop.set()
    await asyncio.wait_for(agent, 10)
