"""Live feeds from the streams: the state watch every reader follows, and a node's decision feed.

Both are long-lived subscriptions whose callbacks run once per message, so they live apart from
the one-off reads (`busched.bus.reads`) and read a delivery's stream position straight from its
``$JS.ACK`` reply subject instead of through nats-py's slower metadata parsing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import nats.js.errors
from nats.js import api

from busched.bus import ordered
from busched.bus import subjects as S
from busched.bus.asks import ask
from busched.bus.errors import BusError, unsubscribe_quietly
from busched.bus.streams import stream_last_seq

__all__ = ["Delivery", "StateWatch", "DecisionFeed", "watch_state", "open_decision_feed", "stream_position",
           "delivery_position", "JS_API"]

log = logging.getLogger("busched.bus")

JS_API = "$JS.API"  # the JetStream API prefix (no domains)

StateHandler = Callable[[str, bytes, int], None]
StateBatchHandler = Callable[[list[tuple[str, bytes, int]]], None]


@dataclass
class Delivery:
    """One decision handed to an agent."""

    subject: str
    data: bytes
    stream_seq: int
    num_delivered: int
    _msg: Any

    async def ack(self) -> None:
        await self._msg.ack()

    async def nak(self, delay: float | None = None) -> None:
        await self._msg.nak(delay=delay)


def stream_position(m: Any) -> tuple[int, int]:
    """(stream sequence, messages pending) of a JetStream delivery, read from its reply subject; (-1, 0) if none.

    ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>``; nats-py's ``metadata`` (used for
    the longer form with domain and account) parses the same at several times the cost.
    """
    reply = m.reply
    if reply and reply.startswith("$JS.ACK."):
        t = reply.split(".")
        try:
            if len(t) == 9:
                return int(t[5]), int(t[8])
        except ValueError:
            pass
    try:
        md = m.metadata
        return md.sequence.stream, md.num_pending
    except Exception:  # noqa: BLE001 - not a stream message
        return -1, 0


def delivery_position(m: Any) -> tuple[int, int]:
    """(stream sequence, times delivered) of a pull delivery, from its ``$JS.ACK`` reply subject."""
    t = (m.reply or "").split(".")
    if len(t) == 9 and t[0] == "$JS" and t[1] == "ACK":
        try:
            return int(t[5]), int(t[4])
        except ValueError:
            pass
    md = m.metadata
    return md.sequence.stream, md.num_delivered


# -- the state watch ---------------------------------------------------------------------------------------------
class StateWatch:
    """A live view of the state stream: every object's latest event first, then new ones as they come."""

    def __init__(self) -> None:
        self.caught_up = asyncio.Event()
        self.target = 0
        self.last_seq = 0
        self.count = 0
        self.pending = 0  # messages the stream still had for this watch after the last one received
        self.subjects: list[str] = []  # what is followed
        self._sub: Any = None
        self._receiver: ordered.OrderedReceiver | None = None  # the parser hands messages over (busched.bus.ordered)
        self._follow: Callable[[list[str]], Awaitable[None]] | None = None

    async def narrow(self, subjects: list[str]) -> None:
        """From the message after the last one handled, follow only ``subjects`` (e.g. leave out a
        reader's own records once it has caught up with them): the consumer is replaced by one
        filtered on those subjects that starts at that stream sequence, so nothing is skipped and
        nothing is handled twice."""
        if self._follow is None:
            raise BusError("this watch has stopped")
        if not self.caught_up.is_set():
            raise BusError("a state watch can only be narrowed once it has caught up")
        await self._follow(list(subjects))

    def _drop_receiver(self) -> None:
        if self._receiver is not None:
            self._receiver.stop()
            self._receiver = None

    async def stop(self) -> None:
        self._follow = None
        if self._sub is not None:
            self._drop_receiver()
            await unsubscribe_quietly(self._sub)
            self._sub = None


