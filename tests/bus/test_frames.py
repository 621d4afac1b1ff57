"""`publish_all` frames its messages itself (busched/bus/frames.py): the frames and header blocks are what
nats-py's own ``publish`` would send, and on a real server the conditions, message ids and fences they carry
work as before; a message nats-py would refuse or clean still goes through nats-py."""

from __future__ import annotations

import asyncio

import nats.errors
import pytest
from nats.aio.client import Client
from nats.protocol import command

from busched.bus import Bus
from busched.bus import frames as F
from busched.bus import subjects as S
from busched.bus.publish import EXPECT_SUBJECT_SEQ, EXPECT_SUBJECT_SEQ_SUBJECT, FENCED, MSG_ID


class _Capture(Client):
    """nats-py's client with its outgoing commands captured instead of sent (its own header building)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[bytes] = []

    async def _send_command(self, cmd: bytes, priority: bool = False) -> None:
        self.sent.append(cmd)


async def test_frames_are_what_nats_py_would_send() -> None:
    nc = _Capture()
    nc._flush_queue = None  # (no flusher: nothing is really sent)
    cases = [{MSG_ID: "bind:ns/a:1"}, {EXPECT_SUBJECT_SEQ: "0"}, {EXPECT_SUBJECT_SEQ: "17", MSG_ID: "x"},
             {MSG_ID: "m", EXPECT_SUBJECT_SEQ: "9", EXPECT_SUBJECT_SEQ_SUBJECT: "busched.state.leader.s"}]
    for headers in cases:
        nc.sent.clear()
        await nc._send_publish("busched.state.task.ns.a", "_INBOX.x.1", b'{"a":1}', 7, headers)
        assert F.hpub("busched.state.task.ns.a", "_INBOX.x.1", F.header_block(headers), b'{"a":1}') == nc.sent[0]
    assert F.pub("s.t", "r.1", b"xy") == command.pub_cmd("s.t", "r.1", b"xy")
    assert F.clean("busched.state.task.ns.a", "bind:ns/a:1")
    assert not F.clean("a b") and not F.clean("a\r\nPUB x 1") and not F.clean("")


@pytest.mark.parametrize("framed", [True, False], ids=["framed", "through nats-py"])
async def test_conditions_ids_and_fences_hold_through_frames(nats_server, framed) -> None:  # noqa: ANN001
    bus = await Bus.connect(nats_server.url)
    try:
        await bus.ensure_streams()
        pub = bus._publisher
        assert pub._framed  # this nats-py is framed (F.Frames.usable says yes: a nats-py it fits)
        pub._framed = framed  # and the path taken without frames holds the same
        a, b = S.state_subject("task", "ns/a"), S.state_subject("task", "ns/b")
        first = await bus.publish_all([(a, b"{}", None, 0), (b, b"{}", "id-b", None)])
        assert [x.ok for x in first] == [True, True]
        again = await bus.publish_all([(a, b"{}", None, 0), (b, b"{}", "id-b", None), (a, b"{}", None, first[0].seq)])
        assert again[0].conflict and not again[0].ok  # the subject moved past 0: the condition held
        assert again[1].duplicate and again[1].seq == first[1].seq  # the message id was seen
        assert again[2].ok
        # a leader's condition (the epoch subject's last sequence) rides on its unconditioned state writes
        lead = S.state_subject("leader", "s0")
        epoch = await bus.publish_all([(lead, b"{}", None)])
        pub.condition = (lead, epoch[0].seq)
        assert (await bus.publish_all([(b, b"{}", None)]))[0].ok
        await bus.publish_all([(lead, b"{}", None)])  # a newer leader's epoch
        deposed = await bus.publish_all([(b, b"{}", None), (b, b"{}", None)])
        assert all(not x.ok for x in deposed)
        pub.condition = None
        # a message id nats-py cleans goes through nats-py (stored, the id trimmed), not framed as it is
        odd = await bus.publish_all([(b, b"{}", " odd-id ")])
        assert odd[0].ok
        assert (await bus.publish_all([(b, b"{}", "odd-id")]))[0].duplicate
        # the fence is asked before each message: none leaves once it says no
        pub.fence = lambda: False
        assert [x.error for x in await bus.publish_all([(a, b"{}", None), (b, b"{}", None)])] == [FENCED, FENCED]
    finally:
        await bus.close()


async def test_concurrent_calls_past_the_pending_limit_keep_their_own_acknowledgements(nats_server) -> None:  # noqa: ANN001
    bus = await Bus.connect(nats_server.url)
    try:
        await bus.ensure_streams()
        # 2 x 160 x 16 KB: more than nats-py's 2 MB pending buffer, so handing a chunk over waits for the flusher
        # (the other call runs meanwhile)
        calls = [[(S.state_subject("queue", f"{who}{i}"), f'"{who}{i}"'.encode().ljust(16_000), None)
                  for i in range(160)] for who in ("a", "b")]
        acks = await asyncio.gather(*(bus.publish_all(items) for items in calls))
        assert all(a.ok for call in acks for a in call)
        assert len({a.seq for call in acks for a in call}) == 320
        for items, call in zip(calls, acks):
            for (subject, data, _), ack in list(zip(items, call))[::37]:
                assert await bus.last_state(subject) == (ack.seq, data)  # each acknowledgement is its own message's
    finally:
        await bus.close()


async def test_a_message_that_cannot_be_encoded_fails_the_unsent_ones_at_once(nats_server) -> None:  # noqa: ANN001
    bus = await Bus.connect(nats_server.url)
    try:
        await bus.ensure_streams()
        before = await bus.stream_last_seq(S.STATE_STREAM)
        items = [(S.state_subject("queue", f"q{i}"), b"{}" if i != 2 else object(), None) for i in range(4)]
        acks = await asyncio.wait_for(bus.publish_all(items, timeout=30), 5)  # not left to time out
        assert len(acks) == 4 and not any(a.ok for a in acks), acks  # none had left: all four are told so
        assert await bus.stream_last_seq(S.STATE_STREAM) == before
        assert all(a.ok for a in await bus.publish_all(items[:2]))  # the publisher goes on
    finally:
        await bus.close()


async def test_an_item_that_left_is_not_blamed_for_the_next_one_failing(nats_server) -> None:  # noqa: ANN001
    bus = await Bus.connect(nats_server.url)
    try:
        await bus.ensure_streams()
        a, b = S.state_subject("queue", "left"), S.state_subject("queue", "next")
        # the first goes through nats-py (an id it cleans) and leaves; the second cannot be encoded
        acks = await asyncio.wait_for(bus.publish_all([(a, b"{}", " id "), (b, object(), None)]), 10)
        assert acks[0].ok and not acks[1].ok, acks
        assert await bus.last_state(a) == (acks[0].seq, b"{}")
    finally:
        await bus.close()


async def test_a_frame_past_max_payload_with_its_headers_is_refused_here_and_the_connection_lives(
        nats_server) -> None:  # noqa: ANN001
    bus = await Bus.connect(nats_server.url)
    try:
        await bus.ensure_streams()
        nc = bus._publisher.nc
        big = b'"' + b"x" * (nc._max_payload - 12) + b'"'  # fits alone; not with a message id's header
        acks = await asyncio.wait_for(bus.publish_all([(S.state_subject("queue", "big"), big, "an-id")]), 10)
        assert not acks[0].ok and "MaxPayload" in (acks[0].error or ""), acks
        assert nc.is_connected  # the server did not cut the connection off
        assert (await bus.publish_all([(S.state_subject("queue", "small"), b"{}", None)]))[0].ok
    finally:
        await bus.close()


async def test_frames_handed_over_are_refused_as_nats_py_refuses_a_publish() -> None:
    nc = _Capture()
    nc._flush_queue = None
    frames = F.Frames(nc)
    nc._max_pending_size = 2 * 1024 * 1024  # (connect's default)
    nc._status = Client.RECONNECTING  # reconnecting: the frames wait in the pending buffer, as nats-py's would
    await frames.add(F.pub("s", "r.1", b"x"), 1, 0)
    await frames.flush()
    assert nc.sent == [F.pub("s", "r.1", b"x")] and frames.unsent() == []
    nc._max_pending_size = 4  # ... unless it is full
    await frames.add(F.pub("s", "r.2", b"y"), 1, 1)
    with pytest.raises(nats.errors.OutboundBufferLimitError):
        await frames.flush()
    assert frames.unsent() == [1] and len(nc.sent) == 1
    nc._status = Client.CLOSED
    await frames.add(F.pub("s", "r.3", b"z"), 1, 2)
    with pytest.raises(nats.errors.ConnectionClosedError):
        await frames.flush()
    assert frames.unsent() == [2] and len(nc.sent) == 1
