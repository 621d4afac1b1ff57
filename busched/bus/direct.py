"""Messages of one subscription handed straight from nats-py's parser to a plain function.

Every message nats-py receives becomes a `Msg` object (its subject and reply decoded), goes into the
subscription's queue and is taken out by the subscription's task, which then calls and awaits the
callback.  For the stream's acknowledgements of our own publishes (`busched.bus.publish`: one per
binding record, decision, podgroup status, event, an agent's answer, an object `busched apply`
writes) that is most of what receiving one costs; an acknowledgement is a few bytes of JSON whose
subject names the publish it answers.  `direct` lets the connection's parser hand those bytes to a
function at once: no `Msg`, no queue, no task switch.  A message with headers (the server's
``503 No Responders`` when no stream listens) still takes nats-py's own path to the callback, and
the connection's statistics count every message as before.

`direct_raw` routes every message of a subscription, headers and reply included, to a handler
that keeps whatever protocol state the subscription has (the state watch's ordered consumer,
`busched.bus.ordered`) and may hand a message back to nats-py's own processing.

It wraps the connection's ``_process_msg`` on that one connection object (nats-py's parser calls it
for every message), and puts `busched.bus.parse` in front of the parser, which reads the routed
messages' control lines itself and calls their handlers without a coroutine each.  `usable` says
whether the installed nats-py has what this relies on; when it does not, nothing is wrapped and the
subscription's callback gets every message as before (tests/bus/test_direct.py fails on a nats-py
where it says no, so a change there is seen).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from busched.bus import parse

__all__ = ["direct", "direct_raw", "direct_subscription", "undirect", "usable"]

log = logging.getLogger("busched.bus")

_ROUTES = "_busched_direct"
_RAW = "_busched_direct_raw"
_ORIGINAL = "_busched_direct_original"

RawHandler = Callable[[int, bytes, bytes, bytes, Any], "Awaitable[None] | None"]


def usable(nc: Any) -> bool:
    """Whether ``nc`` is a nats-py client whose parser hands each message to ``_process_msg(sid, subject,
    reply, data, headers)`` and that counts messages in ``stats``."""
    fn = getattr(nc, "_process_msg", None)
    if fn is None or not inspect.iscoroutinefunction(fn) or not isinstance(getattr(nc, "stats", None), dict):
        return False
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return False
    return names[:5] == ["sid", "subject", "reply", "data", "headers"]


def _install(nc: Any) -> tuple[dict[int, Callable[[bytes, bytes], None]], dict[int, RawHandler]] | None:
    """The connection's two route tables, wrapping its ``_process_msg`` the first time; None if not `usable`."""
    routes: dict[int, Callable[[bytes, bytes], None]] | None = nc.__dict__.get(_ROUTES)
    if routes is not None:
        return routes, nc.__dict__[_RAW]
    if not usable(nc):
        return None
    routes = {}
    raw: dict[int, RawHandler] = {}
    original = nc._process_msg
    stats = nc.stats

    async def process_msg(sid: int, subject: bytes, reply: bytes, data: bytes, headers: Any) -> None:
        handler = routes.get(sid)
        if handler is None:
            take = raw.get(sid)
            if take is None:
                await original(sid, subject, reply, data, headers)
                return
            try:
                later = take(sid, subject, reply, data, headers)
                if later is not None:
                    await later
            except Exception:  # noqa: BLE001 - never into the parser: it would end the connection's read loop
                log.exception("handling a message on %r failed", subject)
            return
        if headers:
            await original(sid, subject, reply, data, headers)
            return
        stats["in_msgs"] += 1
        stats["in_bytes"] += len(data)
        try:
            handler(subject, data)
        except Exception:  # noqa: BLE001 - never into the parser: it would end the connection's read loop
            log.exception("handling a message on %r failed", subject)

    nc._process_msg = process_msg
    setattr(nc, _ROUTES, routes)
    setattr(nc, _RAW, raw)
    setattr(nc, _ORIGINAL, original)
    parse.install(nc, routes, raw)  # routed messages also skip the parser's regular expression and coroutine
    return routes, raw


