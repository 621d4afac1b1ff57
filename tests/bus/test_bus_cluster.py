"""The bus on a NATS cluster: streams made with ``--replicas``, raised but never lowered, a conditional write
refused across servers; and the server version check `Bus.connect` does (busched.bus.connect)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from busched.bus import Bus, BusError, StreamSettings
from busched.bus import connect as C
from busched.bus import subjects as S
from busched.bus.server_cluster import NatsCluster
from busched.cli.main import build_parser
from tests.nats_fixture import wait_until


async def replicas(bus: Bus, stream: str) -> int:
    return int((await bus.js.stream_info(stream)).config.num_replicas or 1)


async def test_streams_are_made_with_the_replicas_asked(nats_cluster: NatsCluster) -> None:
    bus = await Bus.connect(nats_cluster.url)
    try:
        await bus.ensure_streams(StreamSettings(replicas=3))
        from busched.bus import history as H

        for stream in (S.STATE_STREAM, S.DECISION_STREAM, H.HISTORY_STREAM, H.STATE_HISTORY_STREAM):
            info = await bus.js.stream_info(stream)
            assert info.config.num_replicas == 3, stream
            assert info.cluster is not None and len(info.cluster.replicas or []) == 2, (stream, info.cluster)
    finally:
        await bus.close()


async def test_a_stream_is_raised_to_more_replicas_and_never_lowered(nats_cluster: NatsCluster) -> None:
    bus = await Bus.connect(nats_cluster.url)
    try:
        await bus.ensure_streams()  # e.g. `busched apply` came first: one replica
        assert await replicas(bus, S.STATE_STREAM) == 1
        ack = await bus.publish(S.state_subject("queue", "q1"), b"{}")
        assert ack.ok
        await bus.ensure_streams(StreamSettings(replicas=3), history=False)  # then `busched run --replicas 3`
        assert await replicas(bus, S.STATE_STREAM) == 3
        assert await replicas(bus, S.DECISION_STREAM) == 3
        assert await bus.stream_last_seq(S.STATE_STREAM) == ack.seq  # the message kept through the change
        await bus.ensure_streams(StreamSettings(replicas=1), history=False)  # a later default never lowers it
        assert await replicas(bus, S.STATE_STREAM) == 3
    finally:
        await bus.close()


async def test_a_conditional_write_is_refused_through_another_server(nats_cluster: NatsCluster) -> None:
    """Two clients on two different servers of the cluster: the replicated stream orders their writes, so the
    second write expecting the same last sequence is refused (what keeps two schedulers from binding twice)."""
    a = await Bus.connect(nats_cluster.urls[0])
    b = await Bus.connect(nats_cluster.urls[1])
    try:
        await a.ensure_streams(StreamSettings(replicas=3), history=False)
        subject = S.state_subject("binding", "ns/t1")
        first = await a.publish(subject, b'{"n":1}', expected=0)
        assert first.ok, first.error
        second = await b.publish(subject, b'{"n":2}', expected=0)
        assert not second.ok and second.error, "a conditional write on a stale sequence was taken"
        third = await b.publish(subject, b'{"n":3}', expected=first.seq)
        assert third.ok, third.error
    finally:
        await a.close()
        await b.close()


async def test_a_lapsed_binds_questions_are_bounded_while_its_consumer_elects_a_leader(
        nats_cluster: NatsCluster) -> None:
    """The scheduler asks, within a cycle, to delete a lapsed bind's decision and how far its agent's consumer
    delivered; with the consumer's leader just lost those requests go unanswered for seconds, and each is given
    up after `reads.DECISION_READ_TIMEOUT` (cannot be told: the cautious branch), not JetStream's 10 s."""
    from busched.bus import reads

    first = await Bus.connect(nats_cluster.url)
    await first.ensure_streams(StreamSettings(replicas=3), history=False)
    feed = await first.decision_feed("n1")
    await feed.stop()
    leader = (await first.js.consumer_info(S.DECISION_STREAM, S.agent_consumer("n1"))).cluster.leader
    await first.close()
    i = nats_cluster.index_of(leader)
    bus = await Bus.connect(nats_cluster.urls[(i + 1) % 3])  # on a server that stays
    try:
        nats_cluster.kill(i)
        for ask in (lambda: bus.consumer_delivered(S.agent_consumer("n1")), lambda: bus.delete_decision(1)):
            t0 = asyncio.get_running_loop().time()
            await ask()
            assert asyncio.get_running_loop().time() - t0 < reads.DECISION_READ_TIMEOUT + 1.0
    finally:
        await bus.close()


