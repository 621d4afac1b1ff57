"""An ordered consumer's messages handed straight from nats-py's parser to the state feed.

The state watch (`busched.bus.feeds.watch_state`) follows the state stream through nats-py's ordered
push consumer: every message becomes a `Msg`, has its reply subject split by nats-py's metadata
parser, goes through the subscription's queue and is taken out by the subscription's task, which
awaits the callback.  On a scheduler's event loop that receipt was a third of its CPU (~10-15 us a
message, 6-7 messages a bind; docs/benchmarks.md).  `OrderedReceiver` takes each message from the
parser instead (`busched.bus.direct.direct_raw`) and does, for a data message, what nats-py's
``_process_msg`` does for an ordered consumer's, in the same order, then hands the bytes on:

- the connection's and the subscription's counts (``stats``, ``_received``: flow control compares the
  messages delivered with those received);
- the consumer is marked active (``_active``: the heartbeat check resets a consumer not heard from for
  two heartbeats);
- the consumer sequence is checked against the one expected (``_dseq``): on a gap the message is
  dropped and the consumer replaced by one starting after the last stream sequence handed on
  (``_sseq``), nats-py's own ``reset_ordered_consumer``; otherwise both sequences are taken;
- the message is counted for flow control (``_fciseq``) and its reply kept as the last one handed on,
  which a heartbeat's ``Nats-Last-Consumer`` is compared with (``_cmeta``, set only when a control
  message comes: decoding it for every message was needless work).

Control messages (a status line in the headers: flow control requests, idle heartbeats) take nats-py's
own path unchanged, which answers flow control and checks a heartbeat's sequence; they never carry
data, so handing them over there does not reorder what the feed receives.  A data message with
headers (a publish's message id, its expected sequence) is a data message like the others.  A reply
subject this does not read (the longer form with a domain) switches the receiver off for good and
from then on every message takes nats-py's path to the subscription's callback, after those already
handed on, so the order holds.  A reset, whoever starts it (a gap seen here, nats-py's heartbeat
check), moves the subscription to a new ``sid``: the route moves with it.  A reset before anything was
handed on starts the new consumer where the first one started (its start sequence, or the last message
of each subject): nats-py's own reset would start it from stream sequence 1 (its last sequence is still
0) and replay the history a checkpoint had already covered.

tests/bus/test_ordered.py checks the shape of nats-py's internals this relies on; `attach` returns
None (and the subscription's callback keeps getting everything) when they are not there.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from busched.bus.direct import direct_raw, undirect

__all__ = ["OrderedReceiver", "attach", "usable"]

FeedHandler = Callable[[bytes, bytes, int, int], None]  # subject, data, stream sequence, pending

_STATUS_AT = len(b"NATS/1.0")  # a status line has a space and its code there; plain headers a CRLF
_SPACE = ord(" ")
_JSI_FIELDS = ("_dseq", "_sseq", "_cmeta", "_fciseq", "_active", "_ordered")


def usable(psub: Any) -> bool:
    """Whether ``psub`` is a nats-py ordered push subscription with the state this keeps up to date."""
    sub = getattr(psub, "_sub", None)
    jsi = getattr(sub, "_jsi", None)
    if jsi is None or not isinstance(getattr(sub, "_received", None), int) or not isinstance(
            getattr(sub, "_id", None), int):
        return False
    if not all(hasattr(jsi, f) for f in _JSI_FIELDS) or not jsi._ordered:
        return False
    reset = getattr(jsi, "reset_ordered_consumer", None)
    if reset is None or not inspect.iscoroutinefunction(reset):
        return False
    return list(inspect.signature(reset).parameters) == ["sseq"]


class OrderedReceiver:
    """Takes an ordered push subscription's messages from the parser (see the module's docstring)."""

    def __init__(self, nc: Any, psub: Any, handler: FeedHandler) -> None:
        self._nc = nc
        self._stats = nc.stats
        self._sub = psub._sub
        self._jsi = psub._sub._jsi
        self._handler = handler
        self._last: bytes | None = None  # the reply of the last data message handed on
        self._original: Callable[..., Awaitable[None]] | None = None
        self._reset = self._jsi.reset_ordered_consumer  # nats-py's, bound
        cfg = getattr(self._jsi, "_ccreq", None)  # the first consumer's start, for a reset before any delivery
        self._first = (cfg.deliver_policy, cfg.opt_start_seq) if cfg is not None else None
        self.off = False  # a reply subject not read here was seen: nats-py's path from then on
        self.stopped = False
        self.resets = 0
        self.taken = 0  # data messages handed on from the parser (tests: the path is taken, not only set up)

    def start(self) -> bool:
        self._original = direct_raw(self._nc, self._sub._id, self)
        if self._original is None:
            return False
        self._jsi.reset_ordered_consumer = self._moving_reset  # nats-py's heartbeat check calls it too
        return True

    def stop(self) -> None:
        self.stopped = True
        undirect(self._nc, self._sub._id)

    def __call__(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: Any) -> Awaitable[None] | None:
        if self.off:
            return self._original(sid, subject, reply, data, headers)  # type: ignore[misc]
        if headers and len(headers) > _STATUS_AT and headers[_STATUS_AT] == _SPACE:
            # a control message: nats-py answers flow control and compares a heartbeat's last consumer
            # sequence with the last message handed on
            jsi = self._jsi
            if self._last is not None:
                jsi._cmeta = self._last.decode()
                self._last = None
            return self._original(sid, subject, reply, data, headers)  # type: ignore[misc]
        t = reply.split(b".")
        if len(t) != 9 or t[0] != b"$JS" or t[1] != b"ACK":
            self.off = True
            undirect(self._nc, sid)
            if self._last is not None:
                self._jsi._cmeta = self._last.decode()
            return self._original(sid, subject, reply, data, headers)  # type: ignore[misc]
        stats = self._stats
        stats["in_msgs"] += 1
        stats["in_bytes"] += len(data)
        self._sub._received += 1
        jsi = self._jsi
        jsi._active = True
        dseq = int(t[6])
        if dseq != jsi._dseq:
            return jsi.reset_ordered_consumer(jsi._sseq + 1)  # (this message is dropped; the new consumer has it)
        sseq = int(t[5])
        jsi._dseq = dseq + 1
        jsi._sseq = sseq
        jsi._fciseq += 1
        self._last = reply
        self.taken += 1
        self._handler(subject, data, sseq, int(t[8]))
        return None

    async def _moving_reset(self, sseq: int | None) -> bool:
        """nats-py's reset, with the route moved from the old subscription id to the new one."""
        undirect(self._nc, self._sub._id)
        self._last = None
        self.resets += 1
        first = self._first if self._jsi._sseq == 0 else None  # nothing handed on yet: start as the first did
        if first is not None and first[1]:
            sseq = max(sseq or 0, first[1])
        try:
            done = await self._reset(sseq)
            if first is not None and first[1] is None:
                # nats-py set a start sequence (1) in the request its background task sends after this
                # returns: the first consumer's policy (the last message of each subject) instead
                self._jsi._ccreq.deliver_policy = first[0]
                self._jsi._ccreq.opt_start_seq = None
            return done
        finally:
            if not self.stopped and not self.off:
                direct_raw(self._nc, self._sub._id, self)


def attach(nc: Any, psub: Any, handler: FeedHandler) -> OrderedReceiver | None:
    """Hand ``psub``'s data messages to ``handler(subject, data, stream_seq, pending)`` from the parser; None
    (nothing changed: the subscription's callback gets them) when nats-py is not one this knows."""
    if nc is None or not usable(psub):
        return None
    r = OrderedReceiver(nc, psub, handler)
    return r if r.start() else None