def tables(nc: Any) -> tuple[dict[int, Callable[[bytes, bytes], None]], dict[int, RawHandler]] | None:
    """The connection's route tables (plain handlers, raw handlers) once something was routed on it."""
    routes = nc.__dict__.get(_ROUTES)
    return None if routes is None else (routes, nc.__dict__[_RAW])


def direct(nc: Any, sid: int, handler: Callable[[bytes, bytes], None]) -> bool:
    """From now on each message without headers of subscription ``sid`` goes to ``handler(subject, data)``
    (both bytes) as the parser reads it, instead of the subscription's callback.  False (and nothing
    changed) when the client is not one this knows (`usable`)."""
    tables = _install(nc)
    if tables is None:
        return False
    tables[0][sid] = handler
    return True


def direct_raw(nc: Any, sid: int, handler: RawHandler) -> Callable[..., Awaitable[None]] | None:
    """From now on every message of subscription ``sid`` goes to ``handler(sid, subject, reply, data,
    headers)`` as the parser reads it: the handler counts it in the connection's statistics or hands
    it on to nats-py's own processing by returning the awaitable of the function returned here (the
    connection's original ``_process_msg``), which the parser then awaits.  None (and nothing changed)
    when the client is not one this knows (`usable`)."""
    tables = _install(nc)
    if tables is None:
        return None
    tables[1][sid] = handler
    return nc.__dict__[_ORIGINAL]  # type: ignore[no-any-return]


def undirect(nc: Any, sid: int) -> None:
    """Subscription ``sid``'s messages go to its callback again (it is being dropped)."""
    routes = nc.__dict__.get(_ROUTES)
    if routes is not None:
        routes.pop(sid, None)
        nc.__dict__[_RAW].pop(sid, None)


def direct_subscription(nc: Any, sub: Any, handler: Callable[[str, bytes], None]) -> bool:
    """Every message of nats-py subscription ``sub`` (`Bus.subscribe`'s) to ``handler(subject, data)`` from the
    parser, headers or not (the handler never sees them), without a `Msg`, queue and task each; False (nothing
    changed: its callback gets them) when not `usable`.

    Each is handled with ``loop.call_soon``, not inside the parse: after what the messages before it on the wire
    scheduled so (the state watch hands a read's records over with ``call_soon``), as through nats-py's queue and
    task; else a heartbeat would be handled before records that came before it.  The route goes with the
    subscription (its ``unsubscribe`` and ``drain`` remove it first), else it stays until the connection closes."""
    sid, subs, stats = sub._id, nc._subs, nc.stats
    soon = asyncio.get_running_loop().call_soon

    def deliver(subject: bytes, data: bytes) -> None:
        if sid in subs:  # (as nats-py: none once the subscription is dropped, however it is dropped)
            try:
                handler(subject.decode(), data)
            except Exception:  # noqa: BLE001 - as nats-py's path: one message lost, never the loop's callback
                log.exception("handler failed on %r", subject)

    def raw(_: int, subject: bytes, reply: bytes, data: bytes, headers: Any) -> None:
        stats["in_msgs"] += 1
        stats["in_bytes"] += len(data)
        if sid in subs:
            sub._received += 1
            soon(deliver, subject, data)

    if direct_raw(nc, sid, raw) is None:
        return False
    unsubscribe, drain = sub.unsubscribe, sub.drain

    # with a limit, nats-py's own path counts the messages left and drops the subscription after the last
    async def unsubscribe_too(limit: int = 0) -> None:
        undirect(nc, sid)
        await unsubscribe(limit)

    async def drain_too() -> None:
        undirect(nc, sid)
        await drain()

    sub.unsubscribe, sub.drain = unsubscribe_too, drain_too
    return True
