"""What the extender plugin sends and what it accepts back (the protocol: docs/extender.md).

Requests carry busched's task, node, job and queue in the JSON shape Volcano's extender sends
(Go's ``encoding/json`` of ``api.TaskInfo``, ``api.NodeInfo``...: the Go field names, resources as
``{"MilliCPU", "Memory", "ScalarResources", "MaxTaskNum"}`` with scalars in thousandths, a task's
status as Volcano's bit value), so an extender written for Volcano reads them unchanged.  Fields
busched does not model are left out; the Kubernetes objects (``Pod``, ``Node``, ``PodGroup``,
``Queue``) are the subset busched keeps (docs/extender.md lists them).

Answers are untrusted input: each is decoded into a `msgspec.Struct` with bounds, by a decoder built
once; anything else (not JSON, a wrong type, a status code out of range, more than `MAX_BODY`
bytes) is a `MalformedAnswerError`, which the plugin treats as a failed call.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any

import msgspec

from busched.api.job import JobInfo
from busched.api.node import NodeInfo
from busched.api.queue import QueueInfo
from busched.api.resource import Resource
from busched.api.task import TaskInfo

__all__ = ["MAX_BODY", "MalformedAnswerError", "PredicateAnswer", "PrioritizeAnswer", "VictimsAnswer", "VoteAnswer",
           "OverusedAnswer", "ReadyAnswer", "EventAnswer", "EmptyAnswer", "decode", "encode", "resource_view",
           "task_view", "node_view", "job_view", "queue_view", "go_task_status"]

MAX_BODY = 10 << 20  # Volcano's maxBodySize: an answer larger than 10 MiB is refused
_MAX_TEXT = 64 << 10  # an error message longer than this is not a message
_NAME = Annotated[str, msgspec.Meta(max_length=1024)]
_TEXT = Annotated[str, msgspec.Meta(max_length=_MAX_TEXT)]


class MalformedAnswerError(ValueError):
    """The extender's answer is not what the verb answers (not JSON, a wrong type, out of bounds)."""


# -- answers ----------------------------------------------------------------------------------------
class PredicateAnswer(msgspec.Struct):
    """``{"status": "<why not>", "code": N}``: an empty status passes; a non-empty one fails with
    ``code`` (Volcano's status codes 0..6; 0 with a message counts as Error)."""

    status: _TEXT = ""
    code: Annotated[int, msgspec.Meta(ge=0, le=6)] = 0


class PrioritizeAnswer(msgspec.Struct):
    """``{"nodeScore": {node: score}, "errorMessage": ""}``; no scores, or a message, is an error."""

    nodeScore: dict[_NAME, float] | None = None  # noqa: N815 - the wire's name
    errorMessage: _TEXT = ""  # noqa: N815


class Victim(msgspec.Struct):
    """A victim handed back: only its ``UID`` is read (it must be one of the candidates sent)."""

    UID: _NAME = ""  # noqa: N815


class VictimsAnswer(msgspec.Struct):
    """``{"status": 1 | 0 | -1, "victims": [task...]}`` (permit, abstain, reject)."""

    status: Annotated[int, msgspec.Meta(ge=-1, le=1)] = 0
    victims: list[Victim] | None = None


class VoteAnswer(msgspec.Struct):
    """jobEnqueueable: ``{"status": 1 | 0 | -1}``."""

    status: Annotated[int, msgspec.Meta(ge=-1, le=1)] = 0


class OverusedAnswer(msgspec.Struct):
    overused: bool = False


class ReadyAnswer(msgspec.Struct):
    status: bool = False


class EventAnswer(msgspec.Struct):
    """allocateFunc / deallocateFunc: ``{"errorMessage": ""}``."""

    errorMessage: _TEXT = ""  # noqa: N815


class EmptyAnswer(msgspec.Struct):
    """onSessionOpen, onSessionClose, jobEnqueued: any JSON object (its fields are not read)."""


_DECODERS: dict[type, msgspec.json.Decoder[Any]] = {}


def decode(kind: type[Any], body: bytes) -> Any:
    """``body`` as ``kind``; `MalformedAnswerError` when it is not one (an empty body is an empty object)."""
    if len(body) > MAX_BODY:
        raise MalformedAnswerError(f"answer of {len(body)} bytes, over the {MAX_BODY} byte limit")
    dec = _DECODERS.get(kind)
    if dec is None:
        dec = _DECODERS[kind] = msgspec.json.Decoder(kind)
    try:
        return dec.decode(body or b"{}")
    except msgspec.DecodeError as e:
        raise MalformedAnswerError(f"malformed answer: {e}") from None


_ENCODER = msgspec.json.Encoder()


def encode(doc: Any) -> bytes:
    return _ENCODER.encode(doc)


# -- the views (Volcano's JSON shape) ---------------------------------------------------------------
def go_task_status(task: TaskInfo) -> int:
    """Volcano's TaskStatus: Pending=1, Allocated=2, Pipelined=4 ... Unknown=512 (busched numbers them 1..10
    in the same order)."""
    return 1 << (int(task.status) - 1)


