"""The requests and replies of the bus: with the running scheduler (``get``, ``lookup``, ``drain``) and with
an agent (``logs``).

They stand apart from `busched.bus.messages` because they are never kept on a stream: each is asked
and answered on a subject of its own (docs/bus.md), and a request reads best next to its reply.
`busched.bus.messages` re-exports every name.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from busched.bus.wire import Count, Msg

__all__ = ["GetRequest", "GetReply", "LookupRequest", "DrainRequest", "MAX_LOG_READ", "LogsRequest", "LogsReply"]


# -- request/reply --------------------------------------------------------------------------------------------------
class GetRequest(Msg, tag="get"):
    kind: str  # nodes | queues | jobs | tasks
    offset: int = 0
    limit: int = 500
    spec: bool = False  # each row also carries the object's spec as applied (`busched get -o wide|json|yaml`)


class GetReply(Msg, tag="get.reply"):
    kind: str = ""
    items: list[dict[str, Any]] = []
    next: int | None = None  # offset of the next page, None on the last
    error: str = ""


class LookupRequest(Msg, tag="lookup"):
    """One object by name, answered with a `GetReply` of one item: ``op`` get (its `busched get` row),
    describe (row, spec, recent binds/evicts/releases) or explain (why it is or is not placed: reason
    code, message, aggregated node reasons, best nodes' scores; ``kind`` tasks or jobs, "" for either)."""

    op: str  # get | describe | explain
    name: str  # ns/name for jobs and tasks, else the name
    kind: str = ""  # nodes | queues | jobs | tasks
    spec: bool = False  # op get: the row also carries the object's spec as applied (describe always does)


class DrainRequest(Msg, tag="drain"):
    """`busched node drain`: evict every task on ``node`` (reason ``drain``) through the binding table, once
    the scheduler has applied the node's state-stream message ``after`` (the cordon that came first).
    Answered with a `GetReply` whose one item names the node and the tasks being evicted."""

    node: Annotated[str, msgspec.Meta(min_length=1, max_length=253)]
    after: Count = 0


MAX_LOG_READ = 2**20


class LogsRequest(Msg, tag="logs"):
    """`busched logs`: a task's output, asked of the agent of its node on ``busched.api.logs.<node>``
    (`subjects.logs_subject`) and answered with a `LogsReply`.  ``offset`` is where to read from in bytes
    (negative: that many bytes before the end); at most ``limit`` bytes come back.  The newest attempt the
    node ran unless ``attempt`` is given."""

    namespace: Annotated[str, msgspec.Meta(min_length=1, max_length=253)]
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=253)]
    attempt: Count = 0
    offset: Annotated[int, msgspec.Meta(ge=-MAX_LOG_READ, le=2**62)] = -65536
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_LOG_READ)] = 65536


class LogsReply(Msg, tag="logs.reply"):
    """Output from ``offset`` (UTF-8, undecodable bytes replaced); ``next`` is where the following read
    starts; ``ended`` once the run has ended and all of it was read.  A log that rotated since the last
    read starts again at 0 (what went to the rotated file in between is not sent)."""

    data: str = ""
    offset: Count = 0
    next: Count = 0
    ended: bool = False
    error: str = ""
