"""Serving `busched logs`: an agent answers log requests for its nodes from its executor's files.

One core-NATS subscription per node on ``busched.api.logs.<node>`` (`busched.bus.subjects.logs_subject`),
taken only when the agent's executor keeps logs (`LogReader`: the process executor does).  Each request
is a bounded read (`busched.bus.messages.LogsRequest`); ``busched logs -f`` follows by asking again from
the ``next`` offset, so the agent holds no state per reader.
"""

from __future__ import annotations

import functools
import logging
from typing import Protocol, runtime_checkable

from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.client import Bus

__all__ = ["LogReader", "serve_logs"]

log = logging.getLogger("busched.agent")


@runtime_checkable
class LogReader(Protocol):
    def read_log(self, node: str, key: str, attempt: int, offset: int,
                 limit: int) -> tuple[bytes, int, int, bool] | None:
        """(data, where it starts, where the next read starts, whether the run has ended and all was read), or
        None when the node never ran the task (that attempt of it)."""


async def serve_logs(bus: Bus, nodes: list[str], reader: LogReader) -> None:
    for node in nodes:
        await bus.serve(S.logs_subject(node), functools.partial(_answer, node, reader=reader))


async def _answer(node: str, data: bytes, *, reader: LogReader) -> bytes:
    try:
        req = m.decode(data)
    except m.DecodeError as e:
        return m.encode(m.LogsReply(error=f"malformed request: {e}"))
    if not isinstance(req, m.LogsRequest):
        return m.encode(m.LogsReply(error=f"expected a logs request, got {type(req).__name__}"))
    key = f"{req.namespace}/{req.name}"
    got = reader.read_log(node, key, req.attempt, req.offset, req.limit)
    if got is None:
        return m.encode(m.LogsReply(error=f"node {node} has no log of task {key}"
                                           + (f" attempt {req.attempt}" if req.attempt else "")))
    chunk, start, nxt, ended = got
    return m.encode(m.LogsReply(data=chunk.decode(errors="replace"), offset=start, next=nxt, ended=ended))
