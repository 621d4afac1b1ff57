"""Every message busched puts on the bus: msgspec Structs, JSON on the wire.

All messages are tagged structs (the ``type`` field) and decode through one
decoder into the `Message` union, so a consumer never guesses a payload's type
from its subject.  Every field after an object's identity has a default, and a
message's unknown fields are ignored, so a newer publisher can add fields without
breaking an older reader; the object specs inside (`busched.api.objects`) refuse
unknown fields, as an operator's typo must not be dropped (`busched.bus.schema`
marks which is which).

Families (see docs/bus.md for subjects and streams):

* state events: ``<kind>.upsert`` carries the object's spec (the shape of a
  scenario's ``cluster:`` block, `busched.api.objects`); ``<kind>.delete``
  carries its identity.  The stream orders them: the later message on an
  object's subject wins.  ``version`` is the publisher's own counter,
  informational only (bounded, it can never hold an object back).
* scheduler records, kept on the state stream so a restarted scheduler rebuilds
  from them: ``binding`` (a bind it decided, and whether it is still live) and
  ``podgroup.status`` (phase and conditions).
* decisions to agents: ``bind`` and ``evict``, one per task, on the node's own
  subject.
* agent results: ``bind.accepted``, ``bind.rejected``, ``task.phase`` and
  ``node.heartbeat``.
* request/reply with the running scheduler: ``get`` and ``get.reply``.
* scheduling events (Kubernetes' Events for Volcano): ``event``, one series per subject on the
  events stream, its latest count and timestamps (`Event`).

The families that stand on their own are in modules of their own: the state events
(`busched.bus.state_events`), request/reply (`busched.bus.request_reply`), the history and the
scheduling events (`busched.bus.reports`), all deriving from `busched.bus.wire.Msg`.  This module
keeps the scheduler's records, its decisions and the agents' results, gathers every family into
the one `Message` union it decodes, and re-exports every name: import messages from here.
"""

from __future__ import annotations

from typing import Annotated, Union

import msgspec

from busched.api.objects import NodeUsageSpec, ResourceList, TaskSpec
from busched.api.timestamp import Timestamp
from busched.bus.reports import (
    MAX_EVENT_MESSAGE,
    MAX_EVENT_REASON,
    CycleRecord,
    Event,
    EventObject,
    EventSource,
)
from busched.bus.request_reply import (
    MAX_LOG_READ as MAX_LOG_READ,
)
from busched.bus.request_reply import (
    DrainRequest,
    GetReply,
    GetRequest,
    LogsReply,
    LogsRequest,
    LookupRequest,
)
from busched.bus.state_events import (
    _KIND_OF,
    _UPSERT_TYPES,
    DELETES,
    SPEC_FIELD,
    STATE_EVENTS,
    UPSERTS,
    HyperNodeDelete,
    HyperNodeUpsert,
    JobDelete,
    JobUpsert,
    NodeDelete,
    NodeShardDelete,
    NodeShardUpsert,
    NodeUpsert,
    PriorityClassDelete,
    PriorityClassUpsert,
    QueueDelete,
    QueueUpsert,
    ResourceQuotaDelete,
    ResourceQuotaUpsert,
    TaskDelete,
    TaskUpsert,
    spec_key,
)
from busched.bus.state_events import (
    DELETE_TYPES as DELETE_TYPES,
)
from busched.bus.state_events import (
    delete as delete,
)
from busched.bus.state_events import (
    object_kind as object_kind,
)
from busched.bus.state_events import (
    upsert as upsert,
)
from busched.bus.wire import BindAnnotations as BindAnnotations
from busched.bus.wire import Boot, Count, Msg, ShardName
from busched.bus.wire import Version as Version

