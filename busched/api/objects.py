"""Cluster objects as they arrive from outside (scenario files, `busched apply`, bus events).

These are the wire/spec shapes (camelCase, Kubernetes-like) decoded by msgspec;
`busched.cache` turns them into the domain types the scheduler works on.
Every field has a default so the schema can grow.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from busched.api import k8s_specs as k
from busched.api import limits
from busched.api.limits import (
    MAX_ITEMS,
    MAX_MEMBERS,
    MAX_PATTERN,
    Annotations,
    CommandText,
    EnvName,
    Int32,
    Labels,
    NonNegInt32,
    Port,
    QuantityText,
    ShortStr,
    Size,
    Strings,
)
from busched.api.shared import SPEC_NO_LIST, SPEC_NO_MAP, known_name, one_name, one_request
from busched.api.timestamp import Timestamp

__all__ = ["NodeSpec", "TaskSpec", "JobSpec", "QueueSpec", "PriorityClassSpec", "HyperNodeSpec",
           "HyperNodeMember", "MemberSelector", "ExactMatch", "RegexMatch",
           "ResourceQuotaSpec", "NodeShardSpec",
           "ClusterSpec", "NodeUsageSpec", "NumaTopologySpec", "PodDisruptionBudgetSpec", "Quantity", "ResourceList",
           "DEFAULT_QUEUE", "BUILTIN_DEFAULT_QUEUE"]

Quantity = QuantityText | int | float
ResourceList = Annotated[dict[ShortStr, Quantity], msgspec.Meta(max_length=MAX_ITEMS)]
Percent = Annotated[str, msgspec.Meta(pattern=r"^[0-9]+%$")]  # "50%"


class _Spec(msgspec.Struct, rename="camel", forbid_unknown_fields=True, omit_defaults=True):
    pass


Percentage = Annotated[float, msgspec.Meta(ge=0, le=100)]
Loads = Annotated[dict[Annotated[str, msgspec.Meta(max_length=16)], Percentage], msgspec.Meta(max_length=16)]


class NodeUsageSpec(_Spec):
    """Volcano's NodeUsage: when it was measured, and cpu and memory load per period ("5m") in percent
    (0..100, at most 16 periods)."""

    time: Timestamp | None = None
    cpu: Loads = {}
    memory: Loads = {}


class NumaResourceSpec(_Spec):
    """Volcano's Numatopology ResourceInfo: the free cpus as a cpuset list ("0-3,8") and how many in all."""

    allocatable: Annotated[str, msgspec.Meta(max_length=limits.MAX_MESSAGE)] = ""
    capacity: NonNegInt32 = 0


class CpuInfoSpec(_Spec, omit_defaults=False):
    """Where one cpu sits (Volcano's CPUInfo): its NUMA node, socket and core (written even when 0)."""

    numa: Annotated[int, msgspec.Meta(ge=0, le=limits.MAX_NUMA_ID)] = 0
    socket: NonNegInt32 = 0
    core: NonNegInt32 = 0


class ContainerAllocationSpec(_Spec):
    """One container's allocations (Volcano's ContainerAllocation): resource -> cpuset or quantity text."""

    name: ShortStr = ""
    allocations: Annotated[dict[ShortStr, Annotated[str, msgspec.Meta(max_length=limits.MAX_MESSAGE)]],
                           msgspec.Meta(max_length=MAX_ITEMS)] = {}


class PodAllocationSpec(_Spec):
    """A task the node's cpu manager has given cpus (Volcano's PodAllocation: uid, or namespace + name)."""

    uid: ShortStr = ""
    name: ShortStr = ""
    namespace: ShortStr = ""
    container_allocations: Annotated[list[ContainerAllocationSpec], msgspec.Meta(max_length=MAX_ITEMS)] = []


class NumaTopologySpec(_Spec):
    """The spec of Volcano's Numatopology (nodeinfo.volcano.sh/v1alpha1) of one node, Volcano's field names:
    policies (CPUManagerPolicy, TopologyManagerPolicy), resReserved, numares, cpuDetail (by cpu id),
    podAllocations.  busched.api.numa converts it."""

    policies: Annotated[dict[Literal["CPUManagerPolicy", "TopologyManagerPolicy"], ShortStr],
                        msgspec.Meta(max_length=2)] = {}
    res_reserved: ResourceList = {}
    numares: Annotated[dict[ShortStr, NumaResourceSpec], msgspec.Meta(max_length=MAX_ITEMS)] = {}
    cpu_detail: Annotated[dict[Annotated[str, msgspec.Meta(pattern=r"^[0-9]{1,5}$")], CpuInfoSpec],
                          msgspec.Meta(max_length=limits.MAX_CPUS)] = {}
    pod_allocations: Annotated[list[PodAllocationSpec], msgspec.Meta(max_length=limits.MAX_CPUS)] = []


