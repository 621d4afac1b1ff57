"""Spec objects (as they arrive) -> domain objects (as the scheduler uses them).

Every conversion error is a `SpecError` naming the object and the field.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from busched.api import k8s, k8s_specs, limits, members, numa, qos, spec_memo, subjob
from busched.api import objects as o
from busched.api.job import JobInfo
from busched.api.node import NodeInfo, NodeUsage
from busched.api.quantity import QuantityError
from busched.api.queue import HyperNode, PriorityClass, QueueInfo
from busched.api.resource import Resource
from busched.api.shared import NO_LIST, NO_MAP, SharedResource, one_name
from busched.api.task import TASK_PRIORITY_KEY, TaskInfo, TaskStatus, status_from_phase, status_named
from busched.api.timestamp import TimeError, Timestamp, parse_time

__all__ = ["SpecError", "validate", "node_info", "task_info", "job_info", "queue_info", "priority_class", "hyper_node",
           "hyper_node_members",
           "resources", "node_shard", "shard_members"]


class SpecError(ValueError):
    """An object that cannot be used; the message names it and the field."""


TASK_PHASES = {"Pending", "Running", "Succeeded", "Failed", "Unknown"}
JOB_PHASES = {"Pending", "Inqueue", "Running", "Unknown", "Completed", ""}
QUEUE_STATES = {"Open", "Closed", "Closing", "Unknown"}


def validate(kind: str, spec: Any) -> None:
    """Everything the scheduler checks of an object before it takes it in, beyond the shape and
    the bounds its types check while it decodes (`busched.api.limits`): quantities, phases, the
    annotations' size, ...  Raises `SpecError` naming the object and the field.  The scheduler's
    cache runs the same conversions on every object it is given (`Cache.upsert`); `busched apply`
    runs this on every object of a file before it publishes any."""
    if kind == "node":
        node_info(spec)
    elif kind == "task":
        task_info(spec, {})
        _check_command(spec)
    elif kind == "job":
        job_info(spec, {})
    elif kind == "queue":
        queue_info(spec)
    elif kind == "priorityClass":
        priority_class(spec)
    elif kind == "hyperNode":
        hyper_node(spec)
    elif kind == "resourceQuota":
        resources(spec.hard, f"resourceQuota {spec.namespace}/{spec.name}: hard")
    elif kind == "nodeShard":
        node_shard(spec)
    else:
        raise SpecError(f"unknown object kind {kind!r}")


def _check_annotations(annotations: dict[str, str], where: str) -> None:
    """Kubernetes' bound on an object's annotations: 256 KiB of keys and values in all."""
    size = sum(map(len, annotations)) + sum(map(len, annotations.values()))
    if size > limits.MAX_ANNOTATIONS_BYTES:
        raise SpecError(f"{where}: annotations: {size} characters in all, more than the limit of "
                        f"{limits.MAX_ANNOTATIONS_BYTES}")


def _check_command(s: o.TaskSpec) -> None:
    """What a task runs: ``args`` need a ``command`` unless an ``image`` gives the entrypoint, a
    ``workingDir`` is an absolute path, no string carries a NUL (no process could be given it).  Only
    the agent's executor reads these; checked here so `busched apply` refuses them, not the node."""
    where = f"task {s.namespace}/{s.name}"
    if s.args and not s.command and not s.image:
        raise SpecError(f"{where}: args: given without a command (and no image whose entrypoint takes them)")
    if s.working_dir and not s.working_dir.startswith("/"):
        raise SpecError(f"{where}: workingDir: must be an absolute path (got {s.working_dir!r})")
    for field, values in (("command", s.command), ("args", s.args), ("env", [*s.env, *s.env.values()]),
                          ("workingDir", [s.working_dir]), ("image", [s.image])):
        if any("\0" in v for v in values):
            raise SpecError(f"{where}: {field}: must not contain a NUL character")


def resources(rl: dict[str, Any] | None, where: str) -> Resource:
    key: tuple[Any, ...] | None = None
    if rl:
        try:
            key = spec_memo._memo_key(rl)
            hit = spec_memo._PARSED.get(key)
        except TypeError:  # an unhashable value: parse it (and report it) as it is
            key = hit = None
        if hit is not None:
            return hit.clone()
    try:
        r = Resource.from_list(rl, field=where)
    except QuantityError as e:
        raise SpecError(str(e)) from None
    if key is not None:
        spec_memo._remember(spec_memo._PARSED, key, r.clone())
    return r


def time_of(v: Timestamp | None, where: str) -> float:
    """A spec's time (RFC 3339 or epoch seconds; absent: the epoch) in epoch seconds."""
    if v is None:  # (most objects: nothing to parse)
        return 0.0
    try:
        return parse_time(v, where)
    except TimeError as e:
        raise SpecError(str(e)) from None


