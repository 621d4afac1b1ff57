"""The history stream and full reads of a stream (docs/bus.md, "History").

``BUSCHED_HISTORY`` (subjects ``busched.history.>``) keeps one `CycleRecord` per cycle that decided
something, on ``busched.history.cycle.<boot>``, with limits retention by age
(`StreamSettings.history_max_age`, 7 days by default; 0 creates no stream and writes no records).
`read_stream` reads every message a stream still holds, in sequence order, through an ordered
push consumer from its first sequence (not the last message per subject, as a catch-up does):
what `busched replay` and `busched record` need.

With history on, the scheduler also makes ``BUSCHED_STATE_HISTORY`` (`STATE_HISTORY_STREAM`): no
subjects of its own, it *sources* ``BUSCHED_STATE`` (limits retention, the same max age, no limit per
subject), so it keeps a copy of every state message for the history duration whatever the state
stream's per-subject limit and purges drop.  A sourced message keeps its subject; the server adds the
header ``Nats-Stream-Source: <stream>[:<api hash>] <seq> <filter> <transform> <subject> <hash>``
(nats-server 2.15; older servers end after the transform), whose second token is the message's
sequence in ``BUSCHED_STATE``, which the cycle records' ``seq`` refer to.  `read_state` /
`StateReader` read the state messages from the copy when it exists (the state stream fills in what
the copy lacks), else from the state stream.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from nats.js import api

from busched.bus.asks import Policy, ask
from busched.bus.subjects import STATE_STREAM

__all__ = ["HISTORY_STREAM", "HISTORY_PREFIX", "STATE_HISTORY_STREAM", "SOURCE_HEADER", "cycle_subject", "read_stream",
           "source_sequence", "wait_sourcing", "StateReader", "read_state"]

HISTORY_STREAM = "BUSCHED_HISTORY"
HISTORY_PREFIX = "busched.history"
STATE_HISTORY_STREAM = "BUSCHED_STATE_HISTORY"  # a sourced copy of BUSCHED_STATE for the history duration
SOURCE_HEADER = "Nats-Stream-Source"

log = logging.getLogger("busched.bus.history")


def cycle_subject(boot: str) -> str:
    return f"{HISTORY_PREFIX}.cycle.{boot or 'unknown'}"


async def wait_sourcing(js: Any, stream: str, timeout: float = 5.0) -> bool:
    """Wait until every source of ``stream`` is active (a new source starts ~0.2 s after the stream is
    created; until then the source stream's limits can drop messages the copy never sees)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            left = max(0.1, deadline - loop.time())  # the asks within this wait's own bound
            info = await ask("stream.info", lambda: js.stream_info(stream),
                             Policy(ask_s=min(2.0, left), asks=8, total_s=left), detail=stream)
            if all(si.active is not None and si.active >= 0 for si in (info.sources or [])):
                return True
        except Exception:  # noqa: BLE001 - not permitted to look, or gone: nothing to wait for
            return False
        if loop.time() > deadline:
            log.warning("the sources of stream %s are not active after %.0fs", stream, timeout)
            return False
        await asyncio.sleep(0.02)


def source_sequence(headers: dict[str, str] | None, stream: str | None = None) -> int | None:
    """The original sequence of a sourced message (its ``Nats-Stream-Source`` header), when it came from
    ``stream`` (any stream when None); None for a message that was not sourced."""
    v = (headers or {}).get(SOURCE_HEADER)
    if not v:
        return None
    parts = v.split()
    if len(parts) < 2 or (stream is not None and parts[0].split(":", 1)[0] != stream):
        return None
    try:
        return int(parts[1])
    except ValueError:
        return None


async def read_stream(bus: Any, stream: str, *, start: int = 1, subject: str = ">",
                      timeout: float = 60.0) -> list[tuple[str, int, bytes]]:
    """Every message ``stream`` holds from sequence ``start`` on, as ``(subject, sequence, data)``
    in sequence order; up to the stream's last sequence when the read began.  A stream that does
    not exist reads as empty."""
    return [(subj, seq, data) for subj, seq, data, _ in await _read(bus, stream, start, subject, timeout)]


async def _read(bus: Any, stream: str, start: int, subject: str,
                timeout: float) -> list[tuple[str, int, bytes, dict[str, str] | None]]:
    import nats.js.errors

    try:
        info = await ask("stream.info", lambda: bus.js.stream_info(stream), detail=stream)
    except nats.js.errors.NotFoundError:
        return []
    last = int(info.state.last_seq or 0)
    if not (info.state.messages or 0) or last < start:
        return []
    cfg = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=max(1, start))
    subj = subject if subject != ">" else (info.config.subjects or [">"])[0]
    return await bus.read_ordered(stream, subj, cfg, until=last, timeout=timeout, big=True)


class StateReader:
    """The state messages ``(subject, state-stream sequence, data)``, read in rounds: each `read` returns
    those not returned before, in state-stream sequence order.  From the history copy
    (`STATE_HISTORY_STREAM`, each message mapped back to its ``BUSCHED_STATE`` sequence) when it exists,
    plus what the state stream holds that the copy does not (yet); else from the state stream alone.
    `source` names the stream read (set by the first `read`)."""

    def __init__(self, bus: Any, *, timeout: float = 60.0) -> None:
        self.bus = bus
        self.timeout = timeout
        self.source: str | None = None
        self._next = {STATE_STREAM: 1, STATE_HISTORY_STREAM: 1}
        self._seen: set[int] = set()

    async def read(self) -> list[tuple[str, int, bytes]]:
        import nats.js.errors

        if self.source is None:
            try:
                await ask("stream.info", lambda: self.bus.js.stream_info(STATE_HISTORY_STREAM),
                          detail=STATE_HISTORY_STREAM)
                self.source = STATE_HISTORY_STREAM
            except nats.js.errors.NotFoundError:
                self.source = STATE_STREAM
        new: dict[int, tuple[str, int, bytes]] = {}
        streams = [STATE_HISTORY_STREAM, STATE_STREAM] if self.source == STATE_HISTORY_STREAM else [STATE_STREAM]
        for stream in streams:
            items = await _read(self.bus, stream, self._next[stream], ">", self.timeout)
            if not items:
                continue
            self._next[stream] = items[-1][1] + 1
            for subj, seq, data, headers in items:
                orig = seq if stream == STATE_STREAM else source_sequence(headers, STATE_STREAM)
                if orig is None or orig in self._seen or orig in new:
                    continue
                new[orig] = (subj, orig, data)
        self._seen.update(new)
        return [new[k] for k in sorted(new)]


async def read_state(bus: Any, *, timeout: float = 60.0) -> tuple[list[tuple[str, int, bytes]], str]:
    """Every state message still held (`StateReader`), in state-stream sequence order, and the stream read."""
    r = StateReader(bus, timeout=timeout)
    items = await r.read()
    return items, r.source or STATE_STREAM