__all__ = [
    "Msg", "NodeUpsert", "NodeDelete", "TaskUpsert", "TaskDelete", "JobUpsert", "JobDelete", "QueueUpsert",
    "QueueDelete", "PriorityClassUpsert", "PriorityClassDelete", "HyperNodeUpsert", "HyperNodeDelete",
    "ResourceQuotaUpsert", "ResourceQuotaDelete", "NodeShardUpsert", "NodeShardDelete", "NodeLedger",
    "BindingRecord", "Condition", "PodGroupStatus", "QueueStatus", "BindDecision",
    "EvictDecision", "BindAccepted", "BindRejected", "TaskPhaseChanged", "NodeHeartbeat", "GetRequest", "GetReply",
    "LookupRequest", "DrainRequest", "Message", "MESSAGE_TYPES", "STATE_EVENTS", "UPSERTS", "DELETES", "encode",
    "decode", "DecodeError", "BINDING_LIVE_STATES", "CycleRecord", "Event", "EventObject", "EventSource",
    "MAX_EVENT_MESSAGE", "MAX_EVENT_REASON", "spec_key",
]

DecodeError = msgspec.DecodeError  # ValidationError is a subclass


# -- scheduler records ----------------------------------------------------------------------------------------------
BINDING_LIVE_STATES = ("binding", "evicting")


class BindingRecord(Msg, tag="binding"):
    """The scheduler's own record of a bind, written before the bind decision is published.

    ``attempt`` counts binds of this task (1, 2, ...); ``state`` is ``binding``
    (decided, the node's resources are held), ``evicting`` (an evict was sent)
    or ``released`` (the task is Pending again; ``reason`` says why and
    ``backoff`` how long, in seconds, before it may be placed again).
    """

    namespace: str
    name: str
    attempt: Count
    node: str = ""
    state: str = "binding"  # binding | evicting | released | failed | done
    outcome: str = ""  # done: how the attempt ended (Succeeded | Failed), final whatever its node says later
    exit_code: int | None = None
    reason: str = ""
    backoff: float = 0.0
    decided_at: float = 0.0  # unix seconds, informational only
    boot: Boot = ""  # the agent incarnation that took this attempt, once known
    stop: str = ""  # why an evicting attempt is stopped: evict | lease | restart | deleted | node
    writer: str = ""  # the scheduler instance that wrote the record
    epoch: Count = 0  # the writer's epoch (leader elections); a record of an older epoch is ignored
    shard: ShardName = ""  # the writer's shard ("": the default one): epochs are compared within a shard only
    annotations: BindAnnotations = {}  # added to the task's with this attempt (its devices); the cache shows them


class NodeLedger(Msg, tag="ledger"):
    """A node's placement ledger (docs/bus.md, "Shards"): written by a sharded scheduler in one atomic batch
    with the binding records of the tasks it places on ``node``, on condition that the ledger's subject is
    at the sequence the scheduler's view of the node was taken at.  Of two schedulers placing on one node
    from the same view, only one batch is stored; the other's binds are not, and it places again once its
    view has the winner's.  ``tasks`` and ``writer`` are informational."""

    node: Annotated[str, msgspec.Meta(max_length=253)]
    writer: Annotated[str, msgspec.Meta(max_length=253)] = ""
    shard: Annotated[str, msgspec.Meta(max_length=253)] = ""
    tasks: Annotated[list[Annotated[str, msgspec.Meta(max_length=600)]], msgspec.Meta(max_length=1000)] = []


class LeaderEpoch(Msg, tag="leader.epoch"):
    """Written on ``busched.state.leader.<shard>`` by a scheduler that has just won its shard's lease
    (`busched.bus.lease`), before any other write of its epoch.  In stream order, a binding record of
    an older epoch that comes after it was written by a deposed leader: every reader ignores it."""

    shard: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    epoch: Count
    holder: Annotated[str, msgspec.Meta(max_length=128)] = ""


class Condition(msgspec.Struct, rename="camel", omit_defaults=True):
    type: str
    status: str = "True"
    reason: str = ""
    message: str = ""
    transition_id: str = ""
    last_transition_time: float = 0.0  # unix seconds


class PodGroupStatus(Msg, tag="podgroup.status"):
    namespace: str
    name: str
    phase: str = ""
    conditions: list[Condition] = []


class QueueStatus(Msg, tag="queue.status"):
    """A queue's status as the scheduler writes it after a cycle (Volcano's QueueStatus): ``allocated``, the
    requests of its tasks that hold a node (and, under a ``root`` queue, of its children's), and how many of
    its podgroups are in each phase (counted by Volcano's queue controller)."""

    name: str
    state: str = ""
    allocated: ResourceList = {}
    pending: Count = 0
    running: Count = 0
    inqueue: Count = 0
    unknown: Count = 0
    completed: Count = 0


