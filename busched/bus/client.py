"""The one place busched talks to NATS.

`Bus` wraps a connection and its JetStream context with the few operations the
scheduler, the agents and the CLI need: make sure the streams exist, publish
messages (one at a time or many in flight), watch the state stream from the
latest value of every object and then live, keep a node's durable decision
consumer, core subscriptions and request/reply.  Handlers get plain values
(subject, bytes, sequence numbers), never nats objects.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import msgspec
import nats
import nats.errors
import nats.js.errors
from nats.js import api

from busched.bus import subjects as S
from busched.bus.connect import NatsOptions
from busched.bus.messages import GetReply, Msg, encode

__all__ = ["Bus", "Ack", "Delivery", "DecisionFeed", "StateWatch", "StreamSettings", "BusError"]

log = logging.getLogger("busched.bus")

MSG_ID = "Nats-Msg-Id"
EXPECT_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
WRONG_LAST_SEQUENCE = 10071  # JetStream's error code for a failed expected-last-subject-sequence
JS_API = "$JS.API"  # the JetStream API prefix (no domains)


class _PubAck(msgspec.Struct):
    """A JetStream publish acknowledgement, or its error."""

    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: dict[str, Any] | None = None


_ACK_DECODE = msgspec.json.Decoder(_PubAck).decode
_ENCODE = encode


class BusError(RuntimeError):
    pass


@dataclass
class Ack:
    seq: int = 0
    duplicate: bool = False
    error: str = ""
    conflict: bool = False  # a conditional write lost: the subject had moved past the expected sequence

    @property
    def ok(self) -> bool:
        return not self.error


@dataclass
class StreamSettings:
    state_history: int = 16  # messages kept per object subject on the state stream
    decision_max_age: float = 3600.0  # seconds a decision waits for its agent
    duplicate_window: float = 120.0  # seconds in which a republished Nats-Msg-Id is dropped
    storage: str = "file"  # file | memory
    history_max_age: float = 7 * 86400.0  # seconds the history streams keep cycle records and state copies; 0: none


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


def _stream_position(m: Any) -> tuple[int, int]:
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

    async def stop(self) -> None:
        self._follow = None
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception:  # noqa: BLE001 - closing anyway
                pass
            self._sub = None


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
            sseq, delivered = _delivery_position(m)
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
            try:
                await self._sub.unsubscribe()
            except Exception:  # noqa: BLE001
                pass
            self._sub = None


class _PullRequest(msgspec.Struct):
    batch: int
    expires: int  # nanoseconds


_PULL_ENCODE = msgspec.json.Encoder().encode


def _delivery_position(m: Any) -> tuple[int, int]:
    """(stream sequence, times delivered) of a pull delivery, from its ``$JS.ACK`` reply subject."""
    t = (m.reply or "").split(".")
    if len(t) == 9 and t[0] == "$JS" and t[1] == "ACK":
        try:
            return int(t[5]), int(t[4])
        except ValueError:
            pass
    md = m.metadata
    return md.sequence.stream, md.num_delivered


class Bus:
    def __init__(self, nc: Any, options: NatsOptions | None = None) -> None:
        self.nc = nc
        self.js = nc.jetstream(timeout=10)
        self.options = options
        self._subs: list[Any] = []
        self._closing = False
        self._async_lock = asyncio.Lock()
        self._ack_prefix = ""
        self._ack_futs: dict[str, asyncio.Future[Any]] = {}
        self._ack_counter = 0
        # told of every disconnection (False) and reconnection (True): a reader of heartbeats must not take
        # its own disconnection for its peers' silence
        self.connection_listeners: list[Callable[[bool], None]] = []

    def _connection_changed(self, connected: bool) -> None:
        for cb in list(self.connection_listeners):
            try:
                cb(connected)
            except Exception:  # noqa: BLE001
                log.exception("connection listener failed")

    # -- connection ------------------------------------------------------------------------------------------------
    @classmethod
    async def connect(cls, options: NatsOptions | str, *, name: str | None = None, wait: float = 10.0) -> Bus:
        """Connect, retrying for up to ``wait`` seconds; once connected, reconnect for ever."""
        if isinstance(options, str):
            options = NatsOptions(url=options)
        kw = options.connect_kwargs()
        if name:
            kw["name"] = name

        holder: list[Bus] = []

        async def on_error(e: Exception) -> None:
            # before the first connection, failures are retried and summed up by the BusError below
            log.log(logging.WARNING if holder else logging.DEBUG, "nats: %s", e)

        async def on_disconnect() -> None:
            if not (holder and holder[0]._closing):
                log.warning("nats: disconnected from %s", options.url)
            if holder:
                holder[0]._connection_changed(False)

        async def on_reconnect() -> None:
            log.info("nats: reconnected")
            if holder:
                holder[0]._connection_changed(True)

        try:
            nc = await asyncio.wait_for(nats.connect(error_cb=on_error, disconnected_cb=on_disconnect,
                                                     reconnected_cb=on_reconnect, max_reconnect_attempts=-1,
                                                     reconnect_time_wait=0.5, **kw), wait)
        except asyncio.TimeoutError:
            raise BusError(f"cannot connect to NATS at {options.url} within {wait:g}s") from None
        except Exception as e:  # noqa: BLE001 - any failure to connect is reported the same way
            raise BusError(f"cannot connect to NATS at {options.url}: {e or type(e).__name__}") from None
        bus = cls(nc, options)
        holder.append(bus)
        return bus

    @property
    def connected(self) -> bool:
        return bool(self.nc.is_connected)

    @property
    def max_payload(self) -> int:
        return int(self.nc.max_payload or 1024 * 1024)

    async def close(self) -> None:
        self._closing = True
        for s in self._subs:
            try:
                await s.unsubscribe()
            except Exception:  # noqa: BLE001
                pass
        self._subs.clear()
        if not self.nc.is_closed:
            try:
                await self.nc.flush(timeout=2)
            except Exception:  # noqa: BLE001
                pass
            await self.nc.close()

    async def flush(self, timeout: float = 5.0) -> None:
        await self.nc.flush(timeout=timeout)

    # -- streams ---------------------------------------------------------------------------------------------------
    async def ensure_streams(self, settings: StreamSettings | None = None) -> None:
        """Create the state and decision streams unless they exist (an existing stream is left as configured)."""
        st = settings or StreamSettings()
        storage = api.StorageType.MEMORY if st.storage == "memory" else api.StorageType.FILE
        configs = [
            api.StreamConfig(name=S.STATE_STREAM, subjects=[f"{S.STATE_PREFIX}.>"],
                             retention=api.RetentionPolicy.LIMITS, max_msgs_per_subject=st.state_history,
                             storage=storage, duplicate_window=st.duplicate_window, allow_direct=True,
                             description="busched cluster state: one subject per object"),
            api.StreamConfig(name=S.DECISION_STREAM, subjects=[f"{S.DECISION_PREFIX}.>"],
                             retention=api.RetentionPolicy.LIMITS, max_msgs_per_subject=1,
                             max_age=st.decision_max_age, storage=storage, duplicate_window=st.duplicate_window,
                             allow_direct=True, description="busched bind/evict decisions, per node and task"),
        ]
        if settings is not None and st.history_max_age > 0:  # the scheduler's: only it writes cycle records
            from busched.bus import history as H

            configs.append(api.StreamConfig(name=H.HISTORY_STREAM, subjects=[f"{H.HISTORY_PREFIX}.>"],
                                            retention=api.RetentionPolicy.LIMITS, max_age=st.history_max_age,
                                            storage=storage, description="busched cycle records (busched replay)"))
            # a copy of every state message for as long (the state stream's per-subject limit and purges do not
            # reach it): replay over the bus reads it (docs/bus.md, "History")
            configs.append(api.StreamConfig(name=H.STATE_HISTORY_STREAM, sources=[api.StreamSource(name=S.STATE_STREAM)],
                                            retention=api.RetentionPolicy.LIMITS, max_age=st.history_max_age,
                                            storage=storage, duplicate_window=st.duplicate_window,
                                            description="busched state messages kept for the history duration"))
        for cfg in configs:
            try:
                await self.js.stream_info(cfg.name)
                continue
            except nats.js.errors.NotFoundError:
                pass
            except Exception as e:  # noqa: BLE001 - e.g. a user not permitted to look: use what the operator made
                log.warning("cannot check stream %s (%s); assuming it exists", cfg.name, e or type(e).__name__)
                continue
            try:
                await self.js.add_stream(cfg)
            except nats.js.errors.BadRequestError as e:
                # another process created it between our two calls
                if "already in use" not in str(e):
                    raise BusError(f"cannot create stream {cfg.name}: {e}") from None
            if cfg.sources:  # the history copy: what the state stream drops before its source is active is lost
                from busched.bus import history as H

                assert cfg.name is not None  # (every stream above is named)
                await H.wait_sourcing(self.js, cfg.name)

    async def stream_last_seq(self, stream: str) -> int:
        info = await self.js.stream_info(stream)
        return int(info.state.last_seq or 0) if (info.state.messages or 0) else 0

    # -- publishing ------------------------------------------------------------------------------------------------
    async def publish(self, subject: str, msg: Msg | bytes, *, msg_id: str | None = None,
                      expected: int | None = None, timeout: float = 5.0) -> Ack:
        """Publish one message to a stream; ``expected`` makes it conditional (see `publish_all`)."""
        data = msg if isinstance(msg, bytes) else encode(msg)
        headers = {MSG_ID: msg_id} if msg_id else {}
        if expected is not None:
            headers[EXPECT_SUBJECT_SEQ] = str(expected)
        try:
            pa = await self.js.publish(subject, data, timeout=timeout, headers=headers or None)
        except nats.js.errors.APIError as e:
            return Ack(error=f"{type(e).__name__}: {e}", conflict=getattr(e, "err_code", 0) == WRONG_LAST_SEQUENCE)
        except Exception as e:  # noqa: BLE001
            return Ack(error=f"{type(e).__name__}: {e}")
        return Ack(seq=pa.seq, duplicate=bool(pa.duplicate))

    async def publish_all(self, items: Iterable[tuple[Any, ...]], timeout: float = 10.0) -> list[Ack]:
        """Publish many messages with their acknowledgements in flight together; one `Ack` per message, in order.

        Each item is ``(subject, msg, msg_id)`` or ``(subject, msg, msg_id, expected)``: with ``expected``
        (an int) the write is conditional on the subject's last stream sequence being exactly that (0: the
        subject is empty); a lost condition comes back as an `Ack` with ``conflict`` set.

        Pipelined: every message is written to the connection first (flushed together), and the
        stream's acknowledgements come back on one reply subscription of this bus, decoded with
        msgspec.  A message not acknowledged within ``timeout`` gets an `Ack` with an error.
        """
        prefix = await self._ack_inbox()
        loop = asyncio.get_running_loop()
        futs: list[asyncio.Future[Ack]] = []
        tokens: list[str] = []
        pending = self._ack_futs
        publish = self.nc.publish
        for item in items:
            subject, msg, msg_id = item[0], item[1], item[2]
            expected = item[3] if len(item) > 3 else None
            data = msg if isinstance(msg, bytes) else _ENCODE(msg)
            self._ack_counter += 1
            token = str(self._ack_counter)
            f: asyncio.Future[Ack] = loop.create_future()
            futs.append(f)
            tokens.append(token)
            pending[token] = f
            try:
                if expected is None:
                    headers = {MSG_ID: msg_id} if msg_id else None
                else:
                    headers = {EXPECT_SUBJECT_SEQ: str(expected)}
                    if msg_id:
                        headers[MSG_ID] = msg_id
                await publish(subject, data, reply=prefix + token, headers=headers)
            except Exception as e:  # noqa: BLE001
                pending.pop(token, None)
                if not f.done():
                    f.set_result(Ack(error=f"{type(e).__name__}: {e}"))
        if not futs:
            return []
        try:
            await asyncio.wait_for(asyncio.shield(asyncio.gather(*futs)), timeout)
        except asyncio.TimeoutError:
            pass
        out = []
        for token, f in zip(tokens, futs):
            if f.done():
                out.append(f.result())
            else:
                pending.pop(token, None)
                f.cancel()
                out.append(Ack(error=f"TimeoutError: no acknowledgement within {timeout:g}s"))
        return out

    async def _ack_inbox(self) -> str:
        """The reply prefix under which this bus receives the stream's acknowledgements (set up once)."""
        if self._ack_prefix:
            return self._ack_prefix
        async with self._async_lock:
            if not self._ack_prefix:
                prefix = self.nc.new_inbox() + "."
                futs = self._ack_futs
                start = len(prefix)

                async def on_ack(m: Any) -> None:
                    f = futs.pop(m.subject[start:], None)
                    if f is None or f.done():
                        return
                    if m.headers and m.headers.get("Status") == "503":
                        f.set_result(Ack(error="NoStreamResponseError: no stream listens on this subject"))
                        return
                    try:
                        pa = _ACK_DECODE(m.data)
                    except Exception as e:  # noqa: BLE001
                        f.set_result(Ack(error=f"bad acknowledgement: {e}"))
                        return
                    if pa.error is not None:
                        f.set_result(Ack(error=f"APIError: {pa.error.get('description') or pa.error}",
                                         conflict=pa.error.get("err_code") == WRONG_LAST_SEQUENCE))
                    else:
                        f.set_result(Ack(seq=pa.seq, duplicate=pa.duplicate))

                sub = await self.nc.subscribe(prefix + "*", cb=on_ack, pending_msgs_limit=1_000_000,
                                              pending_bytes_limit=256 * 1024 * 1024)
                self._subs.append(sub)
                self._ack_prefix = prefix
        return self._ack_prefix

    async def publish_core(self, subject: str, msg: Msg | bytes) -> None:
        await self.nc.publish(subject, msg if isinstance(msg, bytes) else encode(msg))

    # -- the state stream -----------------------------------------------------------------------------------------
    async def watch_state(self, handler: Callable[[str, bytes, int], None] | None = None, *,
                          subject: str = f"{S.STATE_PREFIX}.>",
                          batch_handler: Callable[[list[tuple[str, bytes, int]]], None] | None = None,
                          max_batch: int = 8192) -> StateWatch:
        """Deliver the latest message of every state subject, then every new one.

        Either ``handler(subject, data, seq)`` per message, or ``batch_handler(items)`` with lists of
        ``(subject, data, seq)`` in stream order: every message already received is handed over in one
        call (up to ``max_batch``) as soon as the event loop is free, so a catch-up of many thousands of
        messages costs one call per batch, while a lone live message is handled at once.  Returns at
        once; ``watch.caught_up`` is set when everything that was in the stream at the start has been
        handled.
        """
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
        w.target = await self.stream_last_seq(S.STATE_STREAM)
        if w.target == 0:
            w.caught_up.set()
        loop = asyncio.get_running_loop()
        buf: list[tuple[str, bytes, int]] = []
        scheduled = False
        caught = [w.target == 0]  # seen the message that completes the catch-up
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

            async def cb(m: Any) -> None:
                nonlocal scheduled
                if current[0] != mine:
                    return  # the subscription was replaced: its successor delivers this one again
                seq, pending = _stream_position(m)
                if seq < 0:
                    return  # not a stream message
                w.pending = pending
                buf.append((m.subject, m.data, seq))
                if not caught[0] and (seq >= w.target or pending == 0):
                    caught[0] = True
                if len(buf) >= max_batch:
                    flush()
                elif not scheduled:
                    scheduled = True
                    loop.call_soon(flush)  # runs once the messages already received have been queued

            if start:
                cfg = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start)
            else:
                cfg = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT)
            if len(subjects) > 1:
                cfg.filter_subjects = subjects
            old, w._sub = w._sub, None
            if old is not None:
                try:
                    await old.unsubscribe()
                except Exception:  # noqa: BLE001 - it goes anyway
                    pass
            w._sub = await self.js.subscribe(subjects[0], stream=S.STATE_STREAM, cb=cb, ordered_consumer=True,
                                             config=cfg, pending_msgs_limit=1_000_000,
                                             pending_bytes_limit=1024 * 1024 * 1024)
            w.subjects = subjects

        async def follow(subjects: list[str]) -> None:
            current[0] += 1  # from here the old subscription's deliveries are dropped ...
            flush()  # ... after what it already handed over is handled
            await subscribe(subjects, w.last_seq + 1)

        await subscribe([subject], 0)
        w._follow = follow
        return w

    async def read_state(self, subject: str = f"{S.STATE_PREFIX}.>", timeout: float = 10.0) -> list[tuple[str, bytes]]:
        """The latest message of every matching state subject (a one-off read, e.g. for `busched delete`)."""
        out: list[tuple[str, bytes]] = []
        w = await self.watch_state(lambda s, d, q: out.append((s, d)), subject=subject)
        try:
            await asyncio.wait_for(w.caught_up.wait(), timeout)
        finally:
            await w.stop()
        return out

    async def last_per_subject(self, subject: str, timeout: float = 10.0) -> list[tuple[str, int, bytes]]:
        """The last message of every state subject matching ``subject`` (one filter), as
        ``(subject, stream sequence, data)``; an empty list at once when none matches.

        Read through a named ephemeral consumer created on the subject that names its filter
        (``$JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>``), so a server can confine a reader, e.g.
        an agent to its own nodes' results (`busched.bus.auth`), and delivered to this connection's
        inbox."""
        info = await self.js.stream_info(S.STATE_STREAM, subjects_filter=subject)
        if not (info.state.subjects or {}):
            return []
        out: list[tuple[str, int, bytes]] = []
        done = asyncio.Event()
        inbox = self.nc.new_inbox()

        async def cb(m: Any) -> None:
            if not m.reply:
                return  # an idle heartbeat or a status
            seq, pending = _stream_position(m)
            out.append((m.subject, seq, bytes(m.data or b"")))
            if pending == 0:
                done.set()

        sub = await self.nc.subscribe(inbox, cb=cb, pending_msgs_limit=1_000_000)
        name = f"read-{uuid.uuid4().hex[:16]}"
        try:
            await self.js.add_consumer(S.STATE_STREAM, config=api.ConsumerConfig(
                name=name, filter_subject=subject, deliver_subject=inbox,
                deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT, ack_policy=api.AckPolicy.NONE,
                inactive_threshold=30.0, mem_storage=True))
            await asyncio.wait_for(done.wait(), timeout)
        finally:
            try:
                await sub.unsubscribe()
            except Exception:  # noqa: BLE001
                pass
            try:
                await self.js.delete_consumer(S.STATE_STREAM, name)
            except Exception:  # noqa: BLE001 - it goes by itself after inactive_threshold
                pass
        return out

    async def last_state(self, subject: str) -> tuple[int, bytes] | None:
        """The last message of one state subject, ``(stream sequence, data)``, or None if it has none."""
        return await self._last_msg(S.STATE_STREAM, subject)

    async def _last_msg(self, stream: str, subject: str) -> tuple[int, bytes] | None:
        try:
            m = await self.js.get_last_msg(stream, subject)
        except nats.js.errors.NotFoundError:
            return None
        except Exception as e:  # noqa: BLE001
            raise BusError(f"cannot read {subject}: {e}") from None
        return int(m.seq), bytes(m.data or b"")

    async def subject_history(self, subject: str, timeout: float = 10.0) -> list[tuple[int, bytes]]:
        """Every message the state stream still holds on one subject, oldest first."""
        out: list[tuple[int, bytes]] = []
        info = await self.js.stream_info(S.STATE_STREAM, subjects_filter=subject)
        if not (info.state.subjects or {}).get(subject):
            return out
        last = await self.last_state(subject)
        if last is None:
            return out
        got = await self.read_ordered(S.STATE_STREAM, subject, api.ConsumerConfig(
            deliver_policy=api.DeliverPolicy.ALL), until=last[0], timeout=timeout)
        return [(seq, data) for _, seq, data, _ in got]

    async def read_ordered(self, stream: str, subject: str, config: Any, *, until: int, timeout: float,
                           big: bool = False) -> list[tuple[str, int, bytes, Any]]:
        """The messages an ordered consumer on ``stream`` (filter ``subject``, start as ``config`` says)
        delivers up to stream sequence ``until``, as ``(subject, sequence, data, headers)``.  ``big``: room
        for a whole stream in the client's buffers."""
        out: list[tuple[str, int, bytes, Any]] = []
        done = asyncio.Event()

        async def cb(m: Any) -> None:
            seq, _ = _stream_position(m)
            if seq < 0:
                return  # not a stream message
            out.append((m.subject, seq, bytes(m.data or b""), m.headers))
            if seq >= until:
                done.set()

        limits = dict(pending_msgs_limit=10_000_000, pending_bytes_limit=4 * 1024 ** 3) if big else {}
        sub = await self.js.subscribe(subject, stream=stream, cb=cb, ordered_consumer=True, config=config, **limits)
        try:
            await asyncio.wait_for(done.wait(), timeout)
        finally:
            try:
                await sub.unsubscribe()
            except Exception:  # noqa: BLE001
                pass
        return out

    async def purge_state(self, subject: str, before_seq: int | None = None) -> bool:
        """Remove a state subject's messages (those below ``before_seq`` only, when given): stream hygiene
        once the object they describe is gone."""
        try:
            return bool(await self.js.purge_stream(S.STATE_STREAM, subject=subject, seq=before_seq))
        except Exception as e:  # noqa: BLE001
            log.warning("cannot purge %s: %s", subject, e)
            return False

    # -- decisions -------------------------------------------------------------------------------------------------
    async def last_decision(self, subject: str) -> tuple[int, bytes] | None:
        return await self._last_msg(S.DECISION_STREAM, subject)

    async def consumer_delivered(self, consumer: str) -> int | None:
        """The highest decision-stream sequence a durable consumer has delivered: 0 when the consumer does not
        exist, None when it cannot be told (so nothing may be concluded)."""
        try:
            info = await self.js.consumer_info(S.DECISION_STREAM, consumer)
        except nats.js.errors.NotFoundError:
            return 0
        except Exception as e:  # noqa: BLE001
            log.warning("cannot read consumer %s: %s", consumer, e)
            return None
        return int(info.delivered.stream_seq or 0) if info.delivered is not None else 0

    async def delete_decision(self, seq: int) -> bool:
        try:
            return bool(await self.js.delete_msg(S.DECISION_STREAM, seq))
        except nats.js.errors.NotFoundError:
            return False
        except Exception as e:  # noqa: BLE001
            log.warning("cannot delete decision %d: %s", seq, e)
            return False

    async def decision_feed(self, node: str | list[str], *, ack_wait: float = 30.0) -> DecisionFeed:
        """A `DecisionFeed` on a durable consumer of the decision stream, created unless it exists.

        For one node: ``agent-<node>``, filtered on that node's decisions, delivering everything on the
        stream for it (what was decided while its agent was away).  For several nodes (one agent
        serving a fleet): ``agents-<n>-<digest>`` (`subjects.fleet_consumer`), filtered on each node's
        decisions; one consumer instead of one per node, which the server serves at a fraction of the
        cost (it does work for every consumer on every message).  A fleet's consumer that does not
        exist yet starts with the decisions published from then on: the same set of nodes finds its
        consumer again after a restart, while a new set does not replay decisions another consumer
        already acknowledged (a bind decided while no consumer existed is released by its lease).
        """
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
            await self.js.consumer_info(S.DECISION_STREAM, durable)
        except nats.js.errors.NotFoundError:
            cfg = api.ConsumerConfig(name=durable, durable_name=durable, ack_policy=api.AckPolicy.EXPLICIT,
                                     deliver_policy=policy, ack_wait=ack_wait, max_ack_pending=pending, **filters)
            await self.js.add_consumer(S.DECISION_STREAM, config=cfg)
        feed = DecisionFeed(self.nc, nodes[0] if len(nodes) == 1 else durable,
                            f"{JS_API}.CONSUMER.MSG.NEXT.{S.DECISION_STREAM}.{durable}", self.nc.new_inbox())
        await feed._start()
        return feed

    # -- core NATS -------------------------------------------------------------------------------------------------
    async def subscribe(self, subject: str, handler: Callable[[str, bytes], None]) -> Any:
        async def cb(m: Any) -> None:
            try:
                handler(m.subject, m.data)
            except Exception:  # noqa: BLE001
                log.exception("handler failed on %s", m.subject)

        sub = await self.nc.subscribe(subject, cb=cb, pending_msgs_limit=1_000_000)
        self._subs.append(sub)
        return sub

    async def serve(self, subject: str, handler: Callable[[bytes], Awaitable[bytes]]) -> Any:
        async def cb(m: Any) -> None:
            try:
                reply = await handler(m.data)
            except Exception as e:  # noqa: BLE001
                log.exception("request on %s failed", subject)
                reply = encode(GetReply(error=f"{type(e).__name__}: {e}"))
            if m.reply:
                await m.respond(reply)

        sub = await self.nc.subscribe(subject, cb=cb)
        self._subs.append(sub)
        return sub

    async def request(self, subject: str, msg: Msg | bytes, timeout: float = 5.0) -> bytes:
        try:
            r = await self.nc.request(subject, msg if isinstance(msg, bytes) else encode(msg), timeout=timeout)
        except nats.errors.NoRespondersError:
            raise BusError(f"no scheduler answers on {subject}: is `busched run` running?") from None
        except (nats.errors.TimeoutError, asyncio.TimeoutError):
            raise BusError(f"no answer on {subject} within {timeout}s") from None
        return bytes(r.data)
