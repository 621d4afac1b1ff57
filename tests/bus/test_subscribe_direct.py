"""`Bus.subscribe`'s messages straight from the parser (busched.bus.client, busched.bus.direct), on a real
nats-server: every message reaches the handler once and in order, with headers or without, none through nats-py's
processing; a handler that raises loses only its message; none after the subscription is dropped."""

from __future__ import annotations

import asyncio
import os
import select
import socket
from typing import Any

from busched.bus import Bus
from busched.bus.direct import direct_raw, tables
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
        await bus.flush()  # (nats-py's own flush() could reach the server before the SUB: CI once lost the messages)
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
        await _flushed(bus)  # (the server has both the SUB and the UNSUB before the publishes below)
        await nc.publish("busched.heartbeat.n1", b"late")
        await nc.publish("busched.after", b"marker")  # (one connection's messages arrive in order)
        await nc.flush()
        await wait_until(lambda: seen == [b"marker"], what="the marker")
        assert len(got) == 3
    finally:
        await other.close()
        await bus.close()


async def _flushed(bus: Bus) -> None:
    """The server has every command written so far: nats-py's ``flush()`` writes its PING at once, ahead of
    commands still pending (a SUB, an UNSUB), so those are written first."""
    await bus.nc._flush_pending(force_flush=True)  # (waits for the flusher to write them)
    await bus.nc.flush()


def _publish_blocking(url: str, frames: bytes) -> None:
    """``frames`` (PUB lines) published on a plain socket of our own, the event loop held until the server answered
    the PING after them (so every connection's reads wait meanwhile)."""
    host, port = url.removeprefix("nats://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\n' + frames + b"PING\r\n")
        got = b""
        while b"PONG\r\n" not in got:
            chunk = s.recv(4096)
            assert chunk, "the server closed the connection"
            got += chunk


def _hold_until_buffered(bus: Bus, size: int) -> None:
    """The event loop held until ``size`` bytes wait in ``bus``'s socket: nats-py then reads them in one go."""
    sock = bus.nc._transport._io_writer.transport.get_extra_info("socket")
    peek = socket.socket(fileno=os.dup(sock.fileno()))
    try:
        for _ in range(500):
            select.select([peek], [], [], 0.01)
            if len(peek.recv(size, socket.MSG_PEEK)) >= size:
                return
        raise AssertionError("the server did not send the messages")
    finally:
        peek.close()  # (the duplicate only)


async def test_a_message_is_handled_after_what_came_before_it_on_the_wire(nats_server) -> None:
    """The state watch hands a read's records over with ``loop.call_soon`` (busched.bus.feeds); a heartbeat after a
    record in the same read must be handled after that record is in, as through nats-py's queue and task: else an
    agent's new incarnation's first heartbeat is seen before its old incarnation's Succeeded (a needless evict)."""
    bus = await Bus.connect(nats_server.url)
    try:
        loop = asyncio.get_running_loop()
        seen: list[str] = []
        sub = await bus.subscribe("busched.heartbeat.*", lambda subject, data: seen.append(data.decode()))
        watch = await bus.nc.subscribe("busched.state.x")

        def take(sid: int, subject: bytes, reply: bytes, data: bytes, headers: Any) -> None:
            loop.call_soon(seen.append, data.decode())  # (as the state watch's batch)

        assert direct_raw(bus.nc, watch._id, take) is not None
        await _flushed(bus)
        _publish_blocking(nats_server.url,
                          b"PUB busched.state.x 9\r\nSucceeded\r\nPUB busched.heartbeat.n1 7\r\nRunning\r\n")
        _hold_until_buffered(bus, len(b"MSG busched.state.x %d 9\r\nSucceeded\r\n" % watch._id)
                             + len(b"MSG busched.heartbeat.n1 %d 7\r\nRunning\r\n" % sub._id))
        await wait_until(lambda: len(seen) == 2, what="both messages")
        assert seen == ["Succeeded", "Running"]
    finally:
        await bus.close()


async def test_the_route_goes_with_its_subscription(nats_server) -> None:
    """A subscription dropped (agentcheck's probe unsubscribes) takes its route in the parser with it: else the route
    (a closure holding the handler and the subscription) stays on the connection until it closes."""
    bus, other = await Bus.connect(nats_server.url), await Bus.connect(nats_server.url)
    try:
        got: list[bytes] = []
        sub = await bus.subscribe("busched.probe", lambda subject, data: got.append(data))
        limited = await bus.subscribe("busched.limited", lambda subject, data: got.append(data))
        raw = tables(bus.nc)
        assert raw is not None and sub._id in raw[1] and limited._id in raw[1]
        await sub.unsubscribe()
        assert sub._id not in raw[1]
        # one more message, then dropped: the route goes now, nats-py's own path counts it and drops the subscription
        await limited.unsubscribe(1)
        assert limited._id not in raw[1]
        await _flushed(bus)
        await other.nc.publish("busched.probe", b"late")
        await other.nc.publish("busched.limited", b"last")
        await other.nc.publish("busched.limited", b"beyond")
        await other.nc.flush()
        await wait_until(lambda: got == [b"last"], what="the last message")
        await wait_until(lambda: limited._id not in bus.nc._subs, what="the limited subscription dropped")
        assert got == [b"last"]
    finally:
        await other.close()
        await bus.close()


async def test_a_subscription_flushed_hears_what_is_published_after(nats_server) -> None:  # noqa: ANN001
    """`Bus.flush` returns once the server has the SUB just made: nats-py's ``flush()`` wrote its PING ahead of
    the SUB still pending, so a message published by another connection right after could find no subscriber
    (CI lost the first test's messages so).  100 fresh subscriptions, each flushed, then a message each; this
    can fail only by chance with nats-py's flush alone."""
    bus, other = await Bus.connect(nats_server.url), await Bus.connect(nats_server.url)
    try:
        got: list[bytes] = []
        for i in range(100):
            await bus.subscribe(f"busched.flushed.{i}", lambda subject, data: got.append(data))
            await bus.flush()
            await other.nc.publish(f"busched.flushed.{i}", str(i).encode())
        await other.nc.flush()
        await bus.subscribe("busched.flushed.end", lambda subject, data: got.append(data))
        await bus.flush()
        await other.nc.publish("busched.flushed.end", b"end")
        await other.nc.flush()
        await wait_until(lambda: got and got[-1] == b"end", what="the end marker")
        assert got == [str(i).encode() for i in range(100)] + [b"end"]
    finally:
        await other.close()
        await bus.close()