# -- decisions ------------------------------------------------------------------------------------------------------
class BindDecision(Msg, tag="bind"):
    """Run ``task`` on ``node``.  ``attempt`` identifies this bind; results must echo it."""

    node: str
    attempt: Count
    task: TaskSpec
    fence: Count = 0  # stream sequence of the binding record that decided it: an agent ignores a lower one
    epoch: Count = 0
    shard: ShardName = ""  # the writer's shard ("": the default one): epochs are compared within a shard only


class EvictDecision(Msg, tag="evict"):
    namespace: str
    name: str
    node: str
    attempt: Count
    reason: str = ""
    fence: Count = 0
    epoch: Count = 0
    shard: ShardName = ""


# -- agent results --------------------------------------------------------------------------------------------------
class BindAccepted(Msg, tag="bind.accepted"):
    namespace: str
    name: str
    node: str
    attempt: Count
    boot: Boot = ""  # the agent's incarnation (MAX_BOOT characters at most)


class BindRejected(Msg, tag="bind.rejected"):
    namespace: str
    name: str
    node: str
    attempt: Count
    reason: str = ""
    boot: Boot = ""


class TaskPhaseChanged(Msg, tag="task.phase"):
    """A task's phase on its node: Running, Succeeded, Failed (``reason`` Evicted after an eviction)."""

    namespace: str
    name: str
    node: str
    attempt: Count
    phase: str
    reason: str = ""
    exit_code: Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)] | None = None
    boot: Boot = ""
    # with Running: when the task started, as the agent saw it (the pod's startTime; cdp's cooldown and
    # the usage plugin's shadow load count from it); RFC 3339 or epoch seconds
    start_time: Timestamp | None = None


class NodeHeartbeat(Msg, tag="node.heartbeat"):
    """A node's agent is alive.

    ``holding`` maps every task the agent holds (``ns/name``) to the attempt it
    holds; ``through_seq`` is the highest decision-stream sequence it has
    processed, so the scheduler can tell a bind that never arrived from one the
    agent has and has not answered yet.
    """

    node: str
    boot: Boot = ""
    seq: Count = 0
    interval: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 1.0
    holding: dict[str, Count] = {}
    through_seq: Count = 0
    used: ResourceList = {}
    consumer: str = ""  # the durable consumer this agent reads the node's decisions from
    # the node's measured load (Volcano's NodeUsage: when it was measured, cpu and memory percent per
    # period); the latest measurement again until the agent measures anew
    usage: NodeUsageSpec | None = None



MESSAGE_TYPES: tuple[type[Msg], ...] = STATE_EVENTS + (
    NodeLedger, BindingRecord, LeaderEpoch, PodGroupStatus, QueueStatus, BindDecision, EvictDecision,
    BindAccepted, BindRejected, TaskPhaseChanged, NodeHeartbeat, GetRequest, GetReply, LookupRequest, DrainRequest,
    CycleRecord, Event, LogsRequest, LogsReply)

Message = Union[MESSAGE_TYPES]  # type: ignore[valid-type]

_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(Message)


def encode(msg: Msg) -> bytes:
    return _ENCODER.encode(msg)


def decode(data: bytes | str) -> Msg:
    """Decode any busched message; raises `DecodeError` (or its subclass ValidationError) naming the field.

    JSON nested deeper than the interpreter's recursion allows is a `DecodeError` too (an agent or a
    tool must not crash on it)."""
    try:
        return _DECODER.decode(data)
    except RecursionError:
        raise DecodeError("JSON is nested too deeply") from None




def object_key(msg: Msg) -> str:
    """``ns/name`` or ``name`` of the object a message is about."""
    t = type(msg)
    if t in _UPSERT_TYPES:
        spec = getattr(msg, SPEC_FIELD[_KIND_OF[t]])
        ns = getattr(spec, "namespace", None)
        return f"{ns}/{spec.name}" if ns is not None else spec.name
    if isinstance(msg, BindDecision):
        return f"{msg.task.namespace}/{msg.task.name}"
    ns = getattr(msg, "namespace", None)
    name = getattr(msg, "name", None) or getattr(msg, "node", "")
    return f"{ns}/{name}" if ns is not None else str(name)
