"""What the scheduler reports for people and tools, each on a stream of its own: a ``cycle`` record per
scheduling cycle on the history stream, and scheduling ``event``s (Kubernetes' Events) on the events stream.

They stand apart from `busched.bus.messages` because no scheduling decision reads them: they are the
scheduler's account of what it did (for `busched replay`, `busched events` and dashboards), with
bounds of their own.  `busched.bus.messages` re-exports every name.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from busched.api.limits import ShortStr
from busched.bus.wire import Count, Msg

__all__ = ["CycleRecord", "MAX_EVENT_REASON", "MAX_EVENT_MESSAGE", "EventObject", "EventSource", "Event"]


# -- history --------------------------------------------------------------------------------------------------------
class CycleRecord(Msg, tag="cycle"):
    """What one scheduling cycle saw and decided, on the history stream (docs/bus.md, "History").

    Compact on purpose (a record a second for a year): short names, empty fields omitted.  ``seq``
    is the last state-stream sequence the cycle had applied before its snapshot and ``own`` the
    highest sequence of the scheduler's own binding records it knew of by then (their effect
    counts at once, before the stream hands them back); ``cfg`` the digest of the configuration,
    whose canonical JSON is in ``config`` on the first record of a boot.  The inputs that are not
    on the state stream: ``unready`` (nodes whose agent is not alive), ``excl`` (task -> nodes it
    is kept off after a refusal), ``backoff`` (tasks under the backoff gate).  Decisions, as the
    session made them: ``binds`` [task, node], ``evicts`` [task, node, reason], ``pipelined``
    [task, node], ``phases`` [job, phase] of the podgroups whose status changed.  ``shard`` and
    ``shard_mode``: the NodeShard a sharded scheduler owned (its snapshot's shard follows from the stream).
    """

    boot: str = ""
    n: Count = 0  # the cycle's number within the boot
    now: float = 0.0  # the session's clock (epoch seconds)
    seq: Count = 0
    own: Count = 0
    cfg: str = ""
    config: str = ""
    seed: int = 0
    binds: list[tuple[str, str]] = []
    evicts: list[tuple[str, str, str]] = []
    pipelined: list[tuple[str, str]] = []
    phases: list[tuple[str, str]] = []
    unready: list[str] = []
    excl: dict[str, list[str]] = {}
    backoff: list[str] = []
    shard: str = ""  # the NodeShard the scheduler owned (`busched run --shard`), "" for none
    shard_mode: str = ""  # hard | soft


# -- scheduling events ----------------------------------------------------------------------------------------------
MAX_EVENT_REASON = 128
MAX_EVENT_MESSAGE = 1024  # as Kubernetes' events.k8s.io note; the recorder cuts longer messages


class EventObject(msgspec.Struct, rename="camel", omit_defaults=True):
    """Kubernetes' involvedObject in our words: ``kind`` task | job | queue | node, namespace "" for queues
    and nodes."""

    kind: Literal["task", "job", "queue", "node"]
    name: ShortStr
    namespace: ShortStr = ""


class EventSource(msgspec.Struct, rename="camel", omit_defaults=True, frozen=True):
    component: Annotated[str, msgspec.Meta(max_length=64)] = "busched-scheduler"
    instance: Annotated[str, msgspec.Meta(max_length=64)] = ""  # the scheduler's boot


class Event(Msg, tag="event"):
    """A scheduling event, Kubernetes' core/v1 Event as Volcano's scheduler records them (docs/bus.md,
    "Scheduling events"): Scheduled, FailedScheduling, Preempted, Evicted on a task; Unschedulable,
    Scheduled on a job (its PodGroup); Overused on a queue.

    One message per *series* (the same object, type, reason and message), on the series' own subject of
    the events stream, which keeps only its latest: ``count`` how often the scheduler saw it, from
    ``firstTimestamp`` to ``lastTimestamp`` (epoch seconds of the cycles that saw it).  (``eventType``:
    the message's own ``type`` field is its tag.)"""

    involved_object: EventObject
    reason: Annotated[str, msgspec.Meta(max_length=MAX_EVENT_REASON)]
    message: Annotated[str, msgspec.Meta(max_length=MAX_EVENT_MESSAGE)] = ""
    event_type: Literal["Normal", "Warning"] = "Normal"
    count: Annotated[int, msgspec.Meta(ge=1, le=2**63 - 1)] = 1
    first_timestamp: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    last_timestamp: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    source: EventSource = EventSource()
    series: Annotated[str, msgspec.Meta(max_length=64)] = ""  # the series id, the last token of its subject
