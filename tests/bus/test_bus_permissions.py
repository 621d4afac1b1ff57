"""Per-node subjects let the server confine an agent to its own node's decisions (docs/bus.md, permissions)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from busched.agent import Agent, fleet_nodes
from busched.api.objects import ClusterSpec, JobSpec, QueueSpec, TaskSpec
from busched.bus import Bus, auth
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.apply import apply_cluster
from busched.bus.connect import NatsOptions
from busched.bus.server import NatsServer
from busched.scheduler import Scheduler, SchedulerSettings
from tests.nats_fixture import FAST, wait_until

AGENT_NODE = "node-00"


def agent_permissions(node: str) -> str:
    """The nats-server permissions of an agent that serves exactly one node, as busched/bus/auth.py generates them."""
    return json.dumps(auth.agent_permissions([node]))


def test_the_documented_permissions_are_the_generated_ones():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "bus.md").read_text()
    block = doc[doc.index("### Permissions"):]
    block = block[block.index("```"):]
    block = block[3:block.index("```", 3)]
    listed = re.findall(r'"([^"]+)"', block)
    perms = auth.agent_permissions([AGENT_NODE])
    assert listed == perms["publish"]["allow"] + perms["subscribe"]["allow"]


@pytest.fixture
def secured(tmp_path):
    conf = f"""
    authorization {{ users = [
      {{ user: scheduler, password: s3cret }}
      {{ user: {AGENT_NODE}, password: a63nt, permissions: {agent_permissions(AGENT_NODE)} }}
    ] }}
    """
    srv = NatsServer(tmp_path / "nats", config=conf).start()
    try:
        yield srv
    finally:
        srv.stop()


async def test_a_restricted_agent_runs_its_own_node_and_cannot_read_another(secured):
    sbus = await Bus.connect(NatsOptions(url=secured.url, user="scheduler", password="s3cret"))
    abus = await Bus.connect(NatsOptions(url=secured.url, user=AGENT_NODE, password="a63nt",
                                         inbox_prefix=f"_INBOX_{AGENT_NODE}"))
    sched = Scheduler(sbus, None, SchedulerSettings(**FAST))
    agent = Agent(abus, fleet_nodes(1), heartbeat_interval=0.1)
    try:
        await sched.start()
        await agent.start()
        await apply_cluster(sbus, ClusterSpec(
            queues=[QueueSpec(name="default")], jobs=[JobSpec(name="j", namespace="p", min_member=1)],
            tasks=[TaskSpec(name="j-0", namespace="p", job="j", requests={"cpu": "1"})]))

        async def placed() -> bool:
            await sched.run_once()
            return agent.running()[AGENT_NODE] == {"p/j-0": 1}
        await wait_until(placed, timeout=10, what="the task running on the restricted agent")
        await wait_until(lambda: sched.task_status("p/j-0") == "Running", what="its result reached the scheduler")

        # the same user may not read another node's decisions, nor speak for another node
        js = abus.nc.jetstream(timeout=1)
        with pytest.raises(Exception):  # noqa: B017 - a permissions violation surfaces as a timeout
            await js.pull_subscribe(S.node_decisions("node-01"), durable=S.agent_consumer("node-01"),
                                    stream=S.DECISION_STREAM)
        ack = await abus.publish(S.result_subject("node-01", "p/j-0"), m.TaskPhaseChanged(
            namespace="p", name="j-0", node="node-01", attempt=1, phase="Failed"), timeout=1)
        assert not ack.ok
    finally:
        await agent.stop()
        await sched.stop()
        await abus.close()
        await sbus.close()
