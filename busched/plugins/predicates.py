"""predicates: Volcano's node filter, the kube-scheduler Filter plugins it runs.

For a task on a node, in Volcano's order: the pod-count check (tasks on the node
vs allocatable ``pods``), then the cache-stable filters NodeUnschedulable,
NodeAffinity (nodeSelector + required node affinity) and TaintToleration, then
NodePorts, InterPodAffinity and PodTopologySpread (DoNotSchedule). Each failure
adds a status with the code the Kubernetes plugin returns; an
UnschedulableAndUnresolvable (or Error) status stops the walk. The volume and
DRA filters have nothing to check here (no volumes, no claims) and are left out.

Filters that look at other pods read `SessionPods`: Volcano's ``ssn.NodeMap``,
the Kubernetes view of every node's pods. It starts from the snapshot and this
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

import numpy as np

from busched.api.fit import Code, FitError, Status
from busched.api.node import NodeInfo
from busched.api.task import TaskInfo, TaskStatus, parse_bool
from busched.framework import points
from busched.framework import reuse
from busched.framework.session import EventHandler, Session
from busched.kernels import predicates as kernel
from busched.api import k8s
from busched.api.k8s import DEFAULT_MEMORY, DEFAULT_MILLI_CPU, non_zero_requests, pod_requests  # noqa: F401

__all__ = ["PredicatesPlugin", "SessionPods", "session_pods", "get_bool"]

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


def get_bool(arguments: Mapping[str, Any], key: str, default: bool) -> bool:
    """Volcano's Arguments.GetBool: a bool, or a string strconv.ParseBool accepts; else the default."""
    v = arguments.get(key)
    if isinstance(v, bool):
        return v
    if isinstance(v, str):
        parsed = parse_bool(v)
        return default if parsed is None else parsed
    return default


# -- the Kubernetes view of each node's pods -------------------------------------------------------
@dataclass(frozen=True)
class PodTerms:
    """A pod's parsed inter-pod affinity terms (as an existing pod, not the one being scheduled)."""

    has_pod_affinity: bool  # any podAffinity or podAntiAffinity block (k8s PodsWithAffinity)
    required_affinity: list[k8s.AffinityTerm]
    required_anti: list[k8s.AffinityTerm]
    preferred_affinity: list[k8s.AffinityTerm]
    preferred_anti: list[k8s.AffinityTerm]


_NO_TERMS = PodTerms(False, [], [], [], [])


def pod_terms(task: TaskInfo, incoming: bool = False) -> PodTerms:
    aff, ns = task.affinity, task.namespace
    if not aff:
        return _NO_TERMS  # most pods: nothing to parse (shared: terms are only read)
    return PodTerms(bool(aff) and (aff.get("podAffinity") is not None or aff.get("podAntiAffinity") is not None),
                    k8s.pod_affinity_terms(aff, ns, "podAffinity", True, incoming),
                    k8s.pod_affinity_terms(aff, ns, "podAntiAffinity", True, incoming),
                    k8s.pod_affinity_terms(aff, ns, "podAffinity", False, incoming),
                    k8s.pod_affinity_terms(aff, ns, "podAntiAffinity", False, incoming))


