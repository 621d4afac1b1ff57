"""The state watch's messages straight from nats-py's parser (busched/bus/ordered.py), on a real nats-server:
in stream order with and without headers, nats-py's ordered-consumer state kept as nats-py keeps it, a gap
replaced by a consumer from the last message handed on, flow control answered under a burst, a consumer
lost (its heartbeats missed) started again, a purge followed."""

from __future__ import annotations

import asyncio
from typing import Any

import nats.js.api
import nats.js.errors

from busched.bus import Bus
from busched.bus import subjects as S
from busched.bus.feeds import watch_state
from busched.bus.ordered import usable
from tests.nats_fixture import wait_until


def _items(n: int, prefix: str, *, ids: bool = False) -> list[tuple[str, bytes, str | None]]:
    # a message id puts headers on the stored message, which the feed receives with it
    return [(S.state_subject("task", f"o/{prefix}{i}"), b'{"i":%d}' % i, f"{prefix}{i}" if ids and i % 2 else None)
            for i in range(n)]


async def _watch(bus: Bus, got: list[tuple[str, bytes, int]], **kw: Any) -> Any:
    w = await watch_state(bus.js, batch_handler=got.extend, **kw)
    await asyncio.wait_for(w.caught_up.wait(), 20)
    return w


def _state(w: Any) -> tuple[int, int, int, int]:
    sub = w._sub._sub
    jsi = sub._jsi
    return jsi._dseq, jsi._sseq, jsi._fciseq, sub._received


async def test_the_installed_nats_py_is_one_ordered_knows(nats_server) -> None:
    bus = await Bus.connect(nats_server.url)
    try:
        await bus.ensure_streams()
        await bus.publish_all(_items(3, "a"))
        got: list[tuple[str, bytes, int]] = []
        w = await _watch(bus, got)
        assert usable(w._sub)  # else every state message silently takes nats-py's slower path
        assert w._receiver is not None and len(got) == 3
        await w.stop()
    finally:
        await bus.close()


async def test_in_stream_order_with_headers_and_the_same_state_as_nats_pys_own_path(nats_server) -> None:
    bus = await Bus.connect(nats_server.url)
    try:
        await bus.ensure_streams()
        acks = await bus.publish_all(_items(300, "a", ids=True))
        plain: list[tuple[str, bytes, int]] = []
        fast: list[tuple[str, bytes, int]] = []
        wp = await _watch(bus, plain, direct_receipt=False)
        wf = await _watch(bus, fast)
        assert wp._receiver is None and wf._receiver is not None
        acks += await bus.publish_all(_items(500, "b", ids=True))  # live ones too
        await wait_until(lambda: len(fast) == 800 and len(plain) == 800, timeout=20)
        assert fast == plain
        assert [q for _, _, q in fast] == [a.seq for a in acks]
        assert fast[1] == (S.state_subject("task", "o/a1"), b'{"i":1}', acks[1].seq)  # one with headers
        assert _state(wf) == _state(wp) == (801, acks[-1].seq, 800, 800)
        assert wf._sub._sub._pending_queue.qsize() == 0 and wf._receiver.resets == 0
        assert wf._receiver.taken == 800  # every one from the parser, none through nats-py's queue
        await wp.stop()
        await wf.stop()
    finally:
        await bus.close()


async def test_a_gap_starts_a_consumer_after_the_last_message_handed_on(nats_server) -> None:
    bus = await Bus.connect(nats_server.url)
    try:
        await bus.ensure_streams()
        acks = await bus.publish_all(_items(50, "a"))
        got: list[tuple[str, bytes, int]] = []
        w = await _watch(bus, got)
        sub = w._sub._sub
        old_sid = sub._id
        # the parser hands over a delivery whose consumer sequence skips one (a message lost on the way)
        reply = f"$JS.ACK.{S.STATE_STREAM}.{w._sub._consumer}.1.{acks[-1].seq + 7}.52.0.0"
        await bus.nc._process_msg(old_sid, b"busched.state.task.o.lost", reply.encode(), b"{}", None)
        assert w._receiver.resets == 1 and sub._id != old_sid  # nats-py's reset: a new subscription id
        acks += await bus.publish_all(_items(50, "b"))
        await wait_until(lambda: len(got) >= 100, timeout=20)
        await asyncio.sleep(0.2)
        assert [q for _, _, q in got] == [a.seq for a in acks]  # the lost one dropped, nothing twice, none missed
        assert sub._pending_queue.qsize() == 0 and sub._received >= 100  # the new id is taken directly too
        await w.stop()
    finally:
        await bus.close()


async def test_flow_control_is_answered_under_a_burst(nats_server) -> None:
    bus = await Bus.connect(nats_server.url)
    try:
        await bus.ensure_streams()
        controls = 0
        got: list[tuple[str, bytes, int]] = []
        w = await _watch(bus, got)
        receiver = w._receiver
        plain_call = type(receiver).__call__

        def counting(sid: int, subject: bytes, reply: bytes, data: bytes, headers: Any) -> Any:
            nonlocal controls
            controls += bool(headers and b"FlowControl" in headers)
            return plain_call(receiver, sid, subject, reply, data, headers)

        bus.nc.__dict__["_busched_direct_raw"][w._sub._sub._id] = counting
        body = b"x" * 4000
        n = 0
        for k in range(6):  # ~24 MB: past the server's pending bytes, so it asks for flow control
            acks = await bus.publish_all((S.state_subject("task", f"o/c{k}-{i}"), body, None) for i in range(1000))
            assert all(a.ok for a in acks)
            n += 1000
        await wait_until(lambda: len(got) == n, timeout=30)  # unanswered flow control would stall the consumer
        assert controls >= 1
        assert [q for _, _, q in got] == list(range(got[0][2], got[0][2] + n))
        await w.stop()
    finally:
        await bus.close()


