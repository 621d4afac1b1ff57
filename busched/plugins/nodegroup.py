"""nodegroup: queues are tied to groups of nodes (label ``volcano.sh/nodegroup-name``).

A queue's ``affinity`` names node groups:

    affinity:
      nodeGroupAffinity:
        requiredDuringSchedulingIgnoredDuringExecution: [g1]
        preferredDuringSchedulingIgnoredDuringExecution: [g2]
      nodeGroupAntiAffinity:
        requiredDuringSchedulingIgnoredDuringExecution: [g3]
        preferredDuringSchedulingIgnoredDuringExecution: [g4]

Predicate: a node in a group fits when the group is required or preferred,
unless it is required-anti; a preferred-anti group always fits (it is only
scored down).  A node in no group fits only in non-strict mode and only for a
queue with no affinity at all; a grouped node never fits a queue without
affinity.  A queue annotation ``volcano.sh/nodegroup-resource-limits``
(``{"group": {"cpu": "4"}}``) caps what the queue's tasks may use in each group,
on the named dimensions only; an annotation that does not parse rejects every
node for that queue's tasks.  All failures are UnschedulableAndUnresolvable.

Node order: +100 for a required group, +50 for a preferred one (with
``enablePreferredOrder``, 50 * (n - i) / n for the i-th of n preferred groups),
and exactly -1 for a preferred-anti group.

With the ``enableHierarchy`` switch, a queue without affinity inherits its
nearest ancestor's (the parent is ``root`` when unset).
Arguments: ``strict`` (default true), ``enablePreferredOrder`` (default false).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from busched.api.fit import Code
from busched.api.node import NodeInfo
from busched.api.quantity import QuantityError
from busched.api.queue import QueueInfo
from busched.api.resource import CPU, MEMORY, MIN_RESOURCE, Resource
from busched.api.task import TaskInfo, allocated_status
from busched.framework import points
from busched.framework.arguments import Arguments
from busched.framework.decision import fit_error
from busched.framework.session import EventHandler, Session

__all__ = ["NodeGroupPlugin", "NODE_GROUP_NAME_KEY", "NODE_GROUP_RESOURCE_LIMITS_KEY"]

NODE_GROUP_NAME_KEY = "volcano.sh/nodegroup-name"
NODE_GROUP_RESOURCE_LIMITS_KEY = "volcano.sh/nodegroup-resource-limits"
ROOT_QUEUE = "root"
BASE_SCORE = 100.0

ERR_AFFINITY_NOT_FOUND = "node group affinity not specified"
ERR_LABEL_NOT_FOUND = "node group label not found"
ERR_UNSATISFIED = "node does not satisfy the node group affinity"
ERR_LIMIT_INVALID = "node group resource limit annotation invalid"
ERR_LIMIT_EXCEEDED = "node group resource limit exceeded"


@dataclass
class GroupAffinity:
    required: set[str] = field(default_factory=set)
    preferred: set[str] = field(default_factory=set)
    anti_required: set[str] = field(default_factory=set)
    anti_preferred: set[str] = field(default_factory=set)
    preferred_index: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_queue(cls, affinity: Mapping[str, Any] | None) -> GroupAffinity | None:
        if affinity is None:
            return None
        out = cls()
        aff = affinity.get("nodeGroupAffinity")
        if aff is not None:
            preferred = list(aff.get("preferredDuringSchedulingIgnoredDuringExecution") or [])
            out.preferred.update(preferred)
            out.required.update(aff.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
            for i, g in enumerate(preferred):
                out.preferred_index[g] = i  # a repeated group keeps its last position
        anti = affinity.get("nodeGroupAntiAffinity")
        if anti is not None:
            out.anti_preferred.update(anti.get("preferredDuringSchedulingIgnoredDuringExecution") or [])
            out.anti_required.update(anti.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
        return out

    def is_unset(self) -> bool:
        return not (self.required or self.preferred or self.anti_required or self.anti_preferred)

    def admits(self, group: str) -> bool:
        ok = group in self.required or group in self.preferred
        if group in self.anti_required:
            ok = False
        if group in self.anti_preferred:
            ok = True
        return ok

    def score(self, group: str, preferred_order: bool) -> float:
        s = 0.0
        if group in self.required:
            s += BASE_SCORE
        if preferred_order:
            i = self.preferred_index.get(group)
            if i is not None:
                n = len(self.preferred_index)
                s += 0.5 * BASE_SCORE * (n - i) / n
        elif group in self.preferred:
            s += 0.5 * BASE_SCORE
        if group in self.anti_preferred:
            s = -1.0
        return s


@dataclass
class GroupLimit:
    resource: Resource
    names: frozenset[str]

    def exceeded(self, used: Resource) -> list[str]:
        """Dimensions named in the limit where ``used`` is above it by at least `MIN_RESOURCE`."""
        out = []
        for name in sorted(self.names, key=lambda n: (n not in (CPU, MEMORY), n != CPU, n)):
            u, lim = used.get(name), self.resource.get(name)
            if u > lim and u - lim >= MIN_RESOURCE:
                out.append(name)
        return out


class LimitAnnotationError(ValueError):
    pass


def parse_limits(annotations: Mapping[str, str]) -> dict[str, GroupLimit]:
    """The queue's per-group resource limits; raises `LimitAnnotationError` on a bad annotation."""
    raw = annotations.get(NODE_GROUP_RESOURCE_LIMITS_KEY, "")
    if not raw:
        return {}
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise LimitAnnotationError(f"parse annotation {NODE_GROUP_RESOURCE_LIMITS_KEY}: {e}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise LimitAnnotationError(f"annotation {NODE_GROUP_RESOURCE_LIMITS_KEY}: expected an object")
    out: dict[str, GroupLimit] = {}
    for group, rl in doc.items():
        if rl is None:
            rl = {}
        if not isinstance(rl, dict):
            raise LimitAnnotationError(f"annotation {NODE_GROUP_RESOURCE_LIMITS_KEY}: {group}: expected an object")
        rl = {name: (0 if q is None else q) for name, q in rl.items()}  # JSON null is a zero quantity
        for name, q in rl.items():
            if isinstance(q, (bool, dict, list)):
                raise LimitAnnotationError(f"annotation {NODE_GROUP_RESOURCE_LIMITS_KEY}: {group}.{name}: bad quantity")
        try:
            res = Resource.from_list(rl, field=f"{group}")
        except QuantityError as e:
            raise LimitAnnotationError(f"annotation {NODE_GROUP_RESOURCE_LIMITS_KEY}: {e}") from None
        out[group] = GroupLimit(res, frozenset(rl))
    return out


@dataclass(eq=False)
class QueueAttr:
    queue_id: str
    affinity: GroupAffinity | None
    limits: dict[str, GroupLimit] = field(default_factory=dict)
    limit_error: str = ""
    allocated: dict[str, Resource] = field(default_factory=dict)  # node group -> usage
    ancestors: list[QueueAttr] = field(default_factory=list)  # parent first

    @classmethod
    def from_queue(cls, q: QueueInfo) -> QueueAttr:
        attr = cls(q.uid, GroupAffinity.from_queue(q.affinity))
        try:
            attr.limits = parse_limits(q.annotations)
        except LimitAnnotationError as e:
            attr.limit_error = str(e)
        return attr


class NodeGroupPlugin:
    name = "nodegroup"
    reads_arguments = ("strict", "enablePreferredOrder")  # every argument it reads (busched.framework.arguments)
    reads_clock = False

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        self.arguments = Arguments.of(arguments)
        self.strict = self.arguments.get_bool("strict", True)
        self.preferred_order = self.arguments.get_bool("enablePreferredOrder", False)
        self.attrs: dict[str, QueueAttr] = {}
        self.ssn: Session | None = None

    # -- session ------------------------------------------------------------------------------------
    def on_session_open(self, ssn: Session) -> None:
        self.ssn = ssn
        self.attrs = {qid: QueueAttr.from_queue(q) for qid, q in ssn.queues.items()}
        if ssn.switch_on(self.name, "hierarchy"):
            self._inherit_affinity(ssn)
        for job in ssn.jobs.values():
            attr = self.attrs.get(job.queue)
            if attr is None:
                continue
            for status, tasks in job.status_index.items():
                if allocated_status(status):
                    for t in tasks.values():
                        self._account(attr, t, +1)
        ssn.add_fn(points.NODE_ORDER, self.name, self._node_order)
        ssn.add_fn(points.PREDICATE, self.name, self._predicate)
        ssn.add_event_handler(EventHandler(allocate=lambda t: self._on_event(t, +1),
                                           deallocate=lambda t: self._on_event(t, -1)))

    def on_session_close(self, ssn: Session) -> None:
        self.attrs = {}
        self.ssn = None

    def _inherit_affinity(self, ssn: Session) -> None:
        built: set[str] = set()

        def build(attr: QueueAttr, visiting: set[str]) -> None:
            if attr.queue_id in built or attr.queue_id in visiting or attr.queue_id == ROOT_QUEUE:
                return  # done, a cycle (left as is), or the root
            visiting.add(attr.queue_id)
            q = ssn.queues[attr.queue_id]
            parent = self.attrs.get(q.parent or ROOT_QUEUE)
            if parent is not None:
                build(parent, visiting)
                attr.ancestors = [parent, *parent.ancestors]
            visiting.discard(attr.queue_id)
            built.add(attr.queue_id)

        for attr in self.attrs.values():
            build(attr, set())
        for attr in self.attrs.values():
            if attr.affinity is None:
                attr.affinity = next((a.affinity for a in attr.ancestors if a.affinity is not None), None)

    # -- accounting ----------------------------------------------------------------------------------
    def _task_group(self, task: TaskInfo) -> str | None:
        assert self.ssn is not None
        if not task.node_name:
            return None
        node = self.ssn.nodes.get(task.node_name)
        if node is None:
            return None
        return node.labels.get(NODE_GROUP_NAME_KEY)

    def _account(self, attr: QueueAttr, task: TaskInfo, sign: int) -> None:
        group = self._task_group(task)
        if group is None:
            return
        used = attr.allocated.get(group)
        if sign > 0:
            if used is None:
                used = attr.allocated[group] = Resource()
            used.add(task.resreq)
        elif used is not None:
            used.sub(task.resreq)

    def _on_event(self, task: TaskInfo, sign: int) -> None:
        if self.ssn is None:
            return
        job = self.ssn.jobs.get(task.job)
        attr = self.attrs.get(job.queue) if job is not None else None
        if attr is not None:
            self._account(attr, task, sign)

    # -- callbacks ---------------------------------------------------------------------------------------
    def _node_order(self, task: TaskInfo, node: NodeInfo) -> float:
        assert self.ssn is not None
        group = node.labels.get(NODE_GROUP_NAME_KEY)
        if group is None:
            return 0.0
        job = self.ssn.jobs.get(task.job)
        if job is None:
            return 0.0
        attr = self.attrs.get(job.queue)
        if attr is None or attr.affinity is None:
            return 0.0
        return attr.affinity.score(group, self.preferred_order)

    def _predicate(self, task: TaskInfo, node: NodeInfo) -> None:
        assert self.ssn is not None
        job = self.ssn.jobs.get(task.job)
        if job is None:
            raise fit_error(task, node, f"job {task.job} not found in session", self.name, Code.Error)
        attr = self.attrs.get(job.queue)
        if attr is not None and attr.limit_error:
            raise self._fail(task, node, ERR_LIMIT_INVALID)
        unset = attr is None or attr.affinity is None or attr.affinity.is_unset()
        group = node.labels.get(NODE_GROUP_NAME_KEY)
        if group is None:
            if not self.strict and unset:
                return
            raise self._fail(task, node, ERR_LABEL_NOT_FOUND)
        if unset:
            raise self._fail(task, node, ERR_AFFINITY_NOT_FOUND)
        assert attr is not None and attr.affinity is not None
        if not attr.affinity.admits(group):
            raise self._fail(task, node, ERR_UNSATISFIED)
        limit = attr.limits.get(group)
        if limit is not None and limit.names:
            used = attr.allocated.get(group, Resource()).clone().add(task.resreq)
            if limit.exceeded(used):
                raise self._fail(task, node, ERR_LIMIT_EXCEEDED)

    def _fail(self, task: TaskInfo, node: NodeInfo, reason: str) -> Exception:
        return fit_error(task, node, reason, self.name, Code.UnschedulableAndUnresolvable)
