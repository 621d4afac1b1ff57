"""The stream's acknowledgements go straight from nats-py's parser to the publisher (busched/bus/direct.py),
on a real nats-server: they settle their publishes as before, a server status (503, no stream) still comes
through nats-py's own path, and a handler that raises does not end the connection."""

from __future__ import annotations

from busched.bus import Bus
from busched.bus import subjects as S
from busched.bus.direct import direct, usable
from busched.bus.publish import NO_STREAM


async def test_the_installed_nats_py_is_one_direct_knows(nats_server) -> None:
    bus = await Bus.connect(nats_server.url)
    try:
        assert usable(bus.nc)  # else every acknowledgement silently takes the slower path
    finally:
        await bus.close()


async def test_acknowledgements_settle_without_the_subscriptions_queue(nats_server) -> None:
    bus = await Bus.connect(nats_server.url)
    try:
        await bus.ensure_streams()
        before = bus.nc.stats["in_msgs"]
        acks = await bus.publish_all((S.podgroup_subject(f"p/j{i}"), b'{"x":1}', None) for i in range(200))
        assert all(a.ok for a in acks)
        assert [a.seq for a in acks] == list(range(acks[0].seq, acks[0].seq + 200))  # each its own publish's
        sub = bus._publisher._sub
        assert sub._received == 0 and sub.pending_msgs == 0  # none went through nats-py's Msg, queue and task
        assert bus.nc.stats["in_msgs"] - before >= 200  # still counted as received
        # no stream listens here: the server's 503 status (a header) takes nats-py's path, and says so
        bad = await bus.publish_all([("nostream.anywhere", b"{}", None)], timeout=5)
        assert not bad[0].ok and bad[0].error.startswith(NO_STREAM)
        assert sub._received >= 1  # (the bus publishes again on a 503 until its timeout)
    finally:
        await bus.close()


async def test_a_handler_that_raises_does_not_end_the_connection(nats_server) -> None:
    bus = await Bus.connect(nats_server.url)
    try:
        got: list[bytes] = []

        def boom(subject: bytes, data: bytes) -> None:
            got.append(data)
            raise RuntimeError("boom")

        sub = await bus.nc.subscribe("direct.test")
        assert direct(bus.nc, sub._id, boom)
        await bus.nc.publish("direct.test", b"one")
        await bus.nc.publish("direct.test", b"two")
        await bus.nc.flush()
        assert bus.nc.is_connected
        await bus.ensure_streams()  # the connection still answers requests
        acks = await bus.publish_all([(S.podgroup_subject("p/after"), b"{}", None)])
        assert acks[0].ok
        assert got == [b"one", b"two"]
    finally:
        await bus.close()