def test_replicas_flag_on_run_and_agent() -> None:
    parser = build_parser()
    assert parser.parse_args(["run", "--replicas", "3"]).replicas == 3
    assert parser.parse_args(["agent"]).replicas == 1
    for bad in ("0", "6", "x"):
        with pytest.raises(SystemExit):
            parser.parse_args(["run", "--replicas", bad])
    with pytest.raises(ValueError, match="replicas"):
        StreamSettings(replicas=7)


# -- the server version -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, refused", [
    ("2.9.25", True), ("2.9.0", True), ("v2.8.4", True), ("1.4.1", True),
    ("2.10.0", False), ("2.10.0-RC.1", False), ("2.11.3", False), ("2.15.1", False), ("3.0.0", False),
    ("2.12.0-dev+abc", False), ("nonsense", False), ("", False)])
def test_server_version_check(text: str, refused: bool) -> None:
    why = C.check_server_version(text, "127.0.0.1:4222")
    assert (why is not None) == refused, why
    if why:
        assert text in why and "2.10.0" in why and "filter_subjects" in why and "127.0.0.1:4222" in why


def test_the_minimum_is_the_newest_feature() -> None:
    assert C.MIN_SERVER_VERSION == (2, 10, 0) == max(C.SERVER_FEATURES.values())
    assert C.parse_version("v2.10.4-beta") == (2, 10, 4)
    assert C.parse_version("2.11") == (2, 11, 0)


async def _serve_old(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A stand-in for a nats-server 2.9 that says its version in INFO and answers PING: enough for a client to
    connect (a real old server is not installable here)."""
    info = {"server_id": "OLD", "server_name": "old", "version": "2.9.25", "proto": 1, "headers": True,
            "max_payload": 1048576, "jetstream": True}
    writer.write(f"INFO {json.dumps(info)}\r\n".encode())
    await writer.drain()
    try:
        while line := await reader.readline():
            if line.startswith(b"PING"):
                writer.write(b"PONG\r\n")
                await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


@pytest.fixture
async def old_server() -> AsyncIterator[str]:
    """The URL of a stand-in for a nats-server 2.9 (`_serve_old`)."""
    server = await asyncio.start_server(_serve_old, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"nats://127.0.0.1:{port}"
    finally:
        server.close()
        await server.wait_closed()


async def test_connect_refuses_a_server_older_than_the_minimum(old_server: str) -> None:
    with pytest.raises(BusError, match=r"nats-server 2\.9\.25 at 127\.0\.0\.1:\d+ is older than 2\.10\.0"):
        await Bus.connect(old_server, wait=5)


async def test_connect_takes_the_installed_server(nats_server) -> None:  # noqa: ANN001
    bus = await Bus.connect(nats_server.url)
    try:
        assert C.check_server_version(bus.nc.connected_server_version._server_version) is None
    finally:
        await bus.close()


async def test_a_reconnection_to_an_older_server_is_logged_as_an_error(nats_server, caplog) -> None:  # noqa: ANN001
    """A cluster in the middle of an upgrade: the client's server goes, it reconnects to an old one."""
    from busched.bus.server import free_port

    port = free_port()  # the old server listens there only once the client is connected to the real one
    bus = await Bus.connect(f"{nats_server.url},nats://127.0.0.1:{port}")
    old = await asyncio.start_server(_serve_old, "127.0.0.1", port)
    try:
        with caplog.at_level("INFO", logger="busched.bus"):
            nats_server.stop()
            await wait_until(lambda: any("older than 2.10.0" in r.getMessage() and r.levelname == "ERROR"
                                         for r in caplog.records), timeout=10, what="the error logged")
        assert bus.connected
    finally:
        await bus.close()
        old.close()
        await old.wait_closed()


def test_a_cluster_whose_port_is_taken_before_its_server_binds_it_starts_on_new_ports(tmp_path) -> None:
    """A port planned free can be taken before its server binds it (the kernel hands the same range out to
    outgoing connections); the start is made again on newly chosen ports instead of failing."""
    import socket

    c = NatsCluster(tmp_path / "nats")
    last = c.servers[-1]
    taken = last.monitor_port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        try:
            c.start(timeout=30)
            assert c.servers[-1].monitor_port != taken
            assert c.healthy() and c.meta_leader()
        finally:
            c.stop()
    one = NatsCluster(tmp_path / "again", size=1)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", one.servers[0].monitor_port))
        squatter.listen()
        try:
            with pytest.raises(Exception, match="already in use"):
                one.start(timeout=10, attempts=1)  # without another attempt, the taken port is named
        finally:
            one.stop()