def _rfc3339(seconds: float) -> str | None:
    if not seconds:
        return None
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def resource_view(r: Resource | None) -> dict[str, Any] | None:
    """Volcano's Resource: ``pods`` is its MaxTaskNum, not a scalar."""
    if r is None:
        return None
    scalars = {k: v for k, v in r.scalars.items() if k != "pods"}
    return {"MilliCPU": r.cpu, "Memory": r.memory, "ScalarResources": scalars or None,
            "MaxTaskNum": max(r.max_task_num, int(r.scalars.get("pods", 0)))}


def _requests(r: Resource, pods: bool = True) -> dict[str, Any]:
    """A Kubernetes resource list of ``r`` (cpu in millicores, memory in bytes, scalars in units; ``pods``
    only for a node: a container asks for no pods)."""
    out: dict[str, Any] = {}
    if r.cpu:
        out["cpu"] = f"{r.cpu:g}m"
    if r.memory:
        out["memory"] = f"{r.memory:.0f}"
    for name, v in r.scalars.items():
        if v and (pods or name != "pods"):
            out[name] = f"{v:g}" if name == "pods" else f"{v:g}m"  # (pods a count, the rest thousandths)
    return out


def _pod(task: TaskInfo) -> dict[str, Any]:
    """The subset of the pod busched keeps: one container asking the task's request (its init
    request, when larger, as one init container)."""
    spec: dict[str, Any] = {
        "nodeName": task.node_name, "nodeSelector": dict(task.node_selector) or None,
        "tolerations": list(task.tolerations) or None, "affinity": task.affinity,
        "priorityClassName": task.priority_class_name, "priority": task.priority,
        "containers": [{"name": "main", "resources": {"requests": _requests(task.resreq, False)}}],
    }
    if task.init_resreq is not task.resreq and _requests(task.init_resreq, False) != _requests(task.resreq, False):
        spec["initContainers"] = [{"name": "init", "resources": {"requests": _requests(task.init_resreq, False)}}]
    return {"metadata": {"name": task.name, "namespace": task.namespace, "uid": task.uid,
                         "labels": dict(task.labels) or None, "annotations": dict(task.annotations) or None,
                         "creationTimestamp": _rfc3339(task.created)},
            "spec": spec}


def task_view(task: TaskInfo) -> dict[str, Any]:
    return {"UID": task.uid, "Job": task.job, "Name": task.name, "Namespace": task.namespace,
            "TaskRole": task.role, "Resreq": resource_view(task.resreq), "InitResreq": resource_view(task.init_resreq),
            "NodeName": task.node_name, "Status": go_task_status(task), "Priority": task.priority,
            "VolumeReady": False, "Preemptable": task.preemptable, "BestEffort": task.best_effort,
            "EvictionOccurred": task.eviction_occurred, "Pod": _pod(task)}


def node_view(node: NodeInfo) -> dict[str, Any]:
    return {"Name": node.name,
            "Node": {"metadata": {"name": node.name, "labels": dict(node.labels) or None,
                                  "annotations": dict(node.annotations) or None},
                     "spec": {"unschedulable": node.unschedulable, "taints": list(node.taints) or None},
                     "status": {"allocatable": _requests(node.allocatable), "capacity": _requests(node.capacity)}},
            "State": {"Phase": 1 if node.ready else 2, "Reason": "" if node.ready else "NotReady"},
            "Releasing": resource_view(node.releasing), "Pipelined": resource_view(node.pipelined),
            "Idle": resource_view(node.idle), "Used": resource_view(node.used),
            "Allocatable": resource_view(node.allocatable), "Capacity": resource_view(node.capacity),
            "Tasks": {uid: task_view(t) for uid, t in node.tasks.items()}}


def job_view(job: JobInfo) -> dict[str, Any]:
    return {"UID": job.uid, "Name": job.name, "Namespace": job.namespace, "Queue": job.queue,
            "Priority": job.priority, "MinAvailable": job.min_available,
            "TaskMinAvailable": dict(job.task_min_available) or None,
            "TaskMinAvailableTotal": sum(job.task_min_available.values()),
            "Tasks": {uid: task_view(t) for uid, t in job.tasks.items()},
            "Allocated": resource_view(job.allocated), "TotalRequest": resource_view(job.total_request),
            "CreationTimestamp": _rfc3339(job.created), "Preemptable": job.preemptable,
            "PodGroup": {"metadata": {"name": job.name, "namespace": job.namespace,
                                      "annotations": dict(job.annotations) or None,
                                      "labels": dict(job.labels) or None},
                         "spec": {"minMember": job.min_available, "queue": job.queue,
                                  "priorityClassName": job.priority_class_name,
                                  "minResources": job.min_resources_list},
                         "status": {"phase": job.phase}}}


def queue_view(queue: QueueInfo) -> dict[str, Any]:
    return {"UID": queue.uid, "Name": queue.name, "Weight": queue.weight, "Priority": queue.priority,
            "Reclaimable": queue.reclaimable,
            "Queue": {"metadata": {"name": queue.name, "annotations": dict(queue.annotations) or None},
                      "spec": {"weight": queue.weight, "capability": queue.capability_list or None,
                               "deserved": queue.deserved_list or None, "guarantee": queue.guarantee_list or None,
                               "reclaimable": queue.reclaimable, "parent": queue.parent, "priority": queue.priority},
                      "status": {"state": queue.state}}}