async def watch_state(js: Any, handler: StateHandler | None = None, *, subject: str = f"{S.STATE_PREFIX}.>",
                      batch_handler: StateBatchHandler | None = None, max_batch: int = 8192,
                      start: int = 0, direct_receipt: bool = True, idle_heartbeat: float | None = None) -> StateWatch:
    """`Bus.watch_state` over the JetStream context ``js`` (see there).  ``direct_receipt``: messages straight
    from the parser (`busched.bus.ordered`; False: through nats-py's ``Msg``, queue and task);
    ``idle_heartbeat``: the consumer's, in seconds (nats-py's 5 by default; two missed make it start over)."""
    if (handler is None) == (batch_handler is None):
        raise TypeError("watch_state needs exactly one of handler and batch_handler")
    if batch_handler is None:
        per_message = handler

        def batch_handler(items: list[tuple[str, bytes, int]]) -> None:
            for subj, data, seq in items:
                try:
                    per_message(subj, data, seq)  # type: ignore[misc]
                except Exception:  # noqa: BLE001 - a bad handler must not stop the feed
                    log.exception("state handler failed on %s (seq %d)", subj, seq)

    w = StateWatch()
    w.target = await stream_last_seq(js, S.STATE_STREAM)
    if start:  # what came before ``start`` is known already (a checkpoint): every message from there on
        w.last_seq = start - 1
    if w.target < max(start, 1):
        w.caught_up.set()
    loop = asyncio.get_running_loop()
    buf: list[tuple[str, bytes, int]] = []
    scheduled = False
    caught = [w.target < max(start, 1)]  # seen the message that completes the catch-up
    current = [0]  # the subscription messages are taken from; others' late deliveries are dropped

    def flush() -> None:
        nonlocal buf, scheduled
        scheduled = False
        if not buf:
            return
        items, buf = buf, []
        try:
            batch_handler(items)
        except Exception:  # noqa: BLE001 - a bad handler must not stop the feed
            log.exception("state handler failed on a batch of %d (seq %d-%d)", len(items), items[0][2],
                          items[-1][2])
        w.last_seq = items[-1][2]
        w.count += len(items)
        if caught[0] and not w.caught_up.is_set():
            w.caught_up.set()

    async def subscribe(subjects: list[str], start: int) -> None:
        current[0] += 1
        mine = current[0]

        def take(subj: str, data: bytes, seq: int, pending: int) -> None:
            nonlocal scheduled
            w.pending = pending
            buf.append((subj, data, seq))
            if not caught[0] and (seq >= w.target or pending == 0):
                caught[0] = True
            if len(buf) >= max_batch:
                flush()
            elif not scheduled:
                scheduled = True
                loop.call_soon(flush)  # runs once the messages already received (the parser's read) are in

        async def cb(m: Any) -> None:  # through nats-py's Msg, queue and task (when `ordered.attach` cannot)
            if current[0] != mine:
                return  # the subscription was replaced: its successor delivers this one again
            seq, pending = stream_position(m)
            if seq < 0:
                return  # not a stream message
            take(m.subject, m.data, seq, pending)

        def direct_cb(subj: bytes, data: bytes, seq: int, pending: int) -> None:  # straight from the parser
            if current[0] == mine:
                take(subj.decode(), data, seq, pending)

        old, w._sub = w._sub, None
        if old is not None:
            w._drop_receiver()
            await unsubscribe_quietly(old)

        def create() -> Awaitable[Any]:  # a fresh config each ask: nats-py writes its delivery inbox into it
            if start:
                cfg = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start)
            else:
                cfg = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT)
            if len(subjects) > 1:
                cfg.filter_subjects = subjects
            if idle_heartbeat:
                cfg.idle_heartbeat = idle_heartbeat
            return js.subscribe(subjects[0], stream=S.STATE_STREAM, cb=cb, ordered_consumer=True, config=cfg,
                                pending_msgs_limit=1_000_000, pending_bytes_limit=1024 * 1024 * 1024)

        # a NATS cluster electing its JetStream leader drops such requests (or has no responder yet): asked
        # again (`busched.bus.asks`), a consumer a lost answer made is dropped by the server once inactive
        w._sub = await ask("consumer.create", create, detail=S.STATE_STREAM)
        w._receiver = ordered.attach(getattr(js, "_nc", None), w._sub, direct_cb) if direct_receipt else None
        w.subjects = subjects

    async def follow(subjects: list[str]) -> None:
        current[0] += 1  # from here the old subscription's deliveries are dropped ...
        flush()  # ... after what it already handed over is handled
        await subscribe(subjects, w.last_seq + 1)

    await subscribe([subject], start)
    w._follow = follow
    return w


# -- the decision feed -------------------------------------------------------------------------------------------
class _PullRequest(msgspec.Struct):
    batch: int
    expires: int  # nanoseconds


_PULL_ENCODE = msgspec.json.Encoder().encode