def node_usage(u: o.NodeUsageSpec | None, where: str) -> NodeUsage | None:
    if u is None:
        return None
    return NodeUsage(time_of(u.time, f"{where}: usage.time"), dict(u.cpu), dict(u.memory))


def node_info(s: o.NodeSpec, index: int = 0) -> NodeInfo:
    if len(s.name) > limits.MAX_NODE_NAME:
        raise SpecError(f"node {s.name[:limits.MAX_NODE_NAME - 3]}...: name: {len(s.name)} characters, more than "
                        f"{limits.MAX_NODE_NAME} (a DNS subdomain)")
    where = f"node {s.name}"
    if s.annotations:
        _check_annotations(s.annotations, where)
    alloc = resources(s.allocatable, f"{where}: allocatable")
    cap = resources(s.capacity, f"{where}: capacity") if s.capacity is not None else alloc.clone()
    return NodeInfo.new(s.name, alloc, cap, labels=dict(s.labels), annotations=dict(s.annotations),
                        taints=_plain_list(s.taints), unschedulable=s.unschedulable, images=dict(s.images),
                        ready=s.ready, usage=node_usage(s.usage, where), numa=numa_topology(s, where), index=index)


def numa_topology(s: o.NodeSpec, where: str) -> numa.NumaTopology | None:
    if s.numa_topology is None:
        return None
    try:
        return numa.from_spec(s.numa_topology, where)
    except numa.NumaError as e:
        raise SpecError(str(e)) from None


def _task_requests(s: o.TaskSpec) -> tuple[SharedResource, bool]:
    rl = s.requests
    key: tuple[Any, ...] | None
    try:
        key = spec_memo._memo_key(rl) if rl else ()
        hit = spec_memo._REQUESTS.get(key)
    except TypeError:  # an unhashable value: parse it (and report it) as it is
        key = hit = None
    if hit is not None:
        return hit
    req = resources(rl, f"task {s.namespace}/{s.name}: requests")
    best_effort = req.is_empty()
    req.add_scalar("pods", 1.0)  # every pod takes one pod slot (Volcano's GetPodResourceRequest)
    shared = SharedResource.of(req)
    if key is not None:
        spec_memo._remember(spec_memo._REQUESTS, key, (shared, best_effort))
    return shared, best_effort


_new = object.__new__
_plain, _plain_list, _to_builtins = k8s_specs.plain, k8s_specs.plain_list, msgspec.to_builtins


def _task_qos(s: o.TaskSpec, req: Resource, best_effort: bool) -> str:
    """The QoS class; a task without limits is BestEffort or Burstable (nothing to parse for most)."""
    if not s.limits:
        return qos.BEST_EFFORT if best_effort else qos.BURSTABLE
    return qos.pod_qos(req, resources(s.limits, f"task {s.namespace}/{s.name}: limits"))