class SessionPods:
    """Volcano's ``ssn.NodeMap``: the pods the Kubernetes plugins see on each node.

    As of the session's open (every task on every node, whatever its status); changed only by
    the predicates plugin's event handlers. The lists of nodes holding pods with (anti-)affinity
    are fixed at open, as Volcano's snapshot lists are.

    Nothing is copied at open: a node's pods are its task map as of the open (a node that
    changes puts a new map in place, `NodeInfo.add_task`, so the one read here stays as it was),
    copied for this view on the view's first change there (`_Pods`).  Which node a pod is on is
    asked of the pod only for pods the view has moved; a pod it has not is where it was at open,
    on the node its ``node_name`` names (sessions move a placed task's node only after the view
    has removed it).  What every node's pods say (affinity, images) is kept from one session to
    the next while the nodes do not change (busched.framework.reuse).
    """

    def __init__(self, ssn: Session) -> None:
        self._ssn = ssn  # the view lives in ssn.shared: it dies with the session
        self.nodes: dict[str, NodeInfo] = ssn.nodes
        self.node_list = list(ssn.node_list)
        nodes = list(ssn.node_list)
        self.pods = _Pods(reuse.incremental(ssn, "pods.open", nodes, _open_pods, _open_pods_update))
        self._moved: dict[str, str | None] = {}  # pod -> node (None: gone) for the pods the view moved
        self._terminating: set[str] | None = None
        self._terms: dict[str, PodTerms] = {}
        self._sums: dict[str, tuple[int, int, int, int, dict[str, int]]] = {}
        # a pod without an affinity block has no terms (pod_terms): most pods are not even parsed
        self.affinity_nodes, self.anti_affinity_nodes = reuse.incremental(
            ssn, "pods.affinity", nodes, _affinity_nodes, _affinity_update)[:2]
        self.images = reuse.incremental(ssn, "pods.images", nodes, _image_states, _images_update)
        # Told of every pod added or removed (``pod_added(node, task)``, ``pod_removed(node, task)``):
        # the vectorised filters and scores keep their per-node sums with it (busched.kernels.podview).
        self.listeners: list[Any] = []

    @property
    def terminating(self) -> set[str]:
        """Pods Releasing at open (pods being deleted: topology spread skips them)."""
        if self._terminating is None:
            self._terminating = {uid for ps in self.pods.opened.values() for uid, t in ps.items()
                                 if t.status == TaskStatus.Releasing}
        return self._terminating

    def terms(self, task: TaskInfo) -> PodTerms:
        t = self._terms.get(task.uid)
        if t is None:
            t = self._terms[task.uid] = pod_terms(task)
        return t

    def on(self, node: str) -> dict[str, TaskInfo]:
        return self.pods.get(node, {})

    def add(self, task: TaskInfo) -> None:
        node = task.node_name
        if node not in self.pods:
            return
        self.remove(task)
        self.pods.own(node)[task.uid] = task
        self._moved[task.uid] = node
        s = self._sums.get(node)
        if s is not None:
            # the node's sums grow by this pod's requests (integers: the same as summing afresh)
            c, m, sc = pod_requests(task)
            nc, nm = c or DEFAULT_MILLI_CPU, m or DEFAULT_MEMORY  # non_zero_requests(task)
            scalars = s[4]
            if sc:
                scalars = dict(scalars)
                for k, v in sc.items():
                    scalars[k] = scalars.get(k, 0) + v
            self._sums[node] = (s[0] + c, s[1] + m, s[2] + nc, s[3] + nm, scalars)
        for ls in self.listeners:
            ls.pod_added(node, task)

    def remove(self, task: TaskInfo) -> None:
        uid = task.uid
        if uid in self._moved:
            node = self._moved[uid]
        else:
            node = task.node_name
            if uid not in self.pods.get(node, ()):
                node = None
        if node is None:
            return
        self._moved[uid] = None
        gone = self.pods.own(node).pop(uid, None)
        if gone is not None:
            self._changed(node)
            for ls in self.listeners:
                ls.pod_removed(node, gone)

    def _changed(self, node: str) -> None:
        self._sums.pop(node, None)

    def requested(self, node: str) -> tuple[int, int, int, int, dict[str, int]]:
        """(cpu, memory, non-zero cpu, non-zero memory, scalars) summed over the node's pods (for a
        node whose pods the view has not changed, kept on the node from session to session)."""
        s = self._sums.get(node)
        if s is None:
            if self.pods.changed(node):
                s = _sum_pods(self.pods[node])
            else:
                pods = self.pods.opened[node]
                s = reuse.node_value(self.nodes[node], "pods.requested", lambda _: _sum_pods(pods))
            self._sums[node] = s
        return s

    def pod_columns(self) -> tuple[np.ndarray, ...]:
        """Per node (in node-list order): pods, cpu, memory, non-zero cpu, non-zero memory, and a map of
        scalar columns; what the pod view arrays start from (busched.kernels.podview) instead of
        adding every pod.  The columns as the nodes were lent are kept from session to session
        (busched.framework.reuse; rows redone for the nodes that changed), then the rows of the
        nodes this view has changed are put in.  The arrays returned are the caller's."""
        base = reuse.incremental(self._ssn, "pods.columns", self.node_list, _columns, _columns_update)
        cols = [c.copy() for c in base[:5]]
        scalars = {k: v.copy() for k, v in base[5].items()}
        at = {n.name: i for i, n in enumerate(self.node_list)} if self.pods.changed_nodes() else {}
        for name in self.pods.changed_nodes():
            i = at.get(name)
            if i is not None:
                _put_row(cols, scalars, i, len(self.node_list), len(self.on(name)), self.requested(name))
        return (*cols, scalars)


def _lent_sums(n: NodeInfo) -> tuple[int, int, int, int, dict[str, int]]:
    """A node's pod sums as lent (its task map as of the open), kept on the node."""
    return reuse.node_value(n, "pods.requested", lambda _: _sum_pods(n.tasks))


def _columns(nodes: list[NodeInfo]) -> tuple[Any, ...]:
    k = len(nodes)
    sums = [_lent_sums(n) for n in nodes]
    cols = [np.fromiter((len(n.tasks) for n in nodes), dtype=np.int64, count=k)]
    cols += [np.fromiter((s[j] for s in sums), dtype=np.int64, count=k) for j in range(4)]
    scalars: dict[str, np.ndarray] = {}
    for i, s in enumerate(sums):
        for name, v in s[4].items():
            col = scalars.get(name)
            if col is None:
                col = scalars[name] = np.zeros(k, dtype=np.int64)
            col[i] += v
    return (*cols, scalars)