class NodeSpec(_Spec):
    name: str
    allocatable: ResourceList = {}
    capacity: ResourceList | None = None
    labels: Labels = {}
    annotations: Annotations = {}
    taints: Annotated[list[k.Taint], msgspec.Meta(max_length=MAX_ITEMS)] = []
    unschedulable: bool = False
    images: Annotated[dict[ShortStr, Size], msgspec.Meta(max_length=MAX_ITEMS)] = {}
    ready: bool = True
    usage: NodeUsageSpec | None = None  # measured load (Volcano's NodeUsage)
    numa_topology: NumaTopologySpec | None = None  # cpu topology (Volcano's Numatopology spec), numa-aware reads it


# (not tracked by the collector: a task spec holds decoded values only, never itself, so it can be
# in no reference cycle; hundreds of thousands of specs are that many objects fewer for every full
# collection, and 16 bytes each fewer).  The specs of a checkpoint's entries (busched.scheduler.checkpoint_shared)
# are shallow copies of their template's: they share its dicts and lists, so nothing may change a spec in place.
class TaskSpec(_Spec, gc=False):
    name: str
    namespace: str = "default"
    job: str = ""
    node: str = ""
    phase: str = "Pending"
    deleting: bool = False
    requests: ResourceList = {}
    limits: ResourceList = {}  # only the QoS class reads them (busched.api.qos)
    priority: Int32 | None = None
    priority_class_name: str = ""
    preemption_policy: str = ""
    labels: Labels = {}
    annotations: Annotations = {}
    node_selector: Labels = {}
    affinity: k.Affinity | None = None
    tolerations: Annotated[list[k.Toleration], msgspec.Meta(max_length=MAX_ITEMS)] = []
    topology_spread_constraints: Annotated[list[k.TopologySpreadConstraint], msgspec.Meta(max_length=MAX_ITEMS)] = []
    host_ports: Annotated[list[Port], msgspec.Meta(max_length=MAX_ITEMS)] = []
    scheduling_gates: Strings = []
    nominated_node_name: str = ""
    images: Strings = []
    created: Timestamp | None = None  # creation time (RFC 3339 or epoch seconds); absent: the epoch
    start_time: Timestamp | None = None  # when the task started running
    status: str = ""  # a Volcano task status name; wins over phase, node and deleting
    # what the task runs (Kubernetes container naming): the scheduler never reads these; an agent's
    # executor does (`busched agent --exec`, busched.agent.executor).  ``command`` is the program and
    # its first arguments (a container's entrypoint), ``args`` follow it; ``image`` only for container
    # executors.
    command: Strings = []
    args: Strings = []
    env: Annotated[dict[EnvName, CommandText], msgspec.Meta(max_length=MAX_ITEMS)] = {}
    working_dir: ShortStr = ""
    image: ShortStr = ""

    def __post_init__(self) -> None:
        # (after decoding or construction: the names many tasks repeat as one string each, the
        # fields a task leaves empty as the containers every spec shares, busched.api.shared;
        # a spec is replaced, never changed in place.  Half a task spec's memory, and less to
        # allocate and collect while a restart decodes hundreds of thousands)
        # (the memo's lookup first, the call only for a name it does not know: four per task decoded)
        v = self.namespace
        self.namespace = known_name(v) or one_name(v)
        v = self.job
        self.job = known_name(v) or one_name(v)
        v = self.node
        self.node = known_name(v) or one_name(v)
        v = self.phase
        self.phase = known_name(v) or one_name(v)
        self.requests = one_request(self.requests) if self.requests else SPEC_NO_MAP
        if not self.limits:
            self.limits = SPEC_NO_MAP
        if not self.labels:
            self.labels = SPEC_NO_MAP
        if not self.annotations:
            self.annotations = SPEC_NO_MAP
        if not self.node_selector:
            self.node_selector = SPEC_NO_MAP
        if not self.tolerations:
            self.tolerations = SPEC_NO_LIST
        if not self.topology_spread_constraints:
            self.topology_spread_constraints = SPEC_NO_LIST
        if not self.host_ports:
            self.host_ports = SPEC_NO_LIST
        if not self.scheduling_gates:
            self.scheduling_gates = SPEC_NO_LIST
        if not self.images:
            self.images = SPEC_NO_LIST
        if not self.command:
            self.command = SPEC_NO_LIST
        if not self.args:
            self.args = SPEC_NO_LIST
        if not self.env:
            self.env = SPEC_NO_MAP