def task_info(s: o.TaskSpec, priority_classes: dict[str, PriorityClass], default_priority: int = 1) -> TaskInfo:
    if s.phase not in TASK_PHASES:
        raise SpecError(f"task {s.namespace}/{s.name}: phase: unknown phase {s.phase!r} "
                        f"(one of {', '.join(sorted(TASK_PHASES))})")
    req, best_effort = _task_requests(s)
    pc = priority_classes.get(s.priority_class_name) if s.priority_class_name else None
    if s.priority is not None:
        prio = s.priority
    elif pc is not None:
        prio = pc.value
    else:
        prio = default_priority
    annotations, labels = s.annotations, s.labels
    if annotations or labels:
        if annotations:
            _check_annotations(annotations, f"task {s.namespace}/{s.name}")
            if annotations.get(numa.NUMA_POLICY_KEY, "none") not in numa.TOPOLOGY_POLICIES:
                raise SpecError(f"task {s.namespace}/{s.name}: annotations.{numa.NUMA_POLICY_KEY}: "
                                f"one of {', '.join(numa.TOPOLOGY_POLICIES)} (Volcano's topologyPolicy)")
        if TASK_PRIORITY_KEY in annotations:
            try:
                prio = int(annotations[TASK_PRIORITY_KEY])
            except ValueError:
                pass
            else:
                if not limits.INT32_MIN <= prio <= limits.INT32_MAX:
                    raise SpecError(f"task {s.namespace}/{s.name}: annotations.{TASK_PRIORITY_KEY}: "
                                    f"must be a 32-bit integer (got {annotations[TASK_PRIORITY_KEY]!r})")
        role = TaskInfo.read_role(annotations, labels)
        preemptable = TaskInfo.read_preemptable(annotations, labels)
    else:
        role, preemptable = "", True  # (what the two readers give for no metadata)
    if s.status:  # a status the spec gives wins over what phase, node and deleting imply
        status = status_named(s.status)
        if status is None:
            raise SpecError(f"task {s.namespace}/{s.name}: status: unknown task status {s.status!r} "
                            f"(one of {', '.join(TaskStatus.__members__)})")
    else:
        status = status_from_phase(s.phase, s.node, s.deleting)
    # TaskInfo(...) field by field, in its field order: the dataclass's constructor, with its
    # keyword parsing and default factories, was most of a task's conversion (one per task at
    # catch-up); tests check both give the same object
    t = _new(TaskInfo)
    t.uid = f"{s.namespace}-{s.name}"
    t.name = s.name
    t.namespace = s.namespace
    t.job = one_name(f"{s.namespace}/{s.job}") if s.job else ""  # (one string for a job's tasks)
    t.resreq = req  # (both the one object every task with these requests holds: busched.api.shared)
    t.init_resreq = req
    t.status = status
    t.node_name = s.node if status != TaskStatus.Pending else ""
    t.priority = prio
    t.role = role
    t.preemptable = preemptable
    t.best_effort = best_effort
    # (each its own copy; an empty one the shared empty, as most are)
    t.labels = dict(labels) if labels else NO_MAP
    t.annotations = dict(annotations) if annotations else NO_MAP
    t.node_selector = dict(s.node_selector) if s.node_selector else NO_MAP
    # (the typed shapes as the dicts the domain reads; nothing to do for most tasks.  A spec built in
    # code rather than decoded may carry the dict form already: msgspec checks types only on decoding)
    aff: k8s_specs.Affinity | dict[str, Any] | None = s.affinity
    t.affinity = aff if aff is None or type(aff) is dict else _to_builtins(aff)
    t.tolerations = _plain_list(s.tolerations) if s.tolerations else NO_LIST
    tsc = s.topology_spread_constraints
    t.topology_spread_constraints = _plain_list(tsc) if tsc else NO_LIST
    t.host_ports = list(s.host_ports) if s.host_ports else NO_LIST
    t.scheduling_gates = list(s.scheduling_gates) if s.scheduling_gates else NO_LIST
    t.preemption_policy = s.preemption_policy or (pc.preemption_policy if pc else "")
    t.priority_class_name = s.priority_class_name
    t.nominated_node_name = s.nominated_node_name
    t.images = list(s.images) if s.images else NO_LIST
    # (`time_of`, its message built only when there is a time to parse: most tasks have no start time)
    v = s.created
    t.created = time_of(v, f"task {s.namespace}/{s.name}: created") if v is not None else 0.0
    v = s.start_time
    t.start_time = time_of(v, f"task {s.namespace}/{s.name}: startTime") if v is not None else 0.0
    t.qos = _task_qos(s, req, best_effort)
    t.eviction_occurred = False
    t.last_status = None
    t.last_node = ""
    t.extra = NO_MAP
    t.bind_annotations = NO_MAP
    return t


def empty_state(j: JobInfo) -> None:
    """A new job's own state (no tasks yet, nothing allocated, no errors), as `JobInfo`'s defaults give it:
    the conversions fill a bare object (`JobInfo.__new__`) and `build_like` copies."""
    j.tasks = {}
    j.status_index = {}
    j.allocated = Resource()
    j.total_request = Resource()
    j.nodes_fit_errors = {}
    j.job_fit_errors = ""
    j.pending_best_effort = 0
    j.sub_jobs = {}
    j.task_to_sub_job = {}
    j.min_sub_jobs = {}
    j.allocated_hypernode = ""
    j.written = False
    j.derived = {}


def job_info(s: o.JobSpec, priority_classes: dict[str, PriorityClass], default_priority: int = 0) -> JobInfo:
    if s.phase not in JOB_PHASES:
        raise SpecError(f"job {s.namespace}/{s.name}: phase: unknown phase {s.phase!r}")
    if s.min_member < 0:
        raise SpecError(f"job {s.namespace}/{s.name}: minMember: must not be negative")
    pc = priority_classes.get(s.priority_class_name)
    annotations, labels = s.annotations, s.labels
    if annotations:
        _check_annotations(annotations, f"job {s.namespace}/{s.name}")
    min_resources = s.min_resources
    # JobInfo(...) field by field, in its field order, as `task_info` does (tests check both give
    # the same object)
    j = _new(JobInfo)
    j.uid = f"{s.namespace}/{s.name}"
    j.name = s.name
    j.namespace = s.namespace
    j.queue = s.queue
    j.min_available = s.min_member
    # (a field the spec leaves empty holds the shared empty, as a task's do: busched.api.shared)
    j.task_min_available = dict(s.min_task_member) if s.min_task_member else NO_MAP
    if min_resources is not None:
        j.min_resources = resources(min_resources, f"job {s.namespace}/{s.name}: minResources")
        j.min_resources_list = dict(min_resources)
    else:
        j.min_resources = j.min_resources_list = None
    j.phase = s.phase
    j.priority_class_name = s.priority_class_name
    j.priority = pc.value if pc is not None else default_priority
    j.preemptable = JobInfo.read_preemptable(annotations, labels) if annotations or labels else False
    j.annotations = dict(annotations) if annotations else NO_MAP
    j.labels = dict(labels) if labels else NO_MAP
    j.network_topology = _plain(s.network_topology)
    j.subgroup_policy = _plain_list(s.sub_group_policy) if s.sub_group_policy else NO_LIST
    j.conditions = [dict(c) for c in _plain_list(s.conditions)] if s.conditions else NO_LIST
    j.has_podgroup = True
    v = s.created
    j.created = time_of(v, f"job {s.namespace}/{s.name}: created") if v is not None else 0.0
    empty_state(j)
    if s.network_topology is not None or s.sub_group_policy:
        subjob.init_job(j)  # (JobInfo.__post_init__: nothing to do without either)
    return j