def _columns_update(last: tuple[Any, ...], pairs: reuse.Pairs) -> tuple[Any, ...] | None:
    cols = [c.copy() for c in last[:5]]
    scalars = {name: v.copy() for name, v in last[5].items()}
    k = len(cols[0])
    for i, old, new in pairs:
        if old is None or old.name != new.name:
            return None
        for col in scalars.values():
            col[i] = 0
        _put_row(cols, scalars, i, k, len(new.tasks), _lent_sums(new))
    return (*cols, scalars)


def _put_row(cols: list[np.ndarray], scalars: dict[str, np.ndarray], i: int, k: int, count: int,
             s: tuple[int, int, int, int, dict[str, int]]) -> None:
    cols[0][i] = count
    for j in range(4):
        cols[j + 1][i] = s[j]
    for col in scalars.values():
        col[i] = 0
    for name, v in s[4].items():
        col = scalars.get(name)
        if col is None:
            col = scalars[name] = np.zeros(k, dtype=np.int64)
        col[i] = v


def _sum_pods(pods: dict[str, TaskInfo]) -> tuple[int, int, int, int, dict[str, int]]:
    cpu = mem = nz_cpu = nz_mem = 0
    scalars: dict[str, int] = {}
    for t in pods.values():
        c, m, sc = pod_requests(t)
        nc, nm = non_zero_requests(t)
        cpu, mem, nz_cpu, nz_mem = cpu + c, mem + m, nz_cpu + nc, nz_mem + nm
        for k, v in sc.items():
            scalars[k] = scalars.get(k, 0) + v
    return cpu, mem, nz_cpu, nz_mem, scalars


class _Pods(Mapping[str, dict[str, TaskInfo]]):
    """node -> its pods: the task maps as of the open, each copied on the view's first change to it."""

    def __init__(self, opened: dict[str, dict[str, TaskInfo]]) -> None:
        self.opened = opened  # shared with other sessions: never changed
        self._own: dict[str, dict[str, TaskInfo]] = {}

    def changed(self, node: str) -> bool:
        return node in self._own

    def changed_nodes(self) -> list[str]:
        return list(self._own)

    def own(self, node: str) -> dict[str, TaskInfo]:
        d = self._own.get(node)
        if d is None:
            d = self._own[node] = dict(self.opened[node])
        return d

    def __getitem__(self, node: str) -> dict[str, TaskInfo]:
        d = self._own.get(node)
        return d if d is not None else self.opened[node]

    def get(self, node: str, default: Any = None) -> Any:
        d = self._own.get(node)
        if d is not None:
            return d
        return self.opened.get(node, default)

    def __contains__(self, node: object) -> bool:
        return node in self.opened

    def __iter__(self) -> Any:
        return iter(self.opened)

    def __len__(self) -> int:
        return len(self.opened)

    def items(self) -> Any:
        own = self._own
        return [(k, own.get(k, v)) for k, v in self.opened.items()]

    def values(self) -> Any:
        own = self._own
        return [own.get(k, v) for k, v in self.opened.items()]


def _open_pods(nodes: list[NodeInfo]) -> dict[str, dict[str, TaskInfo]]:
    return {n.name: n.tasks for n in nodes}


def _open_pods_update(last: dict[str, dict[str, TaskInfo]], pairs: reuse.Pairs) -> Any:
    out = dict(last)
    for _, old, new in pairs:
        if old is None or old.name != new.name:
            return None
        out[new.name] = new.tasks
    return out


def _affinity_nodes(nodes: list[NodeInfo]) -> tuple[list[str], list[str], list[tuple[bool, bool]]]:
    """The nodes holding a pod with required pod affinity / anti-affinity terms (each node's answer
    kept on the node while its pods do not change), and every node's answer."""
    affinity, anti = [], []
    answers = [reuse.node_value(n, "pods.affinity", _node_affinity) for n in nodes]
    for n, (has, has_anti) in zip(nodes, answers):
        if has:
            affinity.append(n.name)
        if has_anti:
            anti.append(n.name)
    return affinity, anti, answers


def _affinity_update(last: Any, pairs: reuse.Pairs) -> Any:
    """The same lists while no node that changed changed its answer."""
    answers = last[2]
    for i, old, new in pairs:
        if old is None or reuse.node_value(new, "pods.affinity", _node_affinity) != answers[i]:
            return None
    return last


def _images_update(last: Any, pairs: reuse.Pairs) -> Any:
    """The same states while no node that changed changed its images."""
    for _, old, new in pairs:
        if old is None or old.name != new.name or old.images != new.images:
            return None
    return last


