"""predicates: Volcano's node filter, the kube-scheduler Filter plugins it runs.

For a task on a node, in Volcano's order: the pod-count check (tasks on the node
vs allocatable ``pods``), then the cache-stable filters NodeUnschedulable,
NodeAffinity (nodeSelector + required node affinity) and TaintToleration, then
NodePorts, InterPodAffinity and PodTopologySpread (DoNotSchedule). Each failure
adds a status with the code the Kubernetes plugin returns; an
UnschedulableAndUnresolvable (or Error) status stops the walk. The volume and
DRA filters have nothing to check here (no volumes, no claims) and are left out.

Filters that look at other pods read the session's pod view
(`busched.framework.podview.SessionPods`, Volcano's ``ssn.NodeMap``): the
Kubernetes view of every node's pods. It starts from the snapshot and this
plugin's event handlers keep it current (allocate/pipeline adds a pod, evict and
discard remove it), so tasks placed earlier in the session count. nodeorder
scores over the same view; without this plugin it stays as the session opened,
as in Volcano.

The pod-count and host-port checks read the view as it is now. InterPodAffinity
and PodTopologySpread, as in Kubernetes, count pods once in the pre-predicate
(PreFilter) and filter against those counts: evictions made after a task's
pre-predicate do not free it from an anti-affinity until the next pre-predicate
(Volcano's TestPodAntiAffinity relies on this). A task never pre-predicated gets
its counts on its first predicate.

Arguments (Volcano's names): ``predicate.NodeAffinityEnable``,
``predicate.NodePortsEnable``, ``predicate.TaintTolerationEnable``,
``predicate.PodAffinityEnable``, ``predicate.PodTopologySpreadEnable`` (all on by
default) and ``predicate.CacheEnable`` (off): cache the stable filters' verdict per
node and ``volcano.sh/template-uid`` annotation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from busched.api import k8s
from busched.api.fit import Code, FitError, Status
from busched.api.k8s import DEFAULT_MEMORY, DEFAULT_MILLI_CPU, non_zero_requests, pod_requests  # noqa: F401
from busched.api.node import NodeInfo
from busched.api.task import TaskInfo
from busched.fastpath import predicates as kernel
from busched.fastpath.rowlocal import declare
from busched.framework import points
from busched.framework.arguments import Arguments
from busched.framework.podview import SessionPods, count_matching, pod_terms, session_pods
from busched.framework.session import EventHandler, Session

__all__ = ["PredicatesPlugin", "SessionPods", "session_pods"]

PLUGIN_NAME = "predicates"
NODE_AFFINITY_ENABLE = "predicate.NodeAffinityEnable"
NODE_PORTS_ENABLE = "predicate.NodePortsEnable"
TAINT_TOLERATION_ENABLE = "predicate.TaintTolerationEnable"
POD_AFFINITY_ENABLE = "predicate.PodAffinityEnable"
POD_TOPOLOGY_SPREAD_ENABLE = "predicate.PodTopologySpreadEnable"
CACHE_ENABLE = "predicate.CacheEnable"
TEMPLATE_UID_KEY = "volcano.sh/template-uid"

POD_NUMBER_EXCEEDED = "node(s) pod number exceeded"
REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_NODE_PORTS = "node(s) didn't have free ports for the requested pod ports"
REASON_AFFINITY = "node(s) didn't match pod affinity rules"
REASON_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
REASON_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
REASON_SPREAD_LABEL = "node(s) didn't match pod topology spread constraints (missing required label)"
REASON_SPREAD = "node(s) didn't match pod topology spread constraints"
REASON_CACHE = "plugin equivalence cache predicates failed"
REASON_NAME_CONFLICT = "node(s) didn't satisfy plugin(s) [NodeAffinity] simultaneously"
REASON_PARSE = "parsing pod: invalid label selector"

MAX_INT32 = 2**31 - 1
ABORT_CODES = frozenset({Code.UnschedulableAndUnresolvable, Code.Error, Code.Wait, Code.Skip})


# -- filter states (kube-scheduler PreFilter), recomputed when the view changes ----------------------
@dataclass
class AffinityState:
    required_affinity: list[k8s.AffinityTerm]
    required_anti: list[k8s.AffinityTerm]
    affinity_counts: dict[tuple[str, str], int]
    anti_counts: dict[tuple[str, str], int]
    existing_anti_counts: dict[tuple[str, str], int]
    self_match: bool  # the pod matches all its own required affinity terms


def _bump(counts: dict[tuple[str, str], int], key: str, labels: Mapping[str, str]) -> None:
    if key in labels:
        pair = (key, labels[key])
        counts[pair] = counts.get(pair, 0) + 1


def affinity_state(view: SessionPods, task: TaskInfo) -> AffinityState | None:
    """InterPodAffinity PreFilter; None when there is nothing to check (Skip)."""
    own = pod_terms(task, incoming=True)
    ns, labels = task.namespace, task.labels
    existing: dict[tuple[str, str], int] = {}
    for name in view.anti_affinity_nodes:
        node_labels = view.nodes[name].labels
        for p in view.on(name).values():
            for t in view.terms(p).required_anti:
                if k8s.term_matches(t, ns, labels):
                    _bump(existing, t.topology_key, node_labels)
    aff: dict[tuple[str, str], int] = {}
    anti: dict[tuple[str, str], int] = {}
    if own.required_affinity or own.required_anti:
        for node in view.node_list:
            for p in view.on(node.name).values():
                if own.required_affinity and all(k8s.term_matches(t, p.namespace, p.labels)
                                                 for t in own.required_affinity):
                    for t in own.required_affinity:
                        _bump(aff, t.topology_key, node.labels)
                for t in own.required_anti:
                    if k8s.term_matches(t, p.namespace, p.labels):
                        _bump(anti, t.topology_key, node.labels)
    if not existing and not own.required_affinity and not own.required_anti:
        return None
    self_match = bool(own.required_affinity) and all(k8s.term_matches(t, ns, labels) for t in own.required_affinity)
    return AffinityState(own.required_affinity, own.required_anti, aff, anti, existing, self_match)


def affinity_filter(s: AffinityState, labels: Mapping[str, str]) -> Status | None:
    pods_exist = True
    for t in s.required_affinity:
        if t.topology_key not in labels:
            return Status(Code.UnschedulableAndUnresolvable, REASON_AFFINITY, "InterPodAffinity")
        if s.affinity_counts.get((t.topology_key, labels[t.topology_key]), 0) <= 0:
            pods_exist = False
    # The first pod of a group with affinity to itself may go anywhere its terms' topologies exist.
    if not pods_exist and not (not s.affinity_counts and s.self_match):
        return Status(Code.UnschedulableAndUnresolvable, REASON_AFFINITY, "InterPodAffinity")
    for t in s.required_anti:
        if t.topology_key in labels and s.anti_counts.get((t.topology_key, labels[t.topology_key]), 0) > 0:
            return Status(Code.Unschedulable, REASON_ANTI_AFFINITY, "InterPodAffinity")
    if s.existing_anti_counts and any(s.existing_anti_counts.get(kv, 0) > 0 for kv in labels.items()):
        return Status(Code.Unschedulable, REASON_EXISTING_ANTI_AFFINITY, "InterPodAffinity")
    return None


@dataclass
class SpreadState:
    constraints: list[k8s.SpreadConstraint]
    counts: list[dict[str, int]]  # per constraint: topology value -> matching pods


def spread_state(view: SessionPods, task: TaskInfo) -> SpreadState | None:
    """PodTopologySpread PreFilter over every node; None when the pod has no hard constraint (Skip)."""
    cons = k8s.spread_constraints(task.topology_spread_constraints, task.labels, "DoNotSchedule")
    if not cons:
        return None
    counts: list[dict[str, int]] = [{} for _ in cons]
    for node in view.node_list:
        if not k8s.node_has_topology_keys(node.labels, cons):
            continue
        affinity_ok = k8s.required_node_affinity_matches(task.node_selector, task.affinity, node.name, node.labels)
        for i, c in enumerate(cons):
            if not k8s.inclusion_policies_match(c, affinity_ok, node.taints, task.tolerations):
                continue
            value = node.labels[c.topology_key]
            counts[i][value] = counts[i].get(value, 0) + count_matching(view, node.name, c.selector, task.namespace)
    return SpreadState(cons, counts)


def spread_filter(s: SpreadState, task: TaskInfo, labels: Mapping[str, str]) -> Status | None:
    for c, counts in zip(s.constraints, s.counts):
        if c.topology_key not in labels:
            return Status(Code.UnschedulableAndUnresolvable, REASON_SPREAD_LABEL, "PodTopologySpread")
        # Fewer eligible domains than minDomains: the global minimum is taken as 0.
        min_match = 0 if len(counts) < c.min_domains else min(counts.values(), default=MAX_INT32)
        self_match = 1 if k8s.selector_matches(c.selector, task.labels) else 0
        if counts.get(labels[c.topology_key], 0) + self_match - min_match > c.max_skew:
            return Status(Code.Unschedulable, REASON_SPREAD, "PodTopologySpread")
    return None


def pre_predicate_error(task: TaskInfo, plugin: str, reason: str) -> FitError:
    """Volcano turns a failed PreFilter into a plain error: no Unschedulable code, so an Error status."""
    return FitError(task.key, "", [Status(Code.Error, f"plugin {plugin} pre-predicates failed {reason}", plugin)])


_NO_STATES: tuple[Any, Any] = (None, None)


# -- the plugin ---------------------------------------------------------------------------------------
class PredicatesPlugin:
    name = PLUGIN_NAME
    reads_arguments = (NODE_AFFINITY_ENABLE, NODE_PORTS_ENABLE, TAINT_TOLERATION_ENABLE, POD_AFFINITY_ENABLE,
                       POD_TOPOLOGY_SPREAD_ENABLE, CACHE_ENABLE)
    reads_clock = False

    def __init__(self, arguments: Mapping[str, Any] | None = None) -> None:
        args = Arguments.of(arguments)
        self.node_affinity = args.get_bool(NODE_AFFINITY_ENABLE, True)
        self.node_ports = args.get_bool(NODE_PORTS_ENABLE, True)
        self.taint_toleration = args.get_bool(TAINT_TOLERATION_ENABLE, True)
        self.pod_affinity = args.get_bool(POD_AFFINITY_ENABLE, True)
        self.topology_spread = args.get_bool(POD_TOPOLOGY_SPREAD_ENABLE, True)
        self.cache_enable = args.get_bool(CACHE_ENABLE, False)
        self.view: SessionPods | None = None
        self.cache: dict[tuple[str, str], bool] = {}  # (node, template uid) -> stable filters passed
        self._states: dict[str, tuple[Any, Any]] = {}  # task uid -> (affinity, spread) pre-filter states

    def on_session_open(self, ssn: Session) -> None:
        self.view = session_pods(ssn)
        self.cache = {}
        self._states = {}
        ssn.add_event_handler(EventHandler(allocate=self.view.add, deallocate=self.view.remove))
        ssn.add_fn(points.PRE_PREDICATE, self.name, self.pre_predicate)
        # the twin answers row by row for a run of one template where it can (busched.fastpath.batch)
        twin = declare(lambda t, arrays, rows: self.predicate_batch(t, arrays, rows),
                       lambda t, arrays: kernel.predicate_local(self, t, arrays))
        ssn.add_fn(points.PREDICATE, self.name, self.predicate, twin=twin)
        # topology-aware preemption's dry run: only inter-pod affinity follows it, as in Volcano
        ssn.add_fn(points.SIMULATE_REMOVE_TASK, self.name, self.follow_dry_run)
        ssn.add_fn(points.SIMULATE_ADD_TASK, self.name, self.follow_dry_run)
        ssn.add_fn(points.SIMULATE_PREDICATE, self.name, self.simulate_predicate)

    def on_session_close(self, ssn: Session) -> None:
        self._states = {}

    # -- callbacks --------------------------------------------------------------------------------------
    def pre_predicate(self, task: TaskInfo) -> None:
        """NodeAffinity PreFilter: required terms that pin node names with no name in common fit nowhere."""
        view = self.view
        assert view is not None, "predicates: session not open"
        if not task.affinity and not task.topology_spread_constraints:
            # no terms of its own (most pods): none of the three checks below can fail
            self._states[task.uid] = self._compute_states(task) if view.anti_affinity_nodes else _NO_STATES
            return
        if self.node_affinity and k8s.node_affinity_name_conflict(task.affinity):
            raise pre_predicate_error(task, "NodeAffinity", REASON_NAME_CONFLICT)
        if self.pod_affinity and not k8s.pod_affinity_valid(task.affinity):
            raise pre_predicate_error(task, "InterPodAffinity", REASON_PARSE)
        if self.topology_spread and not all(k8s.label_selector_valid(c.get("labelSelector"))
                                            for c in task.topology_spread_constraints):
            raise pre_predicate_error(task, "PodTopologySpread", REASON_PARSE)
        if not task.affinity and not task.topology_spread_constraints and not view.anti_affinity_nodes:
            # no terms of its own, no hard spread, no pod with anti-affinity: both states are None
            self._states[task.uid] = _NO_STATES
            return
        self._states[task.uid] = self._compute_states(task)

    def predicate(self, task: TaskInfo, node: NodeInfo) -> None:
        view = self.view
        assert view is not None, "predicates: session not open"
        statuses: list[Status] = []
        if node.allocatable.max_task_num <= len(view.on(node.name)):
            statuses.append(Status(Code.Unschedulable, POD_NUMBER_EXCEEDED, self.name))
        fit, stable = self._stable(task, node)
        statuses.extend(stable)
        if not fit:
            raise FitError(task.key, node.name, statuses)
        for check in (self._node_ports, self._inter_pod_affinity, self._topology_spread):
            s = check(task, node)
            if s is not None:
                statuses.append(s)
                if s.code in ABORT_CODES:
                    break
        if statuses:
            raise FitError(task.key, node.name, statuses)

    def follow_dry_run(self, preemptor: TaskInfo, task: TaskInfo, node: NodeInfo) -> None:
        """A task left or rejoined a node in the preemptor's dry run (the session's pod view has
        followed it already): recount the preemptor's inter-pod affinity state.  Its spread state
        stays what its pre-predicate saw, as Volcano's simulate functions leave it."""
        if not self.pod_affinity:
            return
        view = self.view
        assert view is not None, "predicates: session not open"
        _, spread = self._filter_states(preemptor)
        self._states[preemptor.uid] = (affinity_state(view, preemptor), spread)

    def simulate_predicate(self, task: TaskInfo, node: NodeInfo) -> None:
        """The dry run's check: inter-pod affinity on the node as it stands (Volcano's
        SimulatePredicateFn; the other filters passed when the node became a candidate)."""
        if not self.pod_affinity:
            return
        s = self._inter_pod_affinity(task, node)
        if s is not None:
            raise FitError(task.key, node.name, [s])

    def predicate_batch(self, task: TaskInfo, arrays: Any, rows: Any) -> Any:
        """`predicate` for many nodes at once (busched.fastpath.predicates), or None for the per-node path."""
        return kernel.predicate_mask(self, task, arrays, rows)

    # -- filters ------------------------------------------------------------------------------------------
    def _stable(self, task: TaskInfo, node: NodeInfo) -> tuple[bool, list[Status]]:
        """The filters whose verdict depends only on the pod spec and the node (cacheable)."""
        uid = task.annotations.get(TEMPLATE_UID_KEY, "") if self.cache_enable else ""
        if uid:
            cached = self.cache.get((node.name, uid))
            if cached is not None:
                return cached, [] if cached else [Status(Code.Error, REASON_CACHE, CACHE_ENABLE)]
        statuses: list[Status] = []
        for s in (self._node_unschedulable(task, node), self._node_affinity(task, node),
                  self._taint_toleration(task, node)):
            if s is not None:
                statuses.append(s)
                if s.code in ABORT_CODES:
                    break
        fit = not any(s.code in ABORT_CODES for s in statuses)
        if uid:
            self.cache[(node.name, uid)] = fit
        return fit, statuses

    @staticmethod
    def _node_unschedulable(task: TaskInfo, node: NodeInfo) -> Status | None:
        if not node.unschedulable:
            return None
        taint = {"key": k8s.UNSCHEDULABLE_TAINT, "effect": k8s.NO_SCHEDULE}
        if any(k8s.tolerates(t, taint) for t in task.tolerations):
            return None
        return Status(Code.UnschedulableAndUnresolvable, REASON_UNSCHEDULABLE, "NodeUnschedulable")

    def _node_affinity(self, task: TaskInfo, node: NodeInfo) -> Status | None:
        if not self.node_affinity or k8s.required_node_affinity_matches(task.node_selector, task.affinity,
                                                                         node.name, node.labels):
            return None
        return Status(Code.UnschedulableAndUnresolvable, REASON_NODE_AFFINITY, "NodeAffinity")

    def _taint_toleration(self, task: TaskInfo, node: NodeInfo) -> Status | None:
        if not self.taint_toleration:
            return None
        taint = k8s.find_untolerated_taint(node.taints, task.tolerations)
        if taint is None:
            return None
        reason = f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}"
        return Status(Code.UnschedulableAndUnresolvable, reason, "TaintToleration")

    def _node_ports(self, task: TaskInfo, node: NodeInfo) -> Status | None:
        if not self.node_ports or not task.host_ports:
            return None
        assert self.view is not None, "predicates: session not open"
        used = [p for t in self.view.on(node.name).values() for p in k8s.host_ports(t.host_ports)]
        if k8s.ports_conflict(k8s.host_ports(task.host_ports), used):
            return Status(Code.Unschedulable, REASON_NODE_PORTS, "NodePorts")
        return None

    def _compute_states(self, task: TaskInfo) -> tuple[Any, Any]:
        view = self.view
        assert view is not None, "predicates: session not open"
        aff = affinity_state(view, task) if self.pod_affinity else None
        spread = spread_state(view, task) if self.topology_spread else None
        return aff, spread

    def _filter_states(self, task: TaskInfo) -> tuple[Any, Any]:
        """The task's InterPodAffinity and PodTopologySpread states from its last pre-predicate."""
        st = self._states.get(task.uid)
        if st is None:
            st = self._states[task.uid] = self._compute_states(task)
        return st

    def _inter_pod_affinity(self, task: TaskInfo, node: NodeInfo) -> Status | None:
        s = self._filter_states(task)[0]
        return None if s is None else affinity_filter(s, node.labels)

    def _topology_spread(self, task: TaskInfo, node: NodeInfo) -> Status | None:
        s = self._filter_states(task)[1]
        return None if s is None else spread_filter(s, task, node.labels)