class DecisionFeed:
    """A node's durable pull consumer on the decision stream, answering as soon as decisions arrive.

    One pull request (``batch`` messages, expiring after ``timeout``) is kept outstanding; `fetch`
    returns every decision delivered so far as soon as there is at least one, instead of waiting for
    the request to fill up or expire as nats-py's ``fetch`` does once a lingering request has
    delivered its first message (which held a node's binds for up to the whole timeout).  Each
    request has a reply subject of its own under one inbox subscription, so the server's status
    answers (408 expired, 409, ...) end the request they belong to and a late status of an old
    request is ignored.  Only the API subjects the agent's permissions allow are used
    (``CONSUMER.INFO``/``CREATE`` once, ``CONSUMER.MSG.NEXT``, ``$JS.ACK``, its own inbox).
    """

    def __init__(self, nc: Any, node: str, next_subject: str, inbox: str) -> None:
        self._nc = nc
        self.node = node
        self._next = next_subject
        self._inbox = inbox
        self._sub: Any = None
        self._buf: deque[Any] = deque()
        self._ready = asyncio.Event()
        self._requests = 0  # pull requests sent
        self._token = 0  # the outstanding request's number, 0 when none
        self._refused = False  # the last request ended with an error status (409 ...): pause before the next
        self._left = 0  # messages the outstanding request may still deliver
        self._expires = 0.0  # monotonic time it expires at

    async def _start(self) -> None:
        prefix = self._inbox + "."

        async def cb(m: Any) -> None:
            hdr = m.headers
            if not m.data and hdr and hdr.get("Status"):
                # the end of a pull request: 404/408 (nothing left, expired), 409 (e.g. too many waiting)
                status = hdr.get("Status")
                if status == "100":
                    return  # an idle heartbeat (not asked for)
                if m.subject == f"{prefix}{self._token}":
                    self._token = 0
                    self._refused = status not in ("404", "408")
                    self._ready.set()  # the waiting fetch sends a new request
                if status not in ("404", "408"):
                    log.debug("node %s: pull request ended: %s %s", self.node, status, hdr.get("Description", ""))
                return
            self._left -= 1
            self._buf.append(m)
            self._ready.set()

        self._sub = await self._nc.subscribe(prefix + "*", cb=cb, pending_msgs_limit=1_000_000)

    async def fetch(self, batch: int = 64, timeout: float = 1.0) -> list[Delivery]:
        """The decisions delivered so far (at most ``batch``); waits up to ``timeout`` for the first."""
        if not self._buf:
            deadline = time.monotonic() + timeout
            while not self._buf:
                now = time.monotonic()
                if now >= deadline:
                    return []
                if self._token == 0 or self._left <= 0 or now >= self._expires:
                    if self._refused:
                        self._refused = False
                        await asyncio.sleep(min(0.2, deadline - now))  # no busy loop against a refusing server
                        continue
                    await self._pull(batch, timeout)
                if self._buf:
                    break
                self._ready.clear()
                try:
                    await asyncio.wait_for(self._ready.wait(), max(0.0, min(deadline, self._expires) - now))
                except asyncio.TimeoutError:
                    pass
        out: list[Delivery] = []
        buf = self._buf
        while buf and len(out) < batch:
            m = buf.popleft()
            sseq, delivered = delivery_position(m)
            out.append(Delivery(m.subject, m.data, sseq, delivered, m))
        return out

    async def _pull(self, batch: int, timeout: float) -> None:
        self._requests += 1
        self._token = self._requests
        self._left = batch
        self._expires = time.monotonic() + timeout
        req = _PULL_ENCODE(_PullRequest(batch=batch, expires=int(timeout * 1e9)))
        await self._nc.publish(self._next, req, reply=f"{self._inbox}.{self._token}")

    async def stop(self) -> None:
        if self._sub is not None:
            await unsubscribe_quietly(self._sub)
            self._sub = None


async def open_decision_feed(nc: Any, js: Any, node: str | list[str], *, ack_wait: float = 30.0) -> DecisionFeed:
    """`Bus.decision_feed` over the connection ``nc`` and its JetStream context ``js`` (see there)."""
    nodes = [node] if isinstance(node, str) else list(node)
    if not nodes:
        raise BusError("a decision feed needs at least one node")
    if len(nodes) == 1:
        durable = S.agent_consumer(nodes[0])
        filters: dict[str, Any] = {"filter_subject": S.node_decisions(nodes[0])}
        policy = api.DeliverPolicy.ALL
        pending = 1000
    else:
        durable = S.fleet_consumer(nodes)
        filters = {"filter_subjects": [S.node_decisions(n) for n in nodes]}
        policy = api.DeliverPolicy.NEW
        pending = min(100_000, 1000 * len(nodes))
    try:
        await ask("consumer.info", lambda: js.consumer_info(S.DECISION_STREAM, durable), detail=durable)
    except nats.js.errors.NotFoundError:
        cfg = api.ConsumerConfig(name=durable, durable_name=durable, ack_policy=api.AckPolicy.EXPLICIT,
                                 deliver_policy=policy, ack_wait=ack_wait, max_ack_pending=pending, **filters)
        # (a durable: idempotent by config, the same consumer made again is the one there)
        await ask("consumer.create", lambda: js.add_consumer(S.DECISION_STREAM, config=cfg), detail=durable)
    feed = DecisionFeed(nc, nodes[0] if len(nodes) == 1 else durable,
                        f"{JS_API}.CONSUMER.MSG.NEXT.{S.DECISION_STREAM}.{durable}", nc.new_inbox())
    await feed._start()
    return feed
