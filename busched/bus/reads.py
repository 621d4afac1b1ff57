"""One-off reads of the streams, and the deletes that keep them tidy.

A restarting scheduler, an agent reading back its earlier answers, `busched delete` and replay
read what the streams hold now and are done; these are plain functions over a JetStream context
(and, where an inbox is needed, its connection), so `Bus` only passes its own through.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import nats.js.errors
from nats.js import api

from busched.bus import asks
from busched.bus import subjects as S
from busched.bus.asks import ONCE, Policy, ask, given_up, unanswered
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
DECISION_READ = Policy(ask_s=DECISION_READ_TIMEOUT, asks=1, total_s=DECISION_READ_TIMEOUT)  # one ask, counted
# a direct get: "no responders" is also the lasting answer of a stream made without direct gets (an old busched's,
# read as given by its callers), so quick refusals end after 4 asks (~1.75 s); unanswered asks still get 12 s.
# Which of the two it was is then asked of the stream's config (`_allows_direct`): a stream that allows direct
# gets was only electing (its replicas unsubscribed until a leader is back), and is asked again for what is
# left of `asks.ASKING`'s bound
DIRECT_GET = Policy(asks=4)


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
    info = await ask("stream.info", lambda: js.stream_info(S.STATE_STREAM, subjects_filter=subject), detail=subject)
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
    cfg = api.ConsumerConfig(name=name, filter_subject=subject, deliver_subject=inbox,
                             deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT, ack_policy=api.AckPolicy.NONE,
                             inactive_threshold=30.0, mem_storage=True)
    try:  # (named: idempotent by config, the same consumer made again is the one there)
        made = await ask("consumer.create", lambda: js.add_consumer(S.STATE_STREAM, config=cfg), detail=name)
        if not getattr(made, "num_pending", 1):
            # nothing to deliver: the subjects the stream's info named were purged since (a scheduler's hygiene
            # after a delete); waiting for a last message would wait the whole timeout
            return out
        await _until_delivered(js, name, done, out, timeout)
    finally:
        await unsubscribe_quietly(sub)
        try:  # one short ask: it goes by itself after inactive_threshold
            await ask("consumer.delete", lambda: js.delete_consumer(S.STATE_STREAM, name), ONCE, detail=name)
        except Exception:  # noqa: BLE001
            pass
    return out


async def _until_delivered(js: Any, name: str, done: asyncio.Event, out: list[Any], timeout: float) -> None:
    """Wait until the last message says nothing is pending; a second without a message, ask the consumer: a
    purge during the delivery (of messages not delivered yet) leaves no message saying so, and the consumer
    then has nothing pending.  TimeoutError after ``timeout``, as before."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        seen = len(out)
        left = deadline - loop.time()
        if left <= 0:
            raise asyncio.TimeoutError
        try:
            await asyncio.wait_for(done.wait(), min(1.0, left))
            return
        except asyncio.TimeoutError:
            if len(out) != seen:
                continue  # still arriving
        try:
            info = await ask("consumer.info", lambda: js.consumer_info(S.STATE_STREAM, name), ONCE, detail=name)
        except Exception:  # noqa: BLE001 - cannot be told: wait on
            continue
        if not info.num_pending and len(out) == seen:
            return


async def last_msg(js: Any, stream: str, subject: str, *, direct: bool = False) -> tuple[int, bytes] | None:
    """The last message of one subject of ``stream``, ``(stream sequence, data)``, or None if it has none.
    ``direct``: a direct get on a subject that names the object (``$JS.API.DIRECT.GET.<stream>.<subject>``),
    which a server can allow one agent for its own nodes only.  A direct get refused past `DIRECT_GET`'s asks
    asks the stream's config (`_allows_direct`) and, if it allows direct gets, is asked again; all of it
    within `asks.ASKING`'s bound, counted given up only when the read fails."""
    try:
        if direct:
            m = await _direct_get(js, stream, subject)
        else:
            m = await ask("msg.get", lambda: js.get_last_msg(stream, subject), detail=subject)
    except nats.js.errors.NotFoundError:
        return None
    except Exception as e:  # noqa: BLE001
        raise BusError(f"cannot read {subject}: {e}") from None
    return int(m.seq), bytes(m.data or b"")


