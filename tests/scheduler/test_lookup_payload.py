"""A lookup whose answer the bus would not carry is answered with an error saying so, not left unanswered (real
nats-server started with a 32 KiB max payload): a task's describe carries its recent events, each with its
reason, which an agent's refusals make long."""

from __future__ import annotations

import pytest

from busched.agent import Reject, fleet_nodes
from busched.api.objects import ClusterSpec, JobSpec, QueueSpec, TaskSpec
from busched.bus import messages as m
from busched.bus.apply import apply_cluster
from busched.bus.server import NatsServer
from busched.cli.get import fetch, lookup
from tests.nats_fixture import Harness, wait_until


async def test_a_describe_larger_than_the_bus_carries_is_an_error_reply(tmp_path):
    srv = NatsServer(tmp_path / "nats", max_payload=32 * 1024)
    srv.start(timeout=10)
    h = Harness(srv.url)
    try:
        await h.scheduler(exclusion_ttl=0.05, max_attempts=100, backoff_max=0.1)
        refused: list[int] = []

        def on_bind(node: str, bind: m.BindDecision) -> None:
            refused.append(bind.attempt)
            raise Reject(f"attempt {bind.attempt}: " + "r" * 4000)

        await h.agent(fleet_nodes(1, cpu="4", memory="8Gi"), on_bind=on_bind)
        bus = await h.bus()
        await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="default")],
                                             jobs=[JobSpec(name="j", namespace="t", min_member=1)],
                                             tasks=[TaskSpec(name="j-0", namespace="t", job="j",
                                                             requests={"cpu": "1"},
                                                             annotations={"a": "x" * 29_500})]))
        await wait_until(lambda: len(refused) >= 12, timeout=30, what="12 refusals")
        assert (await lookup(bus, "get", "tasks", "t/j-0"))["name"] == "j-0"  # a small answer: as always
        with pytest.raises(RuntimeError, match=r"describe t/j-0: the answer, \d+ bytes, is more than the bus carries"):
            await lookup(bus, "describe", "tasks", "t/j-0", timeout=5)
        # a listing with the specs (`busched get tasks -o yaml`): its row (the last refusal's reason) and its spec
        with pytest.raises(RuntimeError, match=r"get tasks: the object at 0 alone is \d+ bytes, more than the bus"):
            await fetch(bus, "tasks", spec=True)
    finally:
        await h.close()
        srv.stop()