async def test_a_lost_consumer_is_started_again_after_two_missed_heartbeats(nats_server) -> None:
    bus = await Bus.connect(nats_server.url)
    try:
        await bus.ensure_streams()
        acks = await bus.publish_all(_items(20, "a"))
        got: list[tuple[str, bytes, int]] = []
        w = await _watch(bus, got, idle_heartbeat=0.3)
        for _ in range(5):  # (a busy host may have replaced it already: heartbeats late; then its successor)
            before = w._receiver.resets
            try:
                await bus.js.delete_consumer(S.STATE_STREAM, w._sub._consumer)  # no more messages nor heartbeats
                break
            except nats.js.errors.NotFoundError:
                await asyncio.sleep(0.5)
        await wait_until(lambda: w._receiver.resets > before, timeout=10)
        acks += await bus.publish_all(_items(20, "b"))
        await wait_until(lambda: len(got) >= 40, timeout=10)
        assert [q for _, _, q in got] == [a.seq for a in acks]
        assert w._sub._sub._pending_queue.qsize() == 0
        await w.stop()
    finally:
        await bus.close()


async def _lose_consumer(bus: Bus, w: Any) -> None:
    """Delete the watch's consumer (no more messages nor heartbeats) and wait for nats-py's heartbeat check to
    replace it."""
    for _ in range(5):  # (a busy host may have replaced it already: heartbeats late; then its successor)
        before = w._receiver.resets
        try:
            await bus.js.delete_consumer(S.STATE_STREAM, w._sub._consumer)
            break
        except nats.js.errors.NotFoundError:
            await asyncio.sleep(0.5)
    await wait_until(lambda: w._receiver.resets > before, timeout=10)


async def test_a_reset_before_any_delivery_starts_where_the_first_consumer_started(nats_server) -> None:
    # a restart's watch starts after its checkpoint; lost before its first message, nats-py's reset would
    # start the new consumer at stream sequence 1 and replay everything the checkpoint covered
    bus = await Bus.connect(nats_server.url)
    try:
        await bus.ensure_streams()
        old = await bus.publish_all(_items(30, "a"))
        got: list[tuple[str, bytes, int]] = []
        w = await _watch(bus, got, start=old[-1].seq + 1, idle_heartbeat=0.3)
        await _lose_consumer(bus, w)
        acks = await bus.publish_all(_items(5, "b"))
        await wait_until(lambda: len(got) >= 5, timeout=10)
        await asyncio.sleep(0.3)
        assert [q for _, _, q in got] == [a.seq for a in acks]  # none of the 30 before the start
        await w.stop()
    finally:
        await bus.close()


async def test_a_reset_before_any_delivery_keeps_the_last_per_subject_policy(nats_server) -> None:
    bus = await Bus.connect(nats_server.url)
    try:
        await bus.ensure_streams()
        await bus.publish_all(_items(10, "a"))
        got: list[tuple[str, bytes, int]] = []
        quiet = S.state_subject("task", "o/none") + ".>"  # nothing there yet: nothing delivered
        w = await watch_state(bus.js, batch_handler=got.extend, subject=quiet, idle_heartbeat=0.3)
        assert w._receiver is not None
        old_consumer = w._sub._consumer
        await _lose_consumer(bus, w)
        await wait_until(lambda: w._sub._consumer != old_consumer, timeout=10)
        info = await bus.js.consumer_info(S.STATE_STREAM, w._sub._consumer)
        assert info.config.deliver_policy == nats.js.api.DeliverPolicy.LAST_PER_SUBJECT
        assert not info.config.opt_start_seq
        await w.stop()
    finally:
        await bus.close()


async def test_a_purge_is_followed(nats_server) -> None:
    bus = await Bus.connect(nats_server.url)
    try:
        await bus.ensure_streams()
        await bus.publish_all(_items(30, "a"))
        got: list[tuple[str, bytes, int]] = []
        w = await _watch(bus, got)
        await bus.js.purge_stream(S.STATE_STREAM)
        acks = await bus.publish_all(_items(30, "b"))
        await wait_until(lambda: len(got) >= 60, timeout=10)
        assert [q for _, _, q in got[30:]] == [a.seq for a in acks]
        await w.stop()
    finally:
        await bus.close()


async def test_the_schedulers_watch_takes_the_parsers_path_after_narrowing(harness) -> None:
    sched = await harness.scheduler(run=False)
    w = sched.watch
    assert w._receiver is not None and w.subjects != [f"{S.STATE_PREFIX}.>"]  # narrowed, and still direct
    writer = await harness.bus()
    await writer.ensure_streams()
    before, taken = w._sub._sub._received, w._receiver.taken
    await writer.publish_all([(S.state_subject("queue", "q1"), b'{"kind":"queue.upsert","queue":{"name":"q1"}}', None)])
    await wait_until(lambda: w._sub._sub._received > before, timeout=10)
    assert w._receiver.taken == taken + 1  # handed on from the parser
    assert w._sub._sub._pending_queue.qsize() == 0 and w._sub._sub._jsi._fciseq >= 1