def queue_info(s: o.QueueSpec) -> QueueInfo:
    where = f"queue {s.name}"
    if s.annotations:
        _check_annotations(s.annotations, where)
    if s.state not in QUEUE_STATES:
        raise SpecError(f"{where}: state: unknown state {s.state!r}")
    if s.weight < 0:
        raise SpecError(f"{where}: weight: must not be negative")

    def res(rl: dict[str, Any] | None, f: str) -> Resource | None:
        return resources(rl, f"{where}: {f}") if rl is not None else None

    return QueueInfo(uid=s.name, name=s.name, weight=s.weight, capability=res(s.capability, "capability"),
                     deserved=res(s.deserved, "deserved"), guarantee=res(s.guarantee, "guarantee"),
                     reclaimable=s.reclaimable, state=s.state, priority=s.priority, parent=s.parent,
                     annotations=dict(s.annotations), affinity=_plain(s.affinity),
                     capability_list=dict(s.capability or {}), deserved_list=dict(s.deserved or {}),
                     guarantee_list=dict(s.guarantee or {}),
                     created=time_of(s.created, f"{where}: created"))


def priority_class(s: o.PriorityClassSpec) -> PriorityClass:
    if s.preemption_policy not in ("PreemptLowerPriority", "Never"):
        raise SpecError(f"priorityClass {s.name}: preemptionPolicy: unknown policy {s.preemption_policy!r}")
    return PriorityClass(s.name, s.value, s.preemption_policy, s.global_default)


def hyper_node(s: o.HyperNodeSpec, nodes: Iterable[o.NodeSpec] = ()) -> HyperNode:
    """The hypernode with its members checked and resolved against ``nodes`` (`busched.api.members`)."""
    return members.resolve(s, hyper_node_members(s), nodes)


def hyper_node_members(s: o.HyperNodeSpec) -> members.Members:
    """The hypernode's members checked and compiled; raises `SpecError` naming the member."""
    if s.tier < 0:
        raise SpecError(f"hyperNode {s.name}: tier: must not be negative")
    try:
        return members.compile_members(s)
    except members.MemberError as e:
        raise SpecError(str(e)) from None


def node_shard(s: o.NodeShardSpec) -> Any:
    """A node shard's parsed selector (`busched.api.k8s.parse_label_selector`; None: it has none).  Raises
    `SpecError` for a selector Kubernetes refuses (an unknown operator's values, a missing value)."""
    if not s.name:
        raise SpecError("nodeShard: name: empty")
    if len(s.name) > limits.MAX_SHARD_NAME:  # (its scheduler's records carry it: `busched.bus.wire.ShardName`)
        raise SpecError(f"nodeShard {s.name[:limits.MAX_SHARD_NAME - 3]}...: name: {len(s.name)} characters, more "
                        f"than {limits.MAX_SHARD_NAME}")
    if s.node_selector is None:
        return None
    sel = msgspec.to_builtins(s.node_selector)
    if not k8s.label_selector_valid(sel):
        raise SpecError(f"nodeShard {s.name}: nodeSelector: an expression Kubernetes refuses "
                        "(In/NotIn need values, Exists/DoesNotExist take none)")
    return k8s.parse_label_selector(sel)


_UNPARSED: Any = object()


def shard_members(s: o.NodeShardSpec, nodes: Iterable[o.NodeSpec], sel: Any = _UNPARSED) -> frozenset[str]:
    """The names of ``nodes`` in the shard: named by ``nodesDesired`` or matched by ``nodeSelector``.  A name
    of ``nodesDesired`` with no node yet is kept (the node may register later).  ``sel``: the selector as
    `node_shard` parsed it, when the caller kept it (parsed here when not given)."""
    if sel is _UNPARSED:
        sel = node_shard(s)
    out = set(s.nodes_desired)
    if sel is not None:
        out.update(n.name for n in nodes if k8s.selector_matches(sel, n.labels))
    return frozenset(out)
