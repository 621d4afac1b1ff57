"""Cluster objects as they arrive from outside (scenario files, `busched apply`, bus events).

These are the wire/spec shapes (camelCase, Kubernetes-like) decoded by msgspec;
`busched.cache` turns them into the domain types the scheduler works on.
Every field has a default so the schema can grow.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from busched.api.timestamp import Timestamp

__all__ = ["NodeSpec", "TaskSpec", "JobSpec", "QueueSpec", "PriorityClassSpec", "HyperNodeSpec",
           "ResourceQuotaSpec", "ClusterSpec", "NodeUsageSpec", "PodDisruptionBudgetSpec", "Quantity", "ResourceList"]

Quantity = str | int | float
ResourceList = dict[str, Quantity]
Percent = Annotated[str, msgspec.Meta(pattern=r"^[0-9]+%$")]  # "50%"


class _Spec(msgspec.Struct, rename="camel", forbid_unknown_fields=True, omit_defaults=True):
    pass


class NodeUsageSpec(_Spec):
    """Volcano's NodeUsage: when it was measured, and cpu and memory load per period ("5m") in percent."""

    time: Timestamp | None = None
    cpu: dict[str, float] = {}
    memory: dict[str, float] = {}


class NodeSpec(_Spec):
    name: str
    allocatable: ResourceList = {}
    capacity: ResourceList | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    taints: list[dict[str, Any]] = []
    unschedulable: bool = False
    images: dict[str, int] = {}
    ready: bool = True
    usage: NodeUsageSpec | None = None  # measured load (Volcano's NodeUsage)


class TaskSpec(_Spec):
    name: str
    namespace: str = "default"
    job: str = ""
    node: str = ""
    phase: str = "Pending"
    deleting: bool = False
    requests: ResourceList = {}
    priority: int | None = None
    priority_class_name: str = ""
    preemption_policy: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    node_selector: dict[str, str] = {}
    affinity: dict[str, Any] | None = None
    tolerations: list[dict[str, Any]] = []
    topology_spread_constraints: list[dict[str, Any]] = []
    host_ports: list[int] = []
    scheduling_gates: list[str] = []
    nominated_node_name: str = ""
    images: list[str] = []
    created: Timestamp | None = None  # creation time (RFC 3339 or epoch seconds); absent: the epoch
    start_time: Timestamp | None = None  # when the task started running
    status: str = ""  # a Volcano task status name; wins over phase, node and deleting


class JobSpec(_Spec):
    name: str
    namespace: str = "default"
    queue: str = "default"
    min_member: int = 0
    min_task_member: dict[str, int] = {}
    min_resources: ResourceList | None = None
    phase: str = "Pending"
    priority_class_name: str = ""
    annotations: dict[str, str] = {}
    labels: dict[str, str] = {}
    network_topology: dict[str, Any] | None = None
    sub_group_policy: list[dict[str, Any]] = []
    conditions: list[dict[str, Any]] = []
    created: Timestamp | None = None  # creation time (RFC 3339 or epoch seconds); absent: the epoch


class QueueSpec(_Spec):
    name: str
    weight: int = 1
    capability: ResourceList | None = None
    deserved: ResourceList | None = None
    guarantee: ResourceList | None = None
    reclaimable: bool = True
    state: str = "Open"
    priority: int = 0
    parent: str = ""
    annotations: dict[str, str] = {}
    affinity: dict[str, Any] | None = None
    created: Timestamp | None = None  # creation time (RFC 3339 or epoch seconds); absent: the epoch


class PriorityClassSpec(_Spec):
    name: str
    value: int = 0
    preemption_policy: str = "PreemptLowerPriority"
    global_default: bool = False


class HyperNodeSpec(_Spec):
    name: str
    tier: int = 1
    tier_name: str = ""
    members: list[str] = []


class ResourceQuotaSpec(_Spec):
    name: str
    namespace: str = "default"
    hard: ResourceList = {}
    used: ResourceList = {}


class PodDisruptionBudgetSpec(_Spec):
    """A PodDisruptionBudget (policy/v1): its spec, and the status fields a test may set directly."""

    name: str
    namespace: str = "default"
    selector: dict[str, Any] | None = None  # a metav1.LabelSelector (validated by busched.api.k8s)
    min_available: int | Percent | None = None  # at most one of the two; neither: minAvailable 1
    max_unavailable: int | Percent | None = None
    disruptions_allowed: int | None = None  # status: given, it wins over what the plugin computes
    disrupted_pods: list[str] | dict[str, Timestamp] = []  # status: pod name (-> when)


class ClusterSpec(_Spec):
    nodes: list[NodeSpec] = []
    tasks: list[TaskSpec] = []
    jobs: list[JobSpec] = []
    queues: list[QueueSpec] = []
    priority_classes: list[PriorityClassSpec] = []
    hyper_nodes: list[HyperNodeSpec] = []
    resource_quotas: list[ResourceQuotaSpec] = []
    pod_disruption_budgets: list[PodDisruptionBudgetSpec] = []
