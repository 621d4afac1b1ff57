"""Spec objects (as they arrive) -> domain objects (as the scheduler uses them).

Every conversion error is a `SpecError` naming the object and the field.
"""

from __future__ import annotations

from busched.api import objects as o
from busched.api.job import JobInfo
from busched.api.node import NodeInfo
from busched.api.quantity import QuantityError
from busched.api.queue import HyperNode, PriorityClass, QueueInfo
from busched.api.resource import Resource
from busched.api.task import TaskInfo, TaskStatus, TASK_PRIORITY_KEY, status_from_phase

__all__ = ["SpecError", "node_info", "task_info", "job_info", "queue_info", "priority_class", "hyper_node",
           "resources"]


class SpecError(ValueError):
    """An object that cannot be used; the message names it and the field."""


TASK_PHASES = {"Pending", "Running", "Succeeded", "Failed", "Unknown"}
JOB_PHASES = {"Pending", "Inqueue", "Running", "Unknown", "Completed", ""}
QUEUE_STATES = {"Open", "Closed", "Closing", "Unknown"}


# Parsed resource lists by their items: a big cluster has a few request shapes for many tasks, and a
# catch-up or a cold snapshot converts every one of them (parsing quantities is most of a task's
# conversion).  Each caller gets its own copy; bounded, it starts over when full.
_PARSED: dict[tuple, Resource] = {}
_PARSED_MAX = 4096


def resources(rl: dict | None, where: str) -> Resource:
    if rl:
        try:
            key = (tuple(rl.items()), tuple(map(type, rl.values())))  # 1 and 1.0 and True are equal keys
            hit = _PARSED.get(key)
        except TypeError:  # an unhashable value: parse it (and report it) as it is
            key = hit = None
        if hit is not None:
            return hit.clone()
    try:
        r = Resource.from_list(rl, field=where)
    except QuantityError as e:
        raise SpecError(str(e)) from None
    if rl and key is not None:
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[key] = r.clone()
    return r


def node_info(s: o.NodeSpec, index: int = 0) -> NodeInfo:
    where = f"node {s.name}"
    alloc = resources(s.allocatable, f"{where}: allocatable")
    cap = resources(s.capacity, f"{where}: capacity") if s.capacity is not None else alloc.clone()
    return NodeInfo.new(s.name, alloc, cap, labels=dict(s.labels), annotations=dict(s.annotations),
                        taints=[dict(t) for t in s.taints], unschedulable=s.unschedulable, images=dict(s.images),
                        ready=s.ready, index=index)


def task_info(s: o.TaskSpec, priority_classes: dict[str, PriorityClass], default_priority: int = 1) -> TaskInfo:
    where = f"task {s.namespace}/{s.name}"
    if s.phase not in TASK_PHASES:
        raise SpecError(f"{where}: phase: unknown phase {s.phase!r} (one of {', '.join(sorted(TASK_PHASES))})")
    req = resources(s.requests, f"{where}: requests")
    best_effort = req.is_empty()
    req.add_scalar("pods", 1.0)  # every pod takes one pod slot (Volcano's GetPodResourceRequest)
    pc = priority_classes.get(s.priority_class_name) if s.priority_class_name else None
    if s.priority is not None:
        prio = s.priority
    elif pc is not None:
        prio = pc.value
    else:
        prio = default_priority
    if TASK_PRIORITY_KEY in s.annotations:
        try:
            prio = int(s.annotations[TASK_PRIORITY_KEY])
        except ValueError:
            pass
    policy = s.preemption_policy or (pc.preemption_policy if pc else "")
    status = status_from_phase(s.phase, s.node, s.deleting)
    return TaskInfo(
        uid=f"{s.namespace}-{s.name}", name=s.name, namespace=s.namespace,
        job=f"{s.namespace}/{s.job}" if s.job else "",
        resreq=req, init_resreq=req.clone(), status=status, node_name=s.node if status != TaskStatus.Pending else "",
        priority=prio, role=TaskInfo.read_role(s.annotations, s.labels),
        preemptable=TaskInfo.read_preemptable(s.annotations, s.labels), best_effort=best_effort,
        labels=dict(s.labels), annotations=dict(s.annotations), node_selector=dict(s.node_selector),
        affinity=s.affinity, tolerations=list(s.tolerations),
        topology_spread_constraints=list(s.topology_spread_constraints), host_ports=list(s.host_ports),
        scheduling_gates=list(s.scheduling_gates), preemption_policy=policy,
        priority_class_name=s.priority_class_name, nominated_node_name=s.nominated_node_name,
        images=list(s.images))


def job_info(s: o.JobSpec, priority_classes: dict[str, PriorityClass], default_priority: int = 0) -> JobInfo:
    where = f"job {s.namespace}/{s.name}"
    if s.phase not in JOB_PHASES:
        raise SpecError(f"{where}: phase: unknown phase {s.phase!r}")
    if s.min_member < 0:
        raise SpecError(f"{where}: minMember: must not be negative")
    pc = priority_classes.get(s.priority_class_name)
    return JobInfo(
        uid=f"{s.namespace}/{s.name}", name=s.name, namespace=s.namespace, queue=s.queue,
        min_available=s.min_member, task_min_available=dict(s.min_task_member),
        min_resources=resources(s.min_resources, f"{where}: minResources") if s.min_resources is not None else None,
        min_resources_list=dict(s.min_resources) if s.min_resources is not None else None,
        phase=s.phase, priority_class_name=s.priority_class_name,
        priority=pc.value if pc is not None else default_priority,
        preemptable=JobInfo.read_preemptable(s.annotations, s.labels), annotations=dict(s.annotations),
        labels=dict(s.labels), network_topology=s.network_topology, subgroup_policy=list(s.sub_group_policy),
        conditions=[dict(c) for c in s.conditions])


def queue_info(s: o.QueueSpec) -> QueueInfo:
    where = f"queue {s.name}"
    if s.state not in QUEUE_STATES:
        raise SpecError(f"{where}: state: unknown state {s.state!r}")
    if s.weight < 0:
        raise SpecError(f"{where}: weight: must not be negative")

    def res(rl: dict | None, f: str) -> Resource | None:
        return resources(rl, f"{where}: {f}") if rl is not None else None

    return QueueInfo(uid=s.name, name=s.name, weight=s.weight, capability=res(s.capability, "capability"),
                     deserved=res(s.deserved, "deserved"), guarantee=res(s.guarantee, "guarantee"),
                     reclaimable=s.reclaimable, state=s.state, priority=s.priority, parent=s.parent,
                     annotations=dict(s.annotations), affinity=s.affinity,
                     capability_list=dict(s.capability or {}), deserved_list=dict(s.deserved or {}),
                     guarantee_list=dict(s.guarantee or {}))


def priority_class(s: o.PriorityClassSpec) -> PriorityClass:
    if s.preemption_policy not in ("PreemptLowerPriority", "Never"):
        raise SpecError(f"priorityClass {s.name}: preemptionPolicy: unknown policy {s.preemption_policy!r}")
    return PriorityClass(s.name, s.value, s.preemption_policy, s.global_default)


def hyper_node(s: o.HyperNodeSpec) -> HyperNode:
    if s.tier < 0:
        raise SpecError(f"hyperNode {s.name}: tier: must not be negative")
    return HyperNode(s.name, s.tier, s.tier_name, list(s.members))
