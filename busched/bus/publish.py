"""Publishing to the streams, one message at a time or many with their acknowledgements in flight.

`Publisher` owns the one reply subscription under which the stream's acknowledgements of a batch
come back, and the table of acknowledgements still awaited; `Bus` holds one and delegates to it.
Conditional writes (``Nats-Expected-Last-Subject-Sequence``) are how two schedulers on one bus
agree on a task's binding record (docs/bus.md, "Conditional writes"), so a lost condition is told
apart from other failures (`Ack.conflict`).

A publish answered "no responders" (status 503) reached no stream: on a NATS cluster, what a replicated
stream says while it elects a new leader (its leader's server was lost).  The message was not stored, so
it is sent again, every `RETRY_WAIT` and more, until the caller's timeout is spent (nats.go does the same
with its ``RetryAttempts`` on ``ErrNoResponders``; nats-py does not).  A stream that does not exist says
the same, later.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import msgspec
import nats.errors
import nats.js.errors

from busched.bus import frames as F
from busched.bus import subjects as S
from busched.bus.direct import direct, undirect
from busched.bus.errors import unsubscribe_quietly
from busched.bus.messages import Msg, encode

__all__ = ["Ack", "Publisher", "MSG_ID", "EXPECT_SUBJECT_SEQ", "WRONG_LAST_SEQUENCE", "RETRY_WAIT", "MAX_BATCH",
           "FENCED"]

MSG_ID = "Nats-Msg-Id"
EXPECT_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
WRONG_LAST_SEQUENCE = 10071  # JetStream's error code for a failed expected-last-subject-sequence
FENCED = "fenced: this scheduler does not hold the lease"
EXPECT_SUBJECT_SEQ_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"  # the subject EXPECT_SUBJECT_SEQ is about
_STATE = S.STATE_PREFIX + "."
RETRY_WAIT = 0.1  # seconds before a message no stream answered is sent again; doubling up to 1 s
NO_STREAM = "NoStreamResponseError"
# JetStream atomic batch publish (ADR-50, nats-server 2.12+): every message carries the batch's id and its
# place in it; the last one also the commit, and only that one is answered (with the batch's pub ack)
BATCH_ID, BATCH_SEQ, BATCH_COMMIT = "Nats-Batch-Id", "Nats-Batch-Sequence", "Nats-Batch-Commit"
MAX_BATCH = 1000  # the server's bound on the messages of one atomic batch


@dataclass
class Ack:
    seq: int = 0
    duplicate: bool = False
    error: str = ""
    conflict: bool = False  # a conditional write lost: the subject had moved past the expected sequence

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def no_stream(self) -> bool:
        """No stream answered (status 503): not stored; a cluster's stream electing a leader, or no stream."""
        return self.error.startswith(NO_STREAM)


class _PubAck(msgspec.Struct):
    """A JetStream publish acknowledgement, or its error."""

    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: dict[str, Any] | None = None


_ACK_DECODE = msgspec.json.Decoder(_PubAck).decode
_ENCODE = encode
# the header lines of `publish_all`'s messages, the fixed part made once (busched.bus.frames)
_MSG_ID_LINE = f"{MSG_ID}: ".encode()
_EXPECT_LINE = f"{EXPECT_SUBJECT_SEQ}: ".encode()
_HDR_LINE, _CRLF = b"NATS/1.0\r\n", b"\r\n"
_TOO_BIG = f"MaxPayloadError: {nats.errors.MaxPayloadError()}"  # as nats-py's publish would have raised it


class _Round:
    """The acknowledgements one call awaits: a slot per message, ``done`` once every slot is filled
    (one future a call, not one a message)."""

    __slots__ = ("acks", "left", "done")

    def __init__(self, n: int, loop: asyncio.AbstractEventLoop) -> None:
        self.acks: list[Ack | None] = [None] * n
        self.left = n
        self.done: asyncio.Future[None] = loop.create_future()
        if not n:
            self.done.set_result(None)

    def set(self, i: int, ack: Ack) -> None:
        if self.acks[i] is None:
            self.acks[i] = ack
            self.left -= 1
            if not self.left and not self.done.done():
                self.done.set_result(None)