def _node_affinity(n: NodeInfo) -> tuple[bool, bool]:
    terms = [pod_terms(t) for t in n.tasks.values() if t.affinity]
    return any(t.has_pod_affinity for t in terms), any(t.required_anti for t in terms)


def _image_states(nodes: list[NodeInfo]) -> dict[str, dict[str, tuple[int, int]]]:
    """node -> image -> (size, number of nodes holding it).

    Volcano's cache counts an image's nodes when each node arrives, so a node sees the count
    as of its own arrival (list order).
    """
    seen: dict[str, int] = {}
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for n in sorted(nodes, key=lambda n: n.index):
        for image in n.images:
            seen[image] = seen.get(image, 0) + 1
        out[n.name] = {image: (int(size), seen[image]) for image, size in n.images.items()}
    return out


def session_pods(ssn: Session) -> SessionPods:
    """The session's pod view, created on first use (plugins ask for it when the session opens)."""
    v = ssn.shared.get("pods")
    if v is None:
        v = ssn.shared["pods"] = SessionPods(ssn)
    return v


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


def count_matching(view: SessionPods, node: str, selector: k8s.Selector, namespace: str) -> int:
    """countPodsMatchSelector: pods of the namespace matching the selector; terminating pods and an
    empty (select-all) selector count nothing."""
    if selector == ():
        return 0
    return sum(1 for uid, p in view.on(node).items()
               if uid not in view.terminating and p.namespace == namespace and k8s.selector_matches(selector, p.labels))


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

    def __init__(self, arguments: Mapping[str, Any] | None = None) -> None:
        args = arguments or {}
        self.node_affinity = get_bool(args, NODE_AFFINITY_ENABLE, True)
        self.node_ports = get_bool(args, NODE_PORTS_ENABLE, True)
        self.taint_toleration = get_bool(args, TAINT_TOLERATION_ENABLE, True)
        self.pod_affinity = get_bool(args, POD_AFFINITY_ENABLE, True)
        self.topology_spread = get_bool(args, POD_TOPOLOGY_SPREAD_ENABLE, True)
        self.cache_enable = get_bool(args, CACHE_ENABLE, False)
        self.view: SessionPods | None = None
        self.cache: dict[tuple[str, str], bool] = {}  # (node, template uid) -> stable filters passed
        self._states: dict[str, tuple[Any, Any]] = {}  # task uid -> (affinity, spread) pre-filter states

    def on_session_open(self, ssn: Session) -> None:
        self.view = session_pods(ssn)
        self.cache = {}
        self._states = {}
        ssn.add_event_handler(EventHandler(allocate=self.view.add, deallocate=self.view.remove))
        ssn.add_fn(points.PRE_PREDICATE, self.name, self.pre_predicate)
        ssn.add_fn(points.PREDICATE, self.name, self.predicate, twin=self.predicate_batch)

    def on_session_close(self, ssn: Session) -> None:
        self._states = {}

    # -- callbacks --------------------------------------------------------------------------------------
    def pre_predicate(self, task: TaskInfo) -> None:
        """NodeAffinity PreFilter: required terms that pin node names with no name in common fit nowhere."""
        if not task.affinity and not task.topology_spread_constraints:
            # no terms of its own (most pods): none of the three checks below can fail
            self._states[task.uid] = self._compute_states(task) if self.view.anti_affinity_nodes else _NO_STATES
            return
        if self.node_affinity and k8s.node_affinity_name_conflict(task.affinity):
            raise pre_predicate_error(task, "NodeAffinity", REASON_NAME_CONFLICT)
        if self.pod_affinity and not k8s.pod_affinity_valid(task.affinity):
            raise pre_predicate_error(task, "InterPodAffinity", REASON_PARSE)
        if self.topology_spread and not all(k8s.label_selector_valid(c.get("labelSelector"))
                                            for c in task.topology_spread_constraints):
            raise pre_predicate_error(task, "PodTopologySpread", REASON_PARSE)
        if not task.affinity and not task.topology_spread_constraints and not self.view.anti_affinity_nodes:
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

    def predicate_batch(self, task: TaskInfo, arrays: Any, rows: Any) -> Any:
        """`predicate` for many nodes at once (busched.kernels.predicates), or None for the per-node path."""
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
        used = [p for t in self.view.on(node.name).values() for p in k8s.host_ports(t.host_ports)]
        if k8s.ports_conflict(k8s.host_ports(task.host_ports), used):
            return Status(Code.Unschedulable, REASON_NODE_PORTS, "NodePorts")
        return None

    def _compute_states(self, task: TaskInfo) -> tuple[Any, Any]:
        aff = affinity_state(self.view, task) if self.pod_affinity else None
        spread = spread_state(self.view, task) if self.topology_spread else None
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