class JobSpec(_Spec):
    name: str
    namespace: str = "default"
    queue: str = "default"
    min_member: NonNegInt32 = 0
    min_task_member: Annotated[dict[ShortStr, NonNegInt32], msgspec.Meta(max_length=MAX_ITEMS)] = {}
    min_resources: ResourceList | None = None
    phase: str = "Pending"
    priority_class_name: str = ""
    annotations: Annotations = {}
    labels: Labels = {}
    network_topology: k.NetworkTopology | None = None
    sub_group_policy: Annotated[list[k.SubGroupPolicy], msgspec.Meta(max_length=MAX_ITEMS)] = []
    conditions: Annotated[list[k.JobCondition], msgspec.Meta(max_length=MAX_ITEMS)] = []
    created: Timestamp | None = None  # creation time (RFC 3339 or epoch seconds); absent: the epoch
    suspend: bool = False  # batch/v1 Job's spec.suspend (`busched job suspend`): no task placed, running ones evicted

    def __post_init__(self) -> None:
        # (as `TaskSpec.__post_init__`: repeated names interned, empty containers shared; the memo's lookup
        # first, the call only for a name it does not know)
        v = self.namespace
        self.namespace = known_name(v) or one_name(v)
        v = self.queue
        self.queue = known_name(v) or one_name(v)
        v = self.phase
        self.phase = known_name(v) or one_name(v)
        if not self.min_task_member:
            self.min_task_member = SPEC_NO_MAP
        if not self.annotations:
            self.annotations = SPEC_NO_MAP
        if not self.labels:
            self.labels = SPEC_NO_MAP
        if not self.sub_group_policy:
            self.sub_group_policy = SPEC_NO_LIST
        if not self.conditions:
            self.conditions = SPEC_NO_LIST


class QueueSpec(_Spec):
    name: str
    weight: NonNegInt32 = 1
    capability: ResourceList | None = None
    deserved: ResourceList | None = None
    guarantee: ResourceList | None = None
    reclaimable: bool = True
    state: str = "Open"
    priority: Int32 = 0
    parent: str = ""
    annotations: Annotations = {}
    affinity: k.QueueAffinity | None = None
    created: Timestamp | None = None  # creation time (RFC 3339 or epoch seconds); absent: the epoch


# The queue a job names when it names none.  Volcano's controller installs it at start (weight 1,
# reclaimable, Open) and its admission refuses deleting it; the live scheduler likewise has it without
# its being applied, until one is applied (which wins) and again once that one is deleted
# (`busched.scheduler.events`).  Shared, never changed in place: `is` tells the built-in one.
DEFAULT_QUEUE = "default"
BUILTIN_DEFAULT_QUEUE = QueueSpec(name=DEFAULT_QUEUE, weight=1, reclaimable=True, state="Open")


class PriorityClassSpec(_Spec):
    name: str
    value: Int32 = 0
    preemption_policy: str = "PreemptLowerPriority"
    global_default: bool = False


class ExactMatch(_Spec):
    name: ShortStr


class RegexMatch(_Spec):
    # RE2 syntax (Go's regexp), searched anywhere in a node's name as Go's MatchString does: anchor
    # with ^ and $ to match the whole name
    pattern: Annotated[str, msgspec.Meta(max_length=MAX_PATTERN)]


class MemberSelector(_Spec):
    """Volcano's MemberSelector: exactly one of the three (`busched.api.members` checks)."""

    exact_match: ExactMatch | None = None
    regex_match: RegexMatch | None = None
    label_match: k.LabelSelector | None = None  # nodes' labels; only for members of type Node


class HyperNodeMember(_Spec):
    """Volcano's MemberSpec: a node or a lower hypernode (a hypernode only by exactMatch)."""

    type: Literal["Node", "HyperNode"]
    selector: MemberSelector


class HyperNodeSpec(_Spec):
    name: str
    tier: NonNegInt32 = 1
    tier_name: str = ""
    # Volcano's members, or a plain name (busched's older shape): a hypernode when one is named so,
    # else a node
    members: Annotated[list[ShortStr | HyperNodeMember], msgspec.Meta(max_length=MAX_MEMBERS)] = []


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


class NodeShardSpec(_Spec):
    """Volcano's NodeShard (shard.volcano.sh): the nodes one scheduler owns, named by ``--shard NAME``.

    A node is in the shard when ``nodesDesired`` names it (Volcano's field) or its labels match
    ``nodeSelector`` (a metav1.LabelSelector, busched's addition so a shard can follow a label rather than a
    list).  Neither given: an empty shard.  What a scheduler does with it (``hard``: only these nodes;
    ``soft``: these first) is its ``--shard-mode``, as Volcano's ``--scheduler-sharding-mode``.
    """

    name: ShortStr
    nodes_desired: Annotated[list[ShortStr], msgspec.Meta(max_length=MAX_MEMBERS)] = []
    node_selector: k.LabelSelector | None = None


class ClusterSpec(_Spec):
    nodes: list[NodeSpec] = []
    tasks: list[TaskSpec] = []
    jobs: list[JobSpec] = []
    queues: list[QueueSpec] = []
    priority_classes: list[PriorityClassSpec] = []
    hyper_nodes: list[HyperNodeSpec] = []
    resource_quotas: list[ResourceQuotaSpec] = []
    pod_disruption_budgets: list[PodDisruptionBudgetSpec] = []
    node_shards: list[NodeShardSpec] = []
