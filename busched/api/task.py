"""Tasks (pods) and their statuses, as Volcano's TaskInfo."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from busched.api.resource import Resource

__all__ = ["TaskStatus", "TaskInfo", "allocated_status", "completed_status", "scheduled_status",
           "preemptable_status", "status_named", "TASK_SPEC_KEY", "PREEMPTABLE_KEY"]

TASK_SPEC_KEY = "volcano.sh/task-spec"
PREEMPTABLE_KEY = "volcano.sh/preemptable"
TASK_PRIORITY_KEY = "volcano.sh/task-priority"
_new = object.__new__


class TaskStatus(enum.IntEnum):
    Pending = 1
    Allocated = 2
    Pipelined = 3
    Binding = 4
    Bound = 5
    Running = 6
    Releasing = 7
    Succeeded = 8
    Failed = 9
    Unknown = 10


_ALLOCATED = frozenset({TaskStatus.Bound, TaskStatus.Binding, TaskStatus.Running, TaskStatus.Allocated})
_COMPLETED = frozenset({TaskStatus.Succeeded, TaskStatus.Failed})
_SCHEDULED = frozenset({TaskStatus.Running, TaskStatus.Bound, TaskStatus.Failed, TaskStatus.Succeeded})
_PREEMPTABLE = frozenset({TaskStatus.Bound, TaskStatus.Running})


def allocated_status(s: TaskStatus) -> bool:
    return s in _ALLOCATED


def completed_status(s: TaskStatus) -> bool:
    return s in _COMPLETED


def scheduled_status(s: TaskStatus) -> bool:
    return s in _SCHEDULED


def preemptable_status(s: TaskStatus) -> bool:
    return s in _PREEMPTABLE


def status_named(name: str) -> TaskStatus | None:
    """The status a Volcano task status name (``Allocated``, ``Pipelined``...) names; None if none."""
    return TaskStatus.__members__.get(name)


def status_from_phase(phase: str, node: str, deleting: bool) -> TaskStatus:
    """Volcano's getTaskStatus: a pod phase (+ node, deletion) to a task status."""
    if phase == "Running":
        return TaskStatus.Releasing if deleting else TaskStatus.Running
    if phase == "Pending":
        if deleting:
            return TaskStatus.Releasing
        return TaskStatus.Bound if node else TaskStatus.Pending
    if phase == "Succeeded":
        return TaskStatus.Succeeded
    if phase == "Failed":
        return TaskStatus.Failed
    return TaskStatus.Unknown


def parse_bool(text: str) -> bool | None:
    """Go's strconv.ParseBool; None when the text is not a boolean."""
    if text in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if text in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    return None


def _meta_bool(annotations: dict[str, str], labels: dict[str, str], key: str) -> bool | None:
    """A boolean read from an annotation, then a label; an unparsable value is False."""
    for src in (annotations, labels):
        if key in src:
            v = parse_bool(src[key])
            return False if v is None else v
    return None


@dataclass(eq=False, slots=True)
class TaskInfo:
    """One task of a job.  ``uid`` is ``namespace-name``; ``key`` is ``namespace/name``.

    Slotted: a cluster holds two of these per placed task (the job's and the node's), and a
    35-field instance dict took 1.6 kB of the 300 bytes slots take; `copy` lists every field.
    """

    uid: str
    name: str
    namespace: str
    job: str  # job uid "namespace/name", "" when the pod has no podgroup
    resreq: Resource
    init_resreq: Resource
    status: TaskStatus = TaskStatus.Pending
    node_name: str = ""
    priority: int = 1
    role: str = ""
    preemptable: bool = False
    best_effort: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    affinity: dict[str, Any] | None = None
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    topology_spread_constraints: list[dict[str, Any]] = field(default_factory=list)
    host_ports: list[int] = field(default_factory=list)
    scheduling_gates: list[str] = field(default_factory=list)
    preemption_policy: str = ""
    priority_class_name: str = ""
    nominated_node_name: str = ""
    images: list[str] = field(default_factory=list)
    created: float = 0.0  # creation time (seconds); ties fall back on uid
    start_time: float = 0.0  # when it started running (epoch seconds; 0: not known)
    qos: str = "BestEffort"  # Kubernetes' QoS class from requests and limits (busched.api.qos)
    eviction_occurred: bool = False
    last_status: TaskStatus | None = None  # status before the last discarded transaction
    last_node: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # what the scheduler adds to the task's annotations with its bind (Volcano's PodAnnotations: the devices
    # deviceshare gave it); replaced, never changed in place (clones share it)
    bind_annotations: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def sch_gated(self) -> bool:
        return bool(self.scheduling_gates)

    def copy(self) -> TaskInfo:
        """Every field, shallow (as the constructor would get them), without the constructor's cost:
        the lent node copies (busched.fastpath.lending) share even the requests.  Written out field
        by field (tests check it names every one): faster than the instance-dict copy it replaced."""
        t = _new(TaskInfo)
        t.uid = self.uid
        t.name = self.name
        t.namespace = self.namespace
        t.job = self.job
        t.resreq = self.resreq
        t.init_resreq = self.init_resreq
        t.status = self.status
        t.node_name = self.node_name
        t.priority = self.priority
        t.role = self.role
        t.preemptable = self.preemptable
        t.best_effort = self.best_effort
        t.labels = self.labels
        t.annotations = self.annotations
        t.node_selector = self.node_selector
        t.affinity = self.affinity
        t.tolerations = self.tolerations
        t.topology_spread_constraints = self.topology_spread_constraints
        t.host_ports = self.host_ports
        t.scheduling_gates = self.scheduling_gates
        t.preemption_policy = self.preemption_policy
        t.priority_class_name = self.priority_class_name
        t.nominated_node_name = self.nominated_node_name
        t.images = self.images
        t.created = self.created
        t.start_time = self.start_time
        t.qos = self.qos
        t.eviction_occurred = self.eviction_occurred
        t.last_status = self.last_status
        t.last_node = self.last_node
        t.extra = self.extra
        t.bind_annotations = self.bind_annotations
        return t

    def clone(self) -> TaskInfo:
        """`copy`, with requests of its own."""
        t = self.copy()
        t.resreq = self.resreq.clone()
        t.init_resreq = self.init_resreq.clone()
        return t

    @staticmethod
    def read_role(annotations: dict[str, str], labels: dict[str, str]) -> str:
        return annotations.get(TASK_SPEC_KEY) or labels.get(TASK_SPEC_KEY) or ""

    @staticmethod
    def read_preemptable(annotations: dict[str, str], labels: dict[str, str]) -> bool:
        """``volcano.sh/preemptable`` (annotation, then label); a pod is preemptable by default."""
        v = _meta_bool(annotations, labels, PREEMPTABLE_KEY)
        return True if v is None else v

    def __repr__(self) -> str:
        return f"Task({self.key} {self.status.name} node={self.node_name!r} req={self.resreq})"


def pod_index(name: str) -> int | None:
    """The index a controller gives a pod at the end of its name (``job-task-3``), if any."""
    parts = name.split("-")
    if len(parts) >= 3:
        try:
            return int(parts[-1])
        except ValueError:
            return None
    return None
