"""One-off reads of the streams, and the deletes that keep them tidy.

A restarting scheduler, an agent reading back its earlier answers, `busched delete` and replay
read what the streams hold now and are done; these are plain functions over a JetStream context
(and, where an inbox is needed, its connection), so `Bus` only passes its own through.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import nats.js.errors
from nats.js import api

from busched.bus import subjects as S
from busched.bus.errors import BusError, unsubscribe_quietly
from busched.bus.feeds import stream_position, watch_state

__all__ = ["read_state", "last_per_subject", "last_msg", "subject_history", "read_ordered", "purge_state",
           "consumer_delivered", "delete_decision"]

log = logging.getLogger("busched.bus")

# how long the scheduler's questions about one lapsed bind (delete its decision, how far its consumer
# delivered) may take: both are asked within a cycle, and on a NATS cluster a stream or consumer that lost its
# leader leaves such requests unanswered for seconds (JetStream's default wait, 10 s, held a cycle for 10 s);
# no answer in time is "cannot be told", the cautious branch
DECISION_READ_TIMEOUT = 2.0


async def read_state(js: Any, subject: str = f"{S.STATE_PREFIX}.>", timeout: float = 10.0) -> list[tuple[str, bytes]]:
    """The latest message of every matching state subject (a one-off read, e.g. for `busched delete`)."""
    out: list[tuple[str, bytes]] = []
    w = await watch_state(js, lambda s, d, q: out.append((s, d)), subject=subject)
    try:
        await asyncio.wait_for(w.caught_up.wait(), timeout)
    finally:
        await w.stop()
    return out


async def last_per_subject(nc: Any, js: Any, subject: str, timeout: float = 10.0) -> list[tuple[str, int, bytes]]:
    """`Bus.last_per_subject` (see there)."""
    info = await js.stream_info(S.STATE_STREAM, subjects_filter=subject)
    if not (info.state.subjects or {}):
        return []
    out: list[tuple[str, int, bytes]] = []
    done = asyncio.Event()
    inbox = nc.new_inbox()

    async def cb(m: Any) -> None:
        if not m.reply:
            return  # an idle heartbeat or a status
        seq, pending = stream_position(m)
        out.append((m.subject, seq, bytes(m.data or b"")))
        if pending == 0:
            done.set()

    sub = await nc.subscribe(inbox, cb=cb, pending_msgs_limit=1_000_000)
    name = f"read-{uuid.uuid4().hex[:16]}"
    try:
        await js.add_consumer(S.STATE_STREAM, config=api.ConsumerConfig(
            name=name, filter_subject=subject, deliver_subject=inbox,
            deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT, ack_policy=api.AckPolicy.NONE,
            inactive_threshold=30.0, mem_storage=True))
        await asyncio.wait_for(done.wait(), timeout)
    finally:
        await unsubscribe_quietly(sub)
        try:
            await js.delete_consumer(S.STATE_STREAM, name)
        except Exception:  # noqa: BLE001 - it goes by itself after inactive_threshold
            pass
    return out


async def last_msg(js: Any, stream: str, subject: str, *, direct: bool = False) -> tuple[int, bytes] | None:
    """The last message of one subject of ``stream``, ``(stream sequence, data)``, or None if it has none.
    ``direct``: a direct get on a subject that names the object (``$JS.API.DIRECT.GET.<stream>.<subject>``),
    which a server can allow one agent for its own nodes only."""
    try:
        m = await js.get_last_msg(stream, subject, direct=direct)
    except nats.js.errors.NotFoundError:
        return None
    except Exception as e:  # noqa: BLE001
        raise BusError(f"cannot read {subject}: {e}") from None
    return int(m.seq), bytes(m.data or b"")


async def subject_history(js: Any, subject: str, timeout: float = 10.0) -> list[tuple[int, bytes]]:
    """Every message the state stream still holds on one subject, oldest first."""
    out: list[tuple[int, bytes]] = []
    info = await js.stream_info(S.STATE_STREAM, subjects_filter=subject)
    if not (info.state.subjects or {}).get(subject):
        return out
    last = await last_msg(js, S.STATE_STREAM, subject)
    if last is None:
        return out
    got = await read_ordered(js, S.STATE_STREAM, subject, api.ConsumerConfig(
        deliver_policy=api.DeliverPolicy.ALL), until=last[0], timeout=timeout)
    return [(seq, data) for _, seq, data, _ in got]


async def read_ordered(js: Any, stream: str, subject: str, config: Any, *, until: int, timeout: float,
                       big: bool = False) -> list[tuple[str, int, bytes, Any]]:
    """The messages an ordered consumer on ``stream`` (filter ``subject``, start as ``config`` says)
    delivers up to stream sequence ``until``, as ``(subject, sequence, data, headers)``.  ``big``: room
    for a whole stream in the client's buffers."""
    out: list[tuple[str, int, bytes, Any]] = []
    done = asyncio.Event()

    async def cb(m: Any) -> None:
        seq, _ = stream_position(m)
        if seq < 0:
            return  # not a stream message
        out.append((m.subject, seq, bytes(m.data or b""), m.headers))
        if seq >= until:
            done.set()

    limits = dict(pending_msgs_limit=10_000_000, pending_bytes_limit=4 * 1024 ** 3) if big else {}
    sub = await js.subscribe(subject, stream=stream, cb=cb, ordered_consumer=True, config=config, **limits)
    try:
        await asyncio.wait_for(done.wait(), timeout)
    finally:
        await unsubscribe_quietly(sub)
    return out


async def purge_state(js: Any, subject: str, before_seq: int | None = None) -> bool:
    """Remove a state subject's messages (those below ``before_seq`` only, when given): stream hygiene
    once the object they describe is gone."""
    try:
        return bool(await js.purge_stream(S.STATE_STREAM, subject=subject, seq=before_seq))
    except Exception as e:  # noqa: BLE001
        log.warning("cannot purge %s: %s", subject, e)
        return False


async def consumer_delivered(js: Any, consumer: str) -> int | None:
    """The highest decision-stream sequence a durable consumer has delivered: 0 when the consumer does not
    exist, None when it cannot be told (so nothing may be concluded)."""
    try:
        info = await js.consumer_info(S.DECISION_STREAM, consumer, timeout=DECISION_READ_TIMEOUT)
    except nats.js.errors.NotFoundError:
        return 0
    except Exception as e:  # noqa: BLE001
        log.warning("cannot read consumer %s: %s", consumer, str(e) or type(e).__name__)
        return None
    return int(info.delivered.stream_seq or 0) if info.delivered is not None else 0


async def delete_decision(js: Any, seq: int) -> bool:
    """Delete one decision (one its agent must no longer get); False when it is gone already or cannot be."""
    try:
        return bool(await asyncio.wait_for(js.delete_msg(S.DECISION_STREAM, seq), DECISION_READ_TIMEOUT))
    except nats.js.errors.NotFoundError:
        return False
    except Exception as e:  # noqa: BLE001
        log.warning("cannot delete decision %d: %s", seq, str(e) or type(e).__name__)
        return False
