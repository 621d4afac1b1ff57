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
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

import msgspec

from busched.api.limits import LabelKey, ShortStr
from busched.api.objects import (
    HyperNodeSpec,
    JobSpec,
    NodeShardSpec,
    NodeSpec,
    NodeUsageSpec,
    PriorityClassSpec,
    QueueSpec,
    ResourceList,
    ResourceQuotaSpec,
    TaskSpec,
)
from busched.api.timestamp import Timestamp

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


Version = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
Count = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
ShardName = Annotated[str, msgspec.Meta(max_length=253)]  # a NodeShard's name, "" for no shard
# what a bind adds to its task's annotations (the devices deviceshare gave it: docs/agents.md, "Devices")
BindAnnotations = Annotated[dict[LabelKey, Annotated[str, msgspec.Meta(max_length=4096)]], msgspec.Meta(max_length=32)]


class Msg(msgspec.Struct, tag_field="type", kw_only=True, rename="camel", omit_defaults=True):
    """Base of every message.  ``version`` is the publisher's counter: informational, never an order (the
    stream's sequence is)."""

    version: Version = 0


# -- state events ---------------------------------------------------------------------------------------------------
class NodeUpsert(Msg, tag="node.upsert"):
    node: NodeSpec


class NodeDelete(Msg, tag="node.delete"):
    name: str


class TaskUpsert(Msg, tag="task.upsert"):
    task: TaskSpec


class TaskDelete(Msg, tag="task.delete"):
    name: str
    namespace: str = "default"


class JobUpsert(Msg, tag="job.upsert"):
    """A PodGroup."""

    job: JobSpec


class JobDelete(Msg, tag="job.delete"):
    name: str
    namespace: str = "default"


class QueueUpsert(Msg, tag="queue.upsert"):
    queue: QueueSpec


class QueueDelete(Msg, tag="queue.delete"):
    name: str


class PriorityClassUpsert(Msg, tag="priorityClass.upsert"):
    priority_class: PriorityClassSpec


class PriorityClassDelete(Msg, tag="priorityClass.delete"):
    name: str


class HyperNodeUpsert(Msg, tag="hyperNode.upsert"):
    hyper_node: HyperNodeSpec


class HyperNodeDelete(Msg, tag="hyperNode.delete"):
    name: str


class ResourceQuotaUpsert(Msg, tag="resourceQuota.upsert"):
    resource_quota: ResourceQuotaSpec


class ResourceQuotaDelete(Msg, tag="resourceQuota.delete"):
    name: str
    namespace: str = "default"


class NodeShardUpsert(Msg, tag="nodeShard.upsert"):
    """Volcano's NodeShard: the nodes a scheduler started with ``--shard NAME`` owns."""

    node_shard: NodeShardSpec


class NodeShardDelete(Msg, tag="nodeShard.delete"):
    name: str


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
    boot: str = ""  # the agent incarnation that took this attempt, once known
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
    boot: str = ""  # the agent's incarnation


class BindRejected(Msg, tag="bind.rejected"):
    namespace: str
    name: str
    node: str
    attempt: Count
    reason: str = ""
    boot: str = ""


class TaskPhaseChanged(Msg, tag="task.phase"):
    """A task's phase on its node: Running, Succeeded, Failed (``reason`` Evicted after an eviction)."""

    namespace: str
    name: str
    node: str
    attempt: Count
    phase: str
    reason: str = ""
    exit_code: Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)] | None = None
    boot: str = ""
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
    boot: str = ""
    seq: Count = 0
    interval: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 1.0
    holding: dict[str, Count] = {}
    through_seq: Count = 0
    used: ResourceList = {}
    consumer: str = ""  # the durable consumer this agent reads the node's decisions from
    # the node's measured load (Volcano's NodeUsage: when it was measured, cpu and memory percent per
    # period); the latest measurement again until the agent measures anew
    usage: NodeUsageSpec | None = None


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


UPSERTS: dict[str, type[Msg]] = {
    "node": NodeUpsert, "task": TaskUpsert, "job": JobUpsert, "queue": QueueUpsert,
    "priorityClass": PriorityClassUpsert, "hyperNode": HyperNodeUpsert, "resourceQuota": ResourceQuotaUpsert,
    "nodeShard": NodeShardUpsert,
}
DELETES: dict[str, type[Msg]] = {
    "node": NodeDelete, "task": TaskDelete, "job": JobDelete, "queue": QueueDelete,
    "priorityClass": PriorityClassDelete, "hyperNode": HyperNodeDelete, "resourceQuota": ResourceQuotaDelete,
    "nodeShard": NodeShardDelete,
}
# the field of an upsert that holds the spec
SPEC_FIELD: dict[str, str] = {
    "node": "node", "task": "task", "job": "job", "queue": "queue", "priorityClass": "priority_class",
    "hyperNode": "hyper_node", "resourceQuota": "resource_quota", "nodeShard": "node_shard",
}
STATE_EVENTS = tuple(UPSERTS.values()) + tuple(DELETES.values())

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


def upsert(kind: str, spec: Any, version: int) -> Msg:
    return UPSERTS[kind](version=version, **{SPEC_FIELD[kind]: spec})


def delete(kind: str, spec: Any, version: int) -> Msg:
    cls = DELETES[kind]
    kw: dict[str, Any] = {"name": spec.name}
    if "namespace" in cls.__struct_fields__:
        kw["namespace"] = spec.namespace
    return cls(version=version, **kw)


_KIND_OF: dict[type, str] = {**{c: k for k, c in UPSERTS.items()}, **{c: k for k, c in DELETES.items()}}
_UPSERT_TYPES = frozenset(UPSERTS.values())
DELETE_TYPES = frozenset(DELETES.values())  # by exact type: `type(msg) in DELETE_TYPES`


def object_kind(msg: Msg) -> str | None:
    """The object kind of a state event, None for other messages."""
    return _KIND_OF.get(type(msg))


def spec_key(spec: Any) -> str:
    """``ns/name`` of a namespaced spec, ``name`` of the others: the key of its state subject."""
    ns = getattr(spec, "namespace", None)
    return f"{ns}/{spec.name}" if ns is not None else str(spec.name)


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
