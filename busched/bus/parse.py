"""The connection's messages read from its buffer without a regular expression and a coroutine each.

nats-py's parser (``nats.protocol.parser.Parser.parse``) matches each ``MSG``/``HMSG`` control line
with a regular expression, keeps its fields in a dict and awaits the connection's ``_process_msg``
for every message: a coroutine made and run per message, also for those `busched.bus.direct` then
hands straight to a plain function (the publishes' acknowledgements, the state watch's messages).
`install` puts a parse in front of it on one connection: while the buffer starts with a complete
``MSG`` or ``HMSG`` (control line and payload), it splits the control line itself and hands a
message whose subscription has a direct route to that route at once, without a coroutine; any
other message goes to ``_process_msg`` as before, awaited in the same order.  Everything else (a
``PING``, ``INFO``, ``-ERR``, a line it cannot read, a message still arriving) is left where it is
and nats-py's own parse takes the buffer from there, so the protocol's handling is nats-py's.  The
parser's state is read again after every await (a reconnect resets it).

`usable` checks the parser's shape (tests/bus/test_parse.py fails on a nats-py where it says no).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

__all__ = ["install", "usable"]

_MSG = b"MSG "
_HMSG = b"HMSG "
_CRLF = b"\r\n"
_DIGITS = b"0123456789"
_SPACE_OR_DIGIT = b" \t\n\r\x0b\x0c0123456789"  # what may follow a CRLF that nats-py's \s+ crosses
_MAX_LINE = 4096  # nats-py's MAX_CONTROL_LINE_SIZE: a longer line is left to it (it raises)
_INSTALLED = "_busched_parse"

log = logging.getLogger("busched.bus")


def usable(nc: Any) -> bool:
    """Whether ``nc``'s parser is nats-py's as this knows it: a ``bytearray`` buffer, its state (1 awaiting a
    control line, 2 a payload) and an ``async parse(data)``."""
    ps = getattr(nc, "_ps", None)
    if ps is None or not isinstance(getattr(ps, "buf", None), bytearray) or getattr(ps, "state", None) not in (1, 2):
        return False
    fn = getattr(ps, "parse", None)
    if fn is None or not inspect.iscoroutinefunction(fn):
        return False
    try:
        return list(inspect.signature(fn).parameters) == ["data"]
    except (TypeError, ValueError):
        return False


def install(nc: Any, routes: dict[int, Callable[[bytes, bytes], None]], raw: dict[int, Callable[..., Any]]) -> bool:
    """Read ``nc``'s messages as the module's docstring says, with `busched.bus.direct`'s route tables
    (``routes``: plain handlers, for messages without headers; ``raw``: raw handlers); False (nothing changed)
    when not `usable`."""
    if nc.__dict__.get(_INSTALLED):
        return True
    if not usable(nc):
        return False
    ps = nc._ps
    original = ps.parse
    stats = nc.stats
    # a message still arriving: its buffer and the bytes it needs there, so a big payload that comes in many
    # reads is not copied again at each read (only once it is all there)
    waiting: list[Any] = [None, 0]

    async def parse(data: bytes = b"") -> None:
        buf = ps.buf
        if data:
            buf.extend(data)
        if waiting[0] is buf and len(buf) < waiting[1] and ps.state == 1:
            return  # (a reconnect meanwhile gives the parser a new buffer: then this does not apply)
        waiting[0] = None
        view = b""
        viewed: Any = None  # the buffer ``view`` is a copy of
        have = base = 0
        while ps.state == 1 and buf:
            # the frames are cut from one copy of what is buffered, read by position: the buffer loses what was
            # read once, when reading stops or before an await (a slice each and a deletion each cost more).  After
            # an await the same copy is read on from where it stopped (``base``: where the buffer now starts in it)
            # while the buffer is still the rest of it; copied again only after a reset: else every frame nats-py
            # processes would copy all that is still buffered after it again
            if viewed is not buf or len(buf) != have - base:
                view = bytes(buf)
                viewed = buf
                have = len(view)
                base = 0
            pos = base
            later: Any = None
            try:
                while pos < have:
                    if view.startswith(_MSG, pos):
                        start = pos + 4
                        h = 0
                    elif view.startswith(_HMSG, pos):
                        start = pos + 5
                        h = 1
                    else:
                        break
                    end = view.find(_CRLF, pos, pos + _MAX_LINE)
                    if end < 0:
                        if have - pos >= _MAX_LINE:
                            break  # nats-py's parse says what is wrong with it
                        return  # the line is still arriving
                    line = view[start:end]
                    args = line.split()
                    # MSG <subject> <sid> [reply] <size>; HMSG <subject> <sid> [reply] <hsize> <size>: nats-py
                    # reads the numbers as (\d+) only, the size right before the CRLF, no CR or LF between a reply
                    # and the size; anything else (too few fields, a sign, an underscore, a space before the CRLF,
                    # a bare CR or LF) goes to its parse, which raises ProtocolError (the client reconnects at once)
                    # or reads it as it does
                    n = len(args) - h
                    if (n != 3 and n != 4) or not args[1].isdigit() or not args[-1].isdigit() \
                            or view[end - 1] not in _DIGITS or b"\n" in line or b"\r" in line:
                        break
                    size = int(args[-1])
                    sid = int(args[1])
                    if h:
                        if not args[-2].isdigit():
                            break
                        hsize = int(args[-2])
                        if hsize > size:
                            break
                    else:
                        hsize = 0
                    body = end + 2
                    stop = body + size
                    if have < stop + 2:
                        waiting[0], waiting[1] = buf, stop + 2 - pos  # (once the buffer lost what was read)
                        return  # the payload is still arriving: read again with the next bytes
                    if h and n == 3 and view[body] in _SPACE_OR_DIGIT:
                        break  # nats-py may read the line on across its CRLF (a reply, then these as the sizes)
                    subject = args[0]
                    if hsize:
                        headers: bytes | None = view[body:body + hsize]
                        payload = view[body + hsize:stop]
                    else:
                        headers = None
                        payload = view[body:stop]
                    pos = stop + 2
                    handler = routes.get(sid)
                    if handler is not None and headers is None:
                        stats["in_msgs"] += 1
                        stats["in_bytes"] += size
                        try:
                            handler(subject, payload)
                        except Exception:  # noqa: BLE001 - never into the read loop: it would end the connection
                            log.exception("handling a message on %r failed", subject)
                        continue
                    reply = args[2] if n == 4 else b""
                    take = raw.get(sid) if handler is None else None
                    if take is not None:
                        try:
                            later = take(sid, subject, reply, payload, headers)
                        except Exception:  # noqa: BLE001 - as above
                            log.exception("handling a message on %r failed", subject)
                            later = None
                        if later is None:
                            continue
                    else:
                        later = nc._process_msg(sid, subject, reply, payload, headers)
                    break  # awaited below, once the buffer has lost what was read
            finally:
                del buf[:pos - base]
                base = pos
            if later is None:
                break  # not a message frame this reads, or a line nats-py refuses: its parse from here
            try:
                await later
            except Exception:  # noqa: BLE001 - as above; nats-py's own processing raises into its read loop
                if take is None:
                    raise
                log.exception("handling a message on %r failed", subject)
            buf = ps.buf  # (a reconnect meanwhile resets the parser)
        if buf:
            await original(b"")

    ps.parse = parse
    setattr(nc, _INSTALLED, True)
    return True
