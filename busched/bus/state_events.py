"""The state events: ``<kind>.upsert`` carries an object's spec, ``<kind>.delete`` its identity.

The stream orders them (the later message on an object's subject wins).  The tables from an object
kind to its two message types (`UPSERTS`, `DELETES`, `SPEC_FIELD`) and the helpers that build them
and key them (`upsert`, `delete`, `object_kind`, `spec_key`) are here with them.  They stand apart
from `busched.bus.messages` because they are the one family that mirrors the object specs
(`busched.api.objects`) kind by kind, and read best as one table; `busched.bus.messages` re-exports
every name, and builds its union from `STATE_EVENTS` first.
"""

from __future__ import annotations

from typing import Any

from busched.api.objects import (
    HyperNodeSpec,
    JobSpec,
    NodeShardSpec,
    NodeSpec,
    PriorityClassSpec,
    QueueSpec,
    ResourceQuotaSpec,
    TaskSpec,
)
from busched.bus.wire import Msg

__all__ = [
    "NodeUpsert", "NodeDelete", "TaskUpsert", "TaskDelete", "JobUpsert", "JobDelete", "QueueUpsert",
    "QueueDelete", "PriorityClassUpsert", "PriorityClassDelete", "HyperNodeUpsert", "HyperNodeDelete",
    "ResourceQuotaUpsert", "ResourceQuotaDelete", "NodeShardUpsert", "NodeShardDelete", "UPSERTS", "DELETES",
    "SPEC_FIELD", "STATE_EVENTS", "DELETE_TYPES", "upsert", "delete", "object_kind", "spec_key",
]


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
