"""`Bus.subscribe`'s messages straight from the parser (busched.bus.client, busched.bus.direct), on a real
nats-server: every message reaches the handler once and in order, with headers or without, none through nats-py's
processing; a handler that raises loses only its message; none after the subscription is dropped."""

from __future__ import annotations

from typing import Any

from busched.bus import Bus
from tests.nats_fixture import wait_until


async def test_messages_skip_nats_py_and_all_arrive_in_order(nats_server) -> None:
    bus, other = await Bus.connect(nats_server.url), await Bus.connect(nats_server.url)
    try:
        got: list[tuple[str, bytes]] = []

        def handler(subject: str, data: bytes) -> None:
            if data == b"boom":
                raise ValueError("a handler's error")
            got.append((subject, data))

        sub = await bus.subscribe("busched.heartbeat.*", handler)
        processed: list[Any] = []
        original = bus.nc._process_msg

        async def counted(sid: int, *args: Any) -> None:
            if sid == sub._id:
                processed.append(args[0])
            await original(sid, *args)

        bus.nc._process_msg = counted
        await bus.nc.flush()
        nc = other.nc
        await nc.publish("busched.heartbeat.n1", b"one")
        await nc.publish("busched.heartbeat.n2", b"boom")
        await nc.publish("busched.heartbeat.n1", b"two", headers={"K": "v"})  # (the handler never sees headers)
        await nc.publish("busched.heartbeat.n3", b"three")
        await nc.flush()
        await wait_until(lambda: len(got) == 3, what="three messages handled")
        assert got == [("busched.heartbeat.n1", b"one"), ("busched.heartbeat.n1", b"two"),
                       ("busched.heartbeat.n3", b"three")]
        assert processed == []  # none went through nats-py's Msg, queue and task
        assert sub._received == 4 and bus.nc.is_connected and bus.nc.stats["in_msgs"] >= 4

        # dropped as nats-py's own subscription (agentcheck's probe does so): nothing after it reaches the handler
        seen: list[bytes] = []
        await bus.subscribe("busched.after", lambda subject, data: seen.append(data))
        await sub.unsubscribe()
        await nc.publish("busched.heartbeat.n1", b"late")
        await nc.publish("busched.after", b"marker")  # (one connection's messages arrive in order)
        await nc.flush()
        await wait_until(lambda: seen == [b"marker"], what="the marker")
        assert len(got) == 3
    finally:
        await other.close()
        await bus.close()
