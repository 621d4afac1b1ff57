"""Publish frames written straight to a connection's outgoing buffer, header blocks built once.

`Publisher.publish_all` sends tens of thousands of messages a run (binding records, decisions,
podgroup statuses, events, an agent's answers), each with one or two headers.  nats-py's
``publish`` builds every message's header block anew (a bytearray, a regular expression per key,
strip and translate per value) and validates the subject with another; that was about a third of
the scheduler's cost of a publish, acknowledgement included (docs/benchmarks.md, "Through the bus,
fewer messages per bind").  Here the fixed part of each header block is bytes made once, only the
value is added, and a message is one ``HPUB`` frame formatted in one step.

What nats-py checks is still checked, more cheaply: a subject, reply or header value holding a space,
tab, CR or LF is never framed here (it would let a caller inject protocol lines); such a message goes
through nats-py's own ``publish``, which refuses or cleans it as before.  The frames go through the
connection's own pending buffer and flusher, so ordering with every other publish of the connection
is kept.  A call that starts while the connection is not connected publishes through nats-py, as
before; frames handed over are refused as nats-py's ``publish`` refuses a message (closed, draining, or
reconnecting with its pending buffer full), and otherwise wait in that buffer for the reconnect.
`Frames.usable` is False for a client without the buffer and flusher this relies on (another
nats-py), and then every message goes through ``publish``.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import nats.errors

__all__ = ["Frames", "header_block", "clean", "hpub", "pub"]

_BAD = re.compile(r"[ \t\r\n]")  # what nats-py refuses in a subject; in a header value, what could end the line
_HDR_LINE = b"NATS/1.0\r\n"
CHUNK = 64 * 1024  # bytes of frames handed to the connection at a time


def header_block(headers: dict[str, str]) -> bytes:
    """The NATS header block of ``headers`` (keys as given; values must be clean, see `clean`)."""
    return _HDR_LINE + b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items()) + b"\r\n"


def clean(*parts: str) -> bool:
    """Whether every part may be framed here (no space, tab, CR or LF; not empty)."""
    return all(p and _BAD.search(p) is None for p in parts)


def hpub(subject: str, reply: str, hdr: bytes, payload: bytes) -> bytes:
    """One ``HPUB`` frame: the message ``payload`` with the header block ``hdr``."""
    n = len(hdr)
    return b"HPUB %s %s %d %d\r\n%s%s\r\n" % (subject.encode(), reply.encode(), n, n + len(payload), hdr, payload)


def pub(subject: str, reply: str, payload: bytes) -> bytes:
    """One ``PUB`` frame (no headers)."""
    return b"PUB %s %s %d\r\n%s\r\n" % (subject.encode(), reply.encode(), len(payload), payload)


class Frames:
    """Frames collected for one connection ``nc`` and handed to its pending buffer in chunks; one per call
    (calls run concurrently, and handing a chunk over may wait for the connection's flusher).

    Each frame carries a tag (the caller's index of the message); when handing a chunk over fails,
    `flush` raises and `lost` holds the tags of that chunk's messages, none of which can be known sent.
    """

    def __init__(self, nc: Any) -> None:
        self.nc = nc
        self.lost: list[Any] = []
        self._out: list[bytes] = []
        self._tags: list[Any] = []
        self._size = 0
        self._bytes = 0

    @staticmethod
    def usable(nc: Any) -> bool:
        """Whether ``nc`` has what framing relies on, as nats-py 2.x has it: the pending list and its size, the
        coroutines that add to it and flush it, the flusher's queue, the stats and the state flags.  Anything
        else (another nats-py) publishes through nats-py's ``publish``; tests/bus/test_frames.py fails on the
        nats-py installed if this says no, so a change there is seen, not silently slower."""
        if not all(hasattr(nc, a) for a in ("_flush_queue", "stats", "is_connected", "is_closed", "is_draining_pubs",
                                           "_max_payload", "_max_pending_size", "_pending_data_size")):
            return False
        return (inspect.iscoroutinefunction(getattr(nc, "_send_command", None))
                and inspect.iscoroutinefunction(getattr(nc, "_flush_pending", None))
                and isinstance(getattr(nc, "_pending", None), list))

    def unsent(self) -> list[Any]:
        """The tags of the frames not handed over yet (dropped: after a failure they are never sent) and of the
        chunk whose handing over failed (`lost`)."""
        out = self.lost + self._tags
        self.lost, self._tags = [], []
        self._out.clear()
        self._size = self._bytes = 0
        return out

    async def add(self, frame: bytes, payload_size: int, tag: Any) -> None:
        self._out.append(frame)
        self._tags.append(tag)
        self._size += len(frame)
        self._bytes += payload_size
        if self._size >= CHUNK:
            await self.flush()

    async def flush(self) -> None:
        """Hand what was collected to the connection (before any publish of ours that goes through nats-py,
        so the order on the wire is the order of the calls).  What nats-py's ``publish`` refuses is refused
        here, the same way: a closed or draining connection, and while reconnecting, more than its pending
        buffer holds; otherwise the frames wait in that buffer for the reconnect, as nats-py's would."""
        if not self._out:
            return
        nc = self.nc
        data = b"".join(self._out)
        error: Exception | None = None
        if nc.is_closed:
            error = nats.errors.ConnectionClosedError()
        elif nc.is_draining_pubs:
            error = nats.errors.ConnectionDrainingError()
        elif not nc.is_connected and (nc._max_pending_size <= 0
                                      or len(data) + nc._pending_data_size > nc._max_pending_size):
            error = nats.errors.OutboundBufferLimitError()
        if error is not None:  # none of these frames is handed over: none is sent
            self.lost, self._tags = self._tags, []
            self._out.clear()
            self._size = self._bytes = 0
            raise error
        nc.stats["out_msgs"] += len(self._out)
        nc.stats["out_bytes"] += self._bytes
        self._tags = []
        self._out.clear()
        self._size = self._bytes = 0
        # (handed over from here on: nats-py's _send_command puts them in its pending buffer first, so whatever
        # raises after it, they may be sent; their acknowledgements decide)
        await nc._send_command(data)
        if nc._flush_queue is not None and nc._flush_queue.empty():
            await nc._flush_pending()
