"""A publish no stream answers (status 503: on a NATS cluster, a replicated stream electing a new leader after
its server was lost) is sent again until the caller's timeout; an agent's report the stream never took is
reported again until it is.  Here the stream is missing for a while (deleted, then made again), which the
server answers the same way as a leaderless one; tests/faults/test_nats_cluster.py loses a real leader."""

from __future__ import annotations

import asyncio

from busched.agent import Agent
from busched.agent.node import HeldTask
from busched.api.objects import NodeSpec, TaskSpec
from busched.api.resource import Resource
from busched.bus import Bus
from busched.bus import messages as m
from busched.bus import subjects as S
from tests.nats_fixture import wait_until


async def _later(seconds: float, coro) -> None:  # noqa: ANN001
    await asyncio.sleep(seconds)
    await coro


async def test_a_publish_waits_for_the_stream_within_its_timeout(nats_server) -> None:  # noqa: ANN001
    bus = await Bus.connect(nats_server.url)
    try:
        subject = S.state_subject("queue", "q1")
        missing = await bus.publish(subject, b"{}", timeout=0.5)
        assert missing.no_stream and not missing.ok, missing
        back = asyncio.create_task(_later(0.4, bus.ensure_streams()))
        ack = await bus.publish(subject, b"{}", timeout=5)
        await back
        assert ack.ok, ack.error
        assert await bus.stream_last_seq(S.STATE_STREAM) == ack.seq == 1
    finally:
        await bus.close()


async def test_publish_all_sends_again_what_no_stream_answered_in_order(nats_server) -> None:  # noqa: ANN001
    bus = await Bus.connect(nats_server.url)
    try:
        items = [(S.state_subject("queue", f"q{i}"), f'{{"i":{i}}}'.encode(), None) for i in range(5)]
        assert all(a.no_stream for a in await bus.publish_all(items, timeout=0.3))
        back = asyncio.create_task(_later(0.4, bus.ensure_streams()))
        acks = await bus.publish_all(items, timeout=5)
        await back
        assert all(a.ok for a in acks), [a.error for a in acks]
        assert [a.seq for a in acks] == [1, 2, 3, 4, 5]  # in the batch's order
    finally:
        await bus.close()


async def test_an_agent_reports_a_finished_task_again_until_the_stream_takes_it(nats_server) -> None:  # noqa: ANN001
    bus = await Bus.connect(nats_server.url)
    agent = None
    try:
        node = NodeSpec(name="n1", allocatable={"cpu": "4", "memory": "8Gi"})
        agent = Agent(bus, [node], consume=False, register=False, heartbeat_interval=0.2)
        await agent.start()
        spec = TaskSpec(name="t1", namespace="ns", job="j", requests={"cpu": "1"})
        agent.nodes["n1"].tasks["ns/t1"] = HeldTask("ns/t1", 3, spec, Resource.from_list(spec.requests))
        await bus.js.delete_stream(S.STATE_STREAM)  # the stream answers no publish for a while

        assert not await agent.report_phase("n1", "ns/t1", "Succeeded")  # not taken within its timeout
        assert "ns/t1" not in agent.nodes["n1"].tasks
        await bus.ensure_streams()

        async def reported() -> m.TaskPhaseChanged | None:
            got = await bus.last_state(S.result_subject("n1", "ns/t1"))
            return None if got is None else m.decode(got[1])
        msg = await wait_until(reported, timeout=10, what="the report sent again")
        assert isinstance(msg, m.TaskPhaseChanged)
        assert (msg.phase, msg.attempt, msg.node, msg.boot) == ("Succeeded", 3, "n1", agent.boot)
        await asyncio.sleep(1.5)  # and only once: the retry stops when taken
        assert await bus.stream_last_seq(S.STATE_STREAM) == 1
    finally:
        if agent is not None:
            await agent.stop()
        await bus.close()