async def _direct_get(js: Any, stream: str, subject: str) -> Any:
    """`last_msg`'s direct get: a first round of `DIRECT_GET`'s few asks (a lasting "no responders" is told
    soon), then, for a refusal from a stream that allows direct gets, a second round; one bound for all."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    deadline = start + asks.ASKING.total_s
    get = lambda: js.get_last_msg(stream, subject, direct=True)  # noqa: E731
    try:
        return await ask("direct.get", get, DIRECT_GET, detail=subject, last=False)
    except Exception as e:  # noqa: BLE001
        reason = unanswered(e)
        if reason is None:
            raise
        left = 0.0  # (what the bound leaves a second round: none unless the stream allows direct gets)
        if reason in ("no_responders", "unavailable") and await _allows_direct(js, stream, deadline - loop.time()):
            left = deadline - loop.time()
        if left <= 0:
            given_up("direct.get", subject, DIRECT_GET.asks, loop.time() - start, [reason])
            raise
    return await ask("direct.get", get, _within(asks.ASKING, left), detail=subject)


def _within(policy: Policy, left: float) -> Policy:
    """``policy`` cut to the ``left`` seconds of a bound it shares with earlier asks."""
    return Policy(ask_s=min(policy.ask_s, left), asks=policy.asks, total_s=left, pause_s=policy.pause_s)


async def _allows_direct(js: Any, stream: str, left: float) -> bool:
    """Whether ``stream`` is configured for direct gets (so "no responders" to one was a cluster electing, not a
    lasting refusal), asked within ``left`` seconds; False when that cannot be told in time."""
    if left <= 0:
        return False
    try:
        info = await ask("stream.info", lambda: js.stream_info(stream), _within(asks.ASKING, left), detail=stream)
    except Exception:  # noqa: BLE001 - cannot be told: the refusal stands
        return False
    return bool(getattr(info.config, "allow_direct", False))


async def subject_history(js: Any, subject: str, timeout: float = 10.0) -> list[tuple[int, bytes]]:
    """Every message the state stream still holds on one subject, oldest first."""
    out: list[tuple[int, bytes]] = []
    info = await ask("stream.info", lambda: js.stream_info(S.STATE_STREAM, subjects_filter=subject), detail=subject)
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
    # (a fresh copy of the config each ask: nats-py writes its delivery inbox into it)
    sub = await ask("consumer.create", lambda: js.subscribe(subject, stream=stream, cb=cb, ordered_consumer=True,
                                                            config=copy.copy(config), **limits), detail=stream)
    try:
        await asyncio.wait_for(done.wait(), timeout)
    finally:
        await unsubscribe_quietly(sub)
    return out


# A purge is asked once, waited on as the client's own request was (10 s), a refusal failing it at once.
# Asked again every 2 s, a burst of purges (a few thousand tasks deleted in one cycle: three subjects each)
# that takes the server over 2 s to drain never sees an answer: each round's copies queue behind the one
# before (10,000 purges: all failed after 22 s, where one ask each all succeeded in 4 s); and a purge of
# a whole subject (no ``before_seq``) made twice would erase a message written between the two.
PURGE = Policy(ask_s=10.0, asks=1, total_s=10.0)


class _FencedError(Exception):
    """The bus's fence refused a write before it left the process."""


async def purge_state(js: Any, subject: str, before_seq: int | None = None,
                      may_write: Callable[[], bool] | None = None) -> bool:
    """Remove a state subject's messages (those below ``before_seq`` only, when given): stream hygiene
    once the object they describe is gone.  One ask (`PURGE`), sent only while ``may_write`` (the bus's
    fence) allows it: never asked again (see `PURGE`); a purge not done is left to the stream's limits."""

    def purge() -> Awaitable[Any]:
        if may_write is not None and not may_write():
            raise _FencedError
        return js.purge_stream(S.STATE_STREAM, subject=subject, seq=before_seq)

    try:
        return bool(await ask("stream.purge", purge, PURGE, detail=subject))
    except _FencedError:
        return False
    except Exception as e:  # noqa: BLE001
        log.warning("cannot purge %s: %s", subject, e)
        return False


async def consumer_delivered(js: Any, consumer: str) -> int | None:
    """The highest decision-stream sequence a durable consumer has delivered: 0 when the consumer does not
    exist, None when it cannot be told (so nothing may be concluded)."""
    try:
        info = await ask("consumer.info", lambda: js.consumer_info(S.DECISION_STREAM, consumer), DECISION_READ,
                         detail=consumer)
    except nats.js.errors.NotFoundError:
        return 0
    except Exception as e:  # noqa: BLE001
        log.warning("cannot read consumer %s: %s", consumer, str(e) or type(e).__name__)
        return None
    return int(info.delivered.stream_seq or 0) if info.delivered is not None else 0


async def delete_decision(js: Any, seq: int) -> bool | None:
    """Delete one decision (one its agent must no longer get): True deleted, False gone already (it can no
    longer be delivered), None when the outcome is unknown (unanswered, refused): it may still be delivered."""
    try:
        return bool(await ask("msg.delete", lambda: js.delete_msg(S.DECISION_STREAM, seq), DECISION_READ,
                              detail=str(seq))) or None
    except nats.js.errors.NotFoundError:
        return False
    except Exception as e:  # noqa: BLE001
        log.warning("cannot delete decision %d: %s", seq, str(e) or type(e).__name__)
        return None
