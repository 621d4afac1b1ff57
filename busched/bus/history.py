"""The history stream and full reads of a stream (docs/bus.md, "History").

``BUSCHED_HISTORY`` (subjects ``busched.history.>``) keeps one `CycleRecord` per cycle that decided
something, on ``busched.history.cycle.<boot>``, with limits retention by age
(`StreamSettings.history_max_age`, 7 days by default; 0 creates no stream and writes no records).
`read_stream` reads every message a stream still holds, in sequence order, through an ordered
push consumer from its first sequence (not the last message per subject, as a catch-up does):
what `busched replay` and `busched record` need.
"""

from __future__ import annotations

import asyncio
from typing import Any

from nats.js import api

__all__ = ["HISTORY_STREAM", "HISTORY_PREFIX", "cycle_subject", "read_stream"]

HISTORY_STREAM = "BUSCHED_HISTORY"
HISTORY_PREFIX = "busched.history"


def cycle_subject(boot: str) -> str:
    return f"{HISTORY_PREFIX}.cycle.{boot or 'unknown'}"


async def read_stream(bus: Any, stream: str, *, start: int = 1, subject: str = ">",
                      timeout: float = 60.0) -> list[tuple[str, int, bytes]]:
    """Every message ``stream`` holds from sequence ``start`` on, as ``(subject, sequence, data)``
    in sequence order; up to the stream's last sequence when the read began.  A stream that does
    not exist reads as empty."""
    import nats.js.errors

    try:
        info = await bus.js.stream_info(stream)
    except nats.js.errors.NotFoundError:
        return []
    last = int(info.state.last_seq or 0)
    if not (info.state.messages or 0) or last < start:
        return []
    out: list[tuple[str, int, bytes]] = []
    done = asyncio.Event()

    async def cb(m: Any) -> None:
        try:
            seq = int(m.metadata.sequence.stream)
        except Exception:  # noqa: BLE001 - not a stream message
            return
        out.append((m.subject, seq, bytes(m.data or b"")))
        if seq >= last:
            done.set()

    cfg = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=max(1, start))
    subj = subject if subject != ">" else (info.config.subjects or [">"])[0]
    sub = await bus.js.subscribe(subj, stream=stream, cb=cb, ordered_consumer=True, config=cfg,
                                 pending_msgs_limit=10_000_000, pending_bytes_limit=4 * 1024 * 1024 * 1024)
    try:
        await asyncio.wait_for(done.wait(), timeout)
    finally:
        try:
            await sub.unsubscribe()
        except Exception:  # noqa: BLE001
            pass
    return out
