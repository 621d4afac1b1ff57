"""`busched logs` under `busched up`'s generated users: the cli credential asks, the agent credential
answers for its own node, and cannot take another node's log requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from busched.agent import Agent, ProcessExecutor, fleet_nodes
from busched.api.objects import ClusterSpec, JobSpec, QueueSpec, TaskSpec
from busched.bus import Bus, BusError
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.apply import apply_cluster
from busched.bus.auth import AuthDir
from busched.bus.connect import NatsOptions
from busched.scheduler import Scheduler, SchedulerSettings
from tests.bus.conftest import SECURED_NODE, secured  # noqa: F401 - the fixture
from tests.nats_fixture import FAST, wait_until


def _opts(auth: AuthDir, role: str, name: str | None = None) -> NatsOptions:
    c = auth.get(role, name)
    return NatsOptions(url=c.url, user=c.user, password=c.password, inbox_prefix=c.inbox_prefix)


async def test_logs_under_the_generated_users(secured: Any, tmp_path: Path) -> None:  # noqa: F811
    _, auth = secured
    sbus = await Bus.connect(_opts(auth, "scheduler"))
    abus = await Bus.connect(_opts(auth, "agent", SECURED_NODE))
    cbus = await Bus.connect(_opts(auth, "cli"))
    sched = Scheduler(sbus, None, SchedulerSettings(**FAST))
    agent = Agent(abus, fleet_nodes(1), heartbeat_interval=0.1, executor=ProcessExecutor(tmp_path / "s", cgroup=None))
    try:
        await sched.start()
        await agent.start()
        await apply_cluster(sbus, ClusterSpec(
            queues=[QueueSpec(name="default")], jobs=[JobSpec(name="j", namespace="p", min_member=1)],
            tasks=[TaskSpec(name="j-0", namespace="p", job="j", requests={"cpu": "1"}, command=["echo", "hi"])]))

        async def done() -> bool:
            await sched.run_once()
            return sched.task_status("p/j-0") == "Succeeded"
        await wait_until(done, timeout=15, what="succeeded")
        reply = m.decode(await cbus.request(S.logs_subject(SECURED_NODE), m.LogsRequest(namespace="p", name="j-0")))
        assert isinstance(reply, m.LogsReply) and (reply.data, reply.ended, reply.error) == ("hi\n", True, "")
        # the agent may not take another node's log requests: the server refuses its subscription
        other = "node-01"

        async def forged(data: bytes) -> bytes:
            return m.encode(m.LogsReply(data="forged"))
        await abus.serve(S.logs_subject(other), forged)
        with pytest.raises(BusError):
            await cbus.request(S.logs_subject(other), m.LogsRequest(namespace="p", name="j-0"), timeout=1)
    finally:
        await agent.stop()
        await sched.stop()
        for b in (cbus, abus, sbus):
            await b.close()