class Publisher:
    """Stream publishing over one connection ``nc`` and its JetStream context ``js``."""

    def __init__(self, nc: Any, js: Any) -> None:
        # may this process write now?  Checked before each message leaves (a scheduler's leadership,
        # `busched.scheduler.election`); None: always
        self.fence: Callable[[], bool] | None = None
        # (subject, sequence): every state-stream write that carries no condition of its own is stored only while
        # that subject's last sequence is this one (``Nats-Expected-Last-Subject-Sequence-Subject``): a leader's
        # writes on condition that no newer leader wrote its epoch since (`busched.scheduler.election`)
        self.condition: tuple[str, int] | None = None
        self.nc = nc
        self.js = js
        self._lock = asyncio.Lock()
        self._prefix = ""  # the acknowledgements' reply prefix, once subscribed
        self._sub: Any = None
        self._waiting: dict[str, tuple[_Round, int]] = {}  # token -> the call and slot its acknowledgement fills
        self._counter = 0
        self._framed = F.Frames.usable(nc)  # publish_all frames its messages itself (busched.bus.frames)
        self._direct = True  # acknowledgements straight from the parser (busched.bus.direct)
        self._cond_lines: tuple[tuple[str, int] | None, bytes] = (None, b"")

    def may_write(self) -> bool:
        """Whether the fence (the lease, when there is an election) lets a write leave now."""
        return self.fence is None or self.fence()

    async def publish(self, subject: str, msg: Msg | bytes, *, msg_id: str | None = None,
                      expected: int | None = None, timeout: float = 5.0) -> Ack:
        """Publish one message to a stream; ``expected`` makes it conditional (see `publish_all`)."""
        data = msg if isinstance(msg, bytes) else encode(msg)
        headers = {MSG_ID: msg_id} if msg_id else {}
        if expected is not None:
            headers[EXPECT_SUBJECT_SEQ] = str(expected)
        else:
            self._conditioned(subject, headers)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        wait = RETRY_WAIT
        while True:
            if not self.may_write():  # (again before each resend)
                return Ack(error=FENCED)
            try:
                pa = await self.js.publish(subject, data, timeout=max(0.1, deadline - loop.time()),
                                           headers=headers or None)
            except nats.js.errors.NoStreamResponseError as e:
                if loop.time() + wait < deadline:
                    await asyncio.sleep(wait)
                    wait = min(1.0, 2 * wait)
                    continue
                return Ack(error=f"{NO_STREAM}: {e}")
            except nats.js.errors.APIError as e:
                return Ack(error=f"{type(e).__name__}: {e}",
                           conflict=getattr(e, "err_code", 0) == WRONG_LAST_SEQUENCE)
            except Exception as e:  # noqa: BLE001
                return Ack(error=f"{type(e).__name__}: {e}")
            return Ack(seq=pa.seq, duplicate=bool(pa.duplicate))

    async def publish_all(self, items: Iterable[tuple[Any, ...]], timeout: float = 10.0) -> list[Ack]:
        """`Bus.publish_all` (see there); the messages no stream answered are sent again, in order, until the
        ``timeout`` is spent."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        batch = list(items)
        acks = await self._publish_round(batch, timeout)
        wait = RETRY_WAIT
        while True:
            if not any(a.no_stream for a in acks):  # the usual case: nothing to send again
                return acks
            # (a message whose subject a later one of the batch was stored on is not sent again: it would land
            # after it, and on a subject the later message wins)
            stored_last = {batch[i][0]: i for i, a in enumerate(acks) if a.ok}
            again = [i for i, a in enumerate(acks) if a.no_stream and stored_last.get(batch[i][0], -1) < i]
            if not again or loop.time() + wait >= deadline:
                return acks
            await asyncio.sleep(wait)
            wait = min(1.0, 2 * wait)
            for i, a in zip(again, await self._publish_round([batch[i] for i in again], deadline - loop.time())):
                acks[i] = a

    async def _publish_round(self, items: list[tuple[Any, ...]], timeout: float) -> list[Ack]:
        prefix = await self._ack_inbox()
        r = _Round(len(items), asyncio.get_running_loop())
        tokens: list[str] = []
        waiting = self._waiting
        fence = self.fence
        # (frames of their own for each call: calls run concurrently, and handing a chunk over may wait)
        frames = F.Frames(self.nc) if self._framed and self.nc.is_connected else None
        cur = 0  # the item under way: when something raises, it and every later item are not known sent
        try:
            for cur, item in enumerate(items):
                subject, msg, msg_id = item[0], item[1], item[2]
                expected = item[3] if len(item) > 3 else None
                self._counter += 1
                token = str(self._counter)
                tokens.append(token)
                data = msg if isinstance(msg, bytes) else _ENCODE(msg)
                framed = None
                if frames is not None and F.clean(subject) and (not msg_id or F.clean(msg_id)):
                    framed = self._frame(subject, prefix + token, data, msg_id, expected)
                if framed is None and frames is not None:
                    # what was framed goes first (the wire keeps the order of the items), and before this item's
                    # fence is asked: handing frames over may wait
                    await frames.flush()
                if fence is not None and not fence():
                    r.set(cur, Ack(error=FENCED))
                    continue
                if framed is not None:
                    frame, size = framed
                    if size > self.nc._max_payload:  # the server counts the headers too, and would cut us off
                        r.set(cur, Ack(error=_TOO_BIG))
                        continue
                    waiting[token] = (r, cur)
                    await frames.add(frame, len(data), cur)  # type: ignore[union-attr]
                    continue
                waiting[token] = (r, cur)
                try:
                    await self.nc.publish(subject, data, reply=prefix + token,
                                          headers=self._headers(subject, msg_id, expected))
                except Exception as e:  # noqa: BLE001
                    waiting.pop(token, None)
                    r.set(cur, Ack(error=f"{type(e).__name__}: {e}"))
            cur = len(items)
            if frames is not None:
                await frames.flush()
        except Exception as e:  # noqa: BLE001 - a message not encodable, or handing frames over failed
            # the frames not handed over (or whose handing over failed) are not known sent, nor is the item under
            # way; the items after it were never tried
            failed = (frames.unsent() if frames is not None else []) + list(range(cur, len(items)))
            for i in failed:
                if i < len(tokens):
                    waiting.pop(tokens[i], None)
                r.set(i, Ack(error=f"{type(e).__name__}: {e}"))
        return await self._gather(r, tokens, timeout)

    def _headers(self, subject: str, msg_id: str | None, expected: int | None) -> dict[str, str] | None:
        """A message's headers as nats-py's ``publish`` takes them."""
        if expected is None:
            headers = {MSG_ID: msg_id} if msg_id else {}
            if self.condition is not None:
                self._conditioned(subject, headers)
            return headers or None
        headers = {EXPECT_SUBJECT_SEQ: str(expected)}
        if msg_id:
            headers[MSG_ID] = msg_id
        return headers

    def _frame(self, subject: str, reply: str, data: bytes, msg_id: str | None,
               expected: int | None) -> tuple[bytes, int] | None:
        """The message's frame (the same headers as `_headers`), its header block from made-once lines, and its
        size as the server counts it (headers and payload); None when a header value is not clean (nats-py
        publishes it, cleaning it as it does)."""
        lines = b""
        if expected is not None:
            lines = _EXPECT_LINE + str(int(expected)).encode() + _CRLF
        elif self.condition is not None and subject.startswith(_STATE) and subject != self.condition[0]:
            if not F.clean(self.condition[0]):
                return None
            lines = self._condition_lines()
        if msg_id:
            lines += _MSG_ID_LINE + msg_id.encode() + _CRLF
        if not lines:
            return F.pub(subject, reply, data), len(data)
        hdr = _HDR_LINE + lines + _CRLF
        return F.hpub(subject, reply, hdr, data), len(hdr) + len(data)

    def _condition_lines(self) -> bytes:
        """The `condition`'s two header lines, made once per condition."""
        cond = self.condition
        if self._cond_lines[0] != cond:
            assert cond is not None
            self._cond_lines = (cond, F.header_block({EXPECT_SUBJECT_SEQ: str(cond[1]),
                                                      EXPECT_SUBJECT_SEQ_SUBJECT: cond[0]})[len(_HDR_LINE):-2])
        return self._cond_lines[1]

    async def publish_batches(self, batches: Iterable[list[tuple[str, Any, int | None]]],
                              timeout: float = 10.0) -> list[Ack]:
        """`Bus.publish_batches` (see there)."""
        prefix = await self._ack_inbox()
        batches = list(batches)
        r = _Round(len(batches), asyncio.get_running_loop())
        tokens: list[str] = []
        publish = self.nc.publish
        for n, batch in enumerate(batches):
            if not 0 < len(batch) <= MAX_BATCH:
                raise ValueError(f"an atomic batch holds 1 to {MAX_BATCH} messages, not {len(batch)}")
            self._counter += 1
            token = str(self._counter)
            tokens.append(token)
            if not self.may_write():  # checked before each batch leaves, as before each message
                r.set(n, Ack(error=FENCED))
                continue
            self._waiting[token] = (r, n)
            bid = f"{prefix}{token}"[-64:]  # unique per connection and batch (the server allows 64 characters)
            last = len(batch)
            try:
                # the batch's messages go out back to back (no other batch of ours in between): the server holds
                # a batch from its first message to its commit, and allows only so many in flight per stream
                for i, (subject, msg, expected) in enumerate(batch, 1):
                    headers = {BATCH_ID: bid, BATCH_SEQ: str(i)}
                    if expected is not None:
                        headers[EXPECT_SUBJECT_SEQ] = str(expected)
                    if i == last:
                        headers[BATCH_COMMIT] = "1"
                    await publish(subject, msg if isinstance(msg, bytes) else _ENCODE(msg),
                                  reply=prefix + token if i == last else "", headers=headers)
            except Exception as e:  # noqa: BLE001
                self._waiting.pop(token, None)
                r.set(n, Ack(error=f"{type(e).__name__}: {e}"))
        return await self._gather(r, tokens, timeout)

    async def _gather(self, r: _Round, tokens: list[str], timeout: float) -> list[Ack]:
        """The call's acknowledgements once all came or ``timeout`` is spent (the missing ones an error)."""
        if r.left:
            try:
                await asyncio.wait_for(asyncio.shield(r.done), timeout)
            except asyncio.TimeoutError:
                pass
        if r.left:
            late = Ack(error=f"TimeoutError: no acknowledgement within {timeout:g}s")
            for i, token in enumerate(tokens):
                if r.acks[i] is None:
                    self._waiting.pop(token, None)
                    r.set(i, late)
        # (every slot is filled by now; one that were not would shift the acknowledgements of the items after it)
        return [a if a is not None else Ack(error="no outcome recorded") for a in r.acks]

    def _conditioned(self, subject: str, headers: dict[str, str]) -> dict[str, str]:
        """``headers`` with the publisher's `condition`, when it applies to ``subject``."""
        cond = self.condition
        if cond is not None and subject.startswith(_STATE) and subject != cond[0]:
            headers[EXPECT_SUBJECT_SEQ] = str(cond[1])
            headers[EXPECT_SUBJECT_SEQ_SUBJECT] = cond[0]
        return headers

    async def _ack_inbox(self) -> str:
        """The reply prefix under which the stream's acknowledgements come back (subscribed once)."""
        if self._prefix:
            return self._prefix
        async with self._lock:
            if not self._prefix:
                prefix = self.nc.new_inbox() + "."
                waiting = self._waiting
                start = len(prefix)

                def settle(token: str, status: str | None, data: bytes) -> None:
                    slot = waiting.pop(token, None)
                    if slot is None:
                        return
                    r, i = slot
                    if status == "503":
                        r.set(i, Ack(error=f"{NO_STREAM}: no stream listens on this subject"))
                        return
                    try:
                        pa = _ACK_DECODE(data)
                    except Exception as e:  # noqa: BLE001
                        r.set(i, Ack(error=f"bad acknowledgement: {e}"))
                        return
                    if pa.error is not None:
                        r.set(i, Ack(error=f"APIError: {pa.error.get('description') or pa.error}",
                                     conflict=pa.error.get("err_code") == WRONG_LAST_SEQUENCE))
                    else:
                        r.set(i, Ack(seq=pa.seq, duplicate=pa.duplicate))

                async def on_ack(m: Any) -> None:  # (those with headers, or every one without `direct`)
                    settle(m.subject[start:], m.headers.get("Status") if m.headers else None, m.data)

                def on_ack_bytes(subject: bytes, data: bytes) -> None:
                    settle(subject[start:].decode(), None, data)

                self._sub = await self.nc.subscribe(prefix + "*", cb=on_ack, pending_msgs_limit=1_000_000,
                                                    pending_bytes_limit=256 * 1024 * 1024)
                if self._direct:  # straight from the parser (busched.bus.direct)
                    direct(self.nc, self._sub._id, on_ack_bytes)
                self._prefix = prefix
        return self._prefix

    async def close(self) -> None:
        """Drop the acknowledgements' subscription (the connection is closing)."""
        if self._sub is not None:
            undirect(self.nc, self._sub._id)
            await unsubscribe_quietly(self._sub)
            self._sub = None
