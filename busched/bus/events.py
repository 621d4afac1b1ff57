"""Reading the events stream (docs/bus.md, "Scheduling events"): `busched events` and tests.

``BUSCHED_EVENTS`` keeps one message per event series (`busched.bus.streams.events_stream_config`), so
reading it from its first sequence gives the latest state of every series still held, and going on
reading gives each series again whenever the scheduler republishes it with a higher count.  `watch_events`
does both through one ordered push consumer (filtered on one object, one kind or everything,
`subjects.events_filter`), decodes each message with the one decoder and hands the handler an `Event`;
a message that does not decode as one is skipped and counted (``watch.invalid``): the events stream is
input like any other.  ``watch.caught_up`` is set once what the stream held when the watch began has
been handed over (at once when it held nothing that matches).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import nats.js.errors
from nats.js import api

from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.asks import ask
from busched.bus.errors import unsubscribe_quietly
from busched.bus.feeds import stream_position

__all__ = ["EventWatch", "watch_events"]

EventHandler = Callable[[m.Event], None]


class EventWatch:
    """A running watch of the events stream; `stop` ends it."""

    def __init__(self) -> None:
        self.caught_up = asyncio.Event()
        self.invalid = 0  # messages on the stream that are not events
        self.exists = True  # False when there is no events stream (no scheduler has made it yet)
        self._sub: Any = None

    async def stop(self) -> None:
        if self._sub is not None:
            await unsubscribe_quietly(self._sub)
            self._sub = None


async def _matches(js: Any, subject: str) -> bool | None:
    """Whether the events stream holds a message on ``subject`` (a filter); None: there is no events stream."""
    try:
        if subject == f"{S.EVENT_PREFIX}.>":
            info = await ask("stream.info", lambda: js.stream_info(S.EVENT_STREAM), detail=S.EVENT_STREAM)
            return bool(info.state.messages)
        info = await ask("stream.info", lambda: js.stream_info(S.EVENT_STREAM, subjects_filter=subject),
                         detail=subject)
    except nats.js.errors.NotFoundError:
        return None
    return bool(info.state.subjects)


async def watch_events(js: Any, handler: EventHandler, *, subject: str = f"{S.EVENT_PREFIX}.>") -> EventWatch:
    """Hand ``handler`` every event the stream holds on ``subject`` (oldest first), then each new or updated one
    until ``watch.stop()``.  Returns once the consumer exists."""
    w = EventWatch()
    held = await _matches(js, subject)
    if held is None:
        w.exists = False
        w.caught_up.set()
        return w
    if not held:
        w.caught_up.set()

    async def cb(msg: Any) -> None:
        seq, pending = stream_position(msg)
        if seq < 0:
            return  # a heartbeat or a status
        try:
            ev = m.decode(bytes(msg.data or b""))
        except m.DecodeError:
            ev = None
        if isinstance(ev, m.Event):
            handler(ev)
        else:
            w.invalid += 1
        if pending == 0:
            w.caught_up.set()

    # (a fresh config each ask: nats-py writes its delivery inbox into it)
    w._sub = await ask("consumer.create", lambda: js.subscribe(
        subject, stream=S.EVENT_STREAM, cb=cb, ordered_consumer=True,
        config=api.ConsumerConfig(deliver_policy=api.DeliverPolicy.ALL), pending_msgs_limit=1_000_000),
        detail=S.EVENT_STREAM)
    return w
