"""nodeorder: Volcano's node scores, the kube-scheduler Score plugins it runs.

Each enabled score plugin (weight != 0) gives every candidate node a score in
[0, 100] (k8s MaxNodeScore) after its own normalisation, multiplied by the
plugin's weight; the plugin's total is the sum. As in Volcano (at the commit the
conformance cases come from) these run as one batch node-order callback:

- ``leastrequested`` / ``mostrequested``: NodeResourcesFit LeastAllocated (cpu and
  memory, weight 50 each) / MostAllocated (1 each), over non-zero requests;
- ``balancedresource``: NodeResourcesBalancedAllocation over cpu, memory and
  nvidia.com/gpu (skipped for a pod that requests nothing);
- ``nodeaffinity``: preferred node affinity weights, scaled by the best node;
- ``podaffinity``: InterPodAffinity preferred terms (the pod's and existing pods'),
  min-max scaled;
- ``tainttoleration``: intolerable PreferNoSchedule taints, fewer is better;
- ``podtopologyspread``: PodTopologySpread ScheduleAnyway constraints.

``imagelocality`` is a plain per-node node-order callback. Default weights are
Volcano's: leastrequested 1, mostrequested 0, balancedresource 1, nodeaffinity 2,
podaffinity 2, tainttoleration 3, imagelocality 1, podtopologyspread 2.

Scores read the same pod view as the predicates plugin (`busched.framework.podview.SessionPods`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from busched.api import k8s
from busched.api.node import NodeInfo
from busched.api.resource import GPU
from busched.api.task import TaskInfo
from busched.fastpath import nodeorder as kernel
from busched.fastpath.rowlocal import declare
from busched.framework import points
from busched.framework.arguments import Arguments
from busched.framework.podview import (
    SessionPods,
    count_matching,
    non_zero_requests,
    pod_requests,
    pod_terms,
    session_pods,
)
from busched.framework.session import Session

__all__ = ["NodeOrderPlugin", "weights_from", "DEFAULT_WEIGHTS"]

PLUGIN_NAME = "nodeorder"
MAX = k8s.MAX_NODE_SCORE
MB = 1024 * 1024
MIN_IMAGE_THRESHOLD = 23 * MB
MAX_CONTAINER_IMAGE_THRESHOLD = 1000 * MB

DEFAULT_WEIGHTS: dict[str, int] = {
    "leastrequested.weight": 1,
    "mostrequested.weight": 0,
    "nodeaffinity.weight": 2,
    "podaffinity.weight": 2,
    "balancedresource.weight": 1,
    "tainttoleration.weight": 3,
    "imagelocality.weight": 1,
    "podtopologyspread.weight": 2,
}


def weights_from(arguments: Mapping[str, Any] | None) -> dict[str, int]:
    """Each weight read with `Arguments.get_int` over its default."""
    args = Arguments.of(arguments)
    return {key: args.get_int(key, default) for key, default in DEFAULT_WEIGHTS.items()}


# -- resource scores -------------------------------------------------------------------------------
_CPU_MEMORY = ("cpu", "memory")


def _resource_pairs(view: SessionPods, task: TaskInfo, node: NodeInfo, use_requested: bool,
                    resources: tuple[str, ...]) -> list[tuple[int, int]]:
    """(requested incl. the pod, allocatable) per resource, leaving out resources the node has none of."""
    cpu, mem, nz_cpu, nz_mem, scalars = view.requested(node.name)
    if use_requested:
        pc, pm, pscalars = pod_requests(task)
    else:
        (pc, pm), pscalars = non_zero_requests(task), {}
        cpu, mem = nz_cpu, nz_mem
    if not pscalars and resources[:2] == _CPU_MEMORY:
        # the pod asks for no extended resource (most pods): cpu and memory, as the walk below gives them
        a = node.allocatable
        ac, am = int(a.cpu), int(a.memory)
        if ac and am:
            return [(cpu + pc, ac), (mem + pm, am)]
        return ([(cpu + pc, ac)] if ac else []) + ([(mem + pm, am)] if am else [])
    out = []
    for name in resources:
        if name == "cpu":
            alloc, req = int(node.allocatable.cpu), cpu + pc
        elif name == "memory":
            alloc, req = int(node.allocatable.memory), mem + pm
        else:  # an extended resource counts only when the pod asks for it and the node lists it
            want = pscalars.get(name, 0)
            if want == 0 or name not in node.allocatable.scalars:
                continue
            alloc, req = -(-int(node.allocatable.scalars[name]) // 1000), scalars.get(name, 0) + want
        if alloc != 0:
            out.append((req, alloc))
    return out


def least_allocated(view: SessionPods, task: TaskInfo, node: NodeInfo) -> int:
    """Free share of cpu and memory, each weighted 50."""
    total = weight = 0
    for req, alloc in _resource_pairs(view, task, node, False, ("cpu", "memory")):
        total += 0 if req > alloc else k8s.go_div((alloc - req) * MAX, alloc) * 50
        weight += 50
    return k8s.go_div(total, weight) if weight else 0


def most_allocated(view: SessionPods, task: TaskInfo, node: NodeInfo) -> int:
    """Used share of cpu and memory (capped at the capacity), each weighted 1."""
    total = weight = 0
    for req, alloc in _resource_pairs(view, task, node, False, ("cpu", "memory")):
        total += k8s.go_div(min(req, alloc) * MAX, alloc)
        weight += 1
    return k8s.go_div(total, weight) if weight else 0


def balanced_allocation(view: SessionPods, task: TaskInfo, node: NodeInfo) -> int:
    """(1 - standard deviation of the used fractions) * 100."""
    fractions = [min(req / alloc, 1.0) for req, alloc in _resource_pairs(view, task, node, True,
                                                                          ("cpu", "memory", GPU))]
    std = 0.0
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = sum(fractions) / len(fractions)
        std = math.sqrt(sum((f - mean) ** 2 for f in fractions) / len(fractions))
    return int((1 - std) * MAX)


def _per_node(fn: Callable[[SessionPods, TaskInfo, NodeInfo], int]) -> Callable[..., dict[str, int] | None]:
    def score(view: SessionPods, task: TaskInfo, nodes: list[NodeInfo]) -> dict[str, int]:
        return {n.name: fn(view, task, n) for n in nodes}
    return score


def balanced_scores(view: SessionPods, task: TaskInfo, nodes: list[NodeInfo]) -> dict[str, int] | None:
    cpu, mem, scalars = pod_requests(task)
    if not cpu and not mem and not scalars.get(GPU):
        return None  # a best-effort pod is not balanced (PreScore Skip)
    return {n.name: balanced_allocation(view, task, n) for n in nodes}


# -- affinity, taints, spread -----------------------------------------------------------------------------
def node_affinity_scores(view: SessionPods, task: TaskInfo, nodes: list[NodeInfo]) -> dict[str, int] | None:
    terms = k8s.preferred_node_affinity(task.affinity)
    if terms is None:
        return None
    raw = {n.name: k8s.preferred_node_affinity_score(terms, n.name, n.labels) for n in nodes}
    return k8s.default_normalize(raw, reverse=False)


def taint_toleration_scores(view: SessionPods, task: TaskInfo, nodes: list[NodeInfo]) -> dict[str, int] | None:
    tolerations = [t for t in task.tolerations if (t.get("effect") or "") in ("", k8s.PREFER_NO_SCHEDULE)]
    raw = {}
    for n in nodes:
        raw[n.name] = sum(1 for taint in n.taints if taint.get("effect") == k8s.PREFER_NO_SCHEDULE
                          and not any(k8s.tolerates(t, taint) for t in tolerations))
    return k8s.default_normalize(raw, reverse=True)


def pod_affinity_scores(view: SessionPods, task: TaskInfo, nodes: list[NodeInfo]) -> dict[str, int] | None:
    """InterPodAffinity: weights of matching preferred terms, summed per topology value, min-max scaled.

    Counted: the pod's preferred (anti-)affinity against existing pods, and existing pods' preferred
    (anti-)affinity against the pod. Volcano passes no hardPodAffinityWeight, so existing pods'
    required terms add nothing.
    """
    if not nodes:
        return None
    own = pod_terms(task, incoming=True)
    has_constraints = bool(own.preferred_affinity or own.preferred_anti)
    # Without preferred terms of its own, only nodes that held pods with affinity at open matter.
    names = [n.name for n in view.node_list] if has_constraints else view.affinity_nodes
    topo: dict[str, dict[str, int]] = {}

    def add(term: k8s.AffinityTerm, ns: str, labels: Mapping[str, str], node_labels: Mapping[str, str],
            sign: int) -> None:
        if k8s.term_matches(term, ns, labels) and term.topology_key in node_labels:
            by_value = topo.setdefault(term.topology_key, {})
            value = node_labels[term.topology_key]
            by_value[value] = by_value.get(value, 0) + term.weight * sign

    for name in names:
        node_labels = view.nodes[name].labels
        if not node_labels:
            continue
        for p in view.on(name).values():
            theirs = view.terms(p)
            if not has_constraints and not theirs.has_pod_affinity:
                continue
            for t in own.preferred_affinity:
                add(t, p.namespace, p.labels, node_labels, 1)
            for t in own.preferred_anti:
                add(t, p.namespace, p.labels, node_labels, -1)
            for t in theirs.preferred_affinity:
                add(t, task.namespace, task.labels, node_labels, 1)
            for t in theirs.preferred_anti:
                add(t, task.namespace, task.labels, node_labels, -1)
    if not topo:
        return None
    raw = {n.name: sum(vals.get(n.labels[k], 0) for k, vals in topo.items() if k in n.labels) for n in nodes}
    lo, hi = min(raw.values()), max(raw.values())
    if hi - lo <= 0:
        return {n: 0 for n in raw}
    return {n: int(MAX * ((s - lo) / (hi - lo))) for n, s in raw.items()}


def _round_half_away(x: float) -> int:
    """Go's math.Round."""
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def spread_scores(view: SessionPods, task: TaskInfo, nodes: list[NodeInfo]) -> dict[str, int] | None:
    """PodTopologySpread: fewer matching pods in the node's domains is better.

    A domain's count is weighted by log(number of candidate domains + 2); hostname domains are
    counted on the node itself. Candidate nodes missing a topology key score 0.
    """
    cons = k8s.spread_constraints(task.topology_spread_constraints, task.labels, "ScheduleAnyway")
    if not cons or not view.node_list:
        return None
    ignored = {n.name for n in nodes if not k8s.node_has_topology_keys(n.labels, cons)}
    counts: list[dict[str, int]] = [{} for _ in cons]
    for n in nodes:
        if n.name in ignored:
            continue
        for i, c in enumerate(cons):
            if c.topology_key != k8s.HOSTNAME:
                counts[i].setdefault(n.labels[c.topology_key], 0)
    weights = []
    for i, c in enumerate(cons):
        size = len(nodes) - len(ignored) if c.topology_key == k8s.HOSTNAME else len(counts[i])
        weights.append(math.log(size + 2))
    for node in view.node_list:
        if not k8s.node_has_topology_keys(node.labels, cons):
            continue
        affinity_ok = k8s.required_node_affinity_matches(task.node_selector, task.affinity, node.name, node.labels)
        for i, c in enumerate(cons):
            if not k8s.inclusion_policies_match(c, affinity_ok, node.taints, task.tolerations):
                continue
            value = node.labels[c.topology_key]
            if value in counts[i]:  # only domains of candidate nodes are counted
                counts[i][value] += count_matching(view, node.name, c.selector, task.namespace)
    raw: dict[str, int] = {}
    for n in nodes:
        if n.name in ignored:
            continue
        score = 0.0
        for i, c in enumerate(cons):
            if c.topology_key not in n.labels:
                continue
            if c.topology_key == k8s.HOSTNAME:
                cnt = count_matching(view, n.name, c.selector, task.namespace)
            else:
                cnt = counts[i][n.labels[c.topology_key]]
            score += cnt * weights[i] + (c.max_skew - 1)
        raw[n.name] = _round_half_away(score)
    lo, hi = min(raw.values(), default=0), max(raw.values(), default=0)
    out = {}
    for n in nodes:
        if n.name in ignored:
            out[n.name] = 0
        elif hi == 0:
            out[n.name] = MAX
        else:
            out[n.name] = k8s.go_div(MAX * (hi + lo - raw[n.name]), hi)
    return out


# -- image locality ---------------------------------------------------------------------------------------
def image_locality(view: SessionPods, task: TaskInfo, node: NodeInfo) -> int:
    """Sizes of the pod's images already on the node, scaled by how widely each image is spread."""
    states = view.images.get(node.name, {})
    total_nodes = len(view.node_list)
    images = task.images or [""]  # a pod has at least one container
    total = 0
    for image in images:
        st = states.get(k8s.normalized_image_name(image))
        if st is not None:
            size, num_nodes = st
            total += int(size * (num_nodes / total_nodes))
    hi = MAX_CONTAINER_IMAGE_THRESHOLD * len(images)
    total = min(max(total, MIN_IMAGE_THRESHOLD), hi)
    return k8s.go_div(MAX * (total - MIN_IMAGE_THRESHOLD), hi - MIN_IMAGE_THRESHOLD)


# weight key -> batch scorer (None: PreScore said Skip, the plugin adds nothing)
BATCH_SCORERS: dict[str, Callable[[SessionPods, TaskInfo, list[NodeInfo]], dict[str, int] | None]] = {
    "leastrequested.weight": _per_node(least_allocated),
    "mostrequested.weight": _per_node(most_allocated),
    "balancedresource.weight": balanced_scores,
    "nodeaffinity.weight": node_affinity_scores,
    "podaffinity.weight": pod_affinity_scores,
    "tainttoleration.weight": taint_toleration_scores,
    "podtopologyspread.weight": spread_scores,
}


class NodeOrderPlugin:
    name = PLUGIN_NAME
    reads_arguments = tuple(DEFAULT_WEIGHTS)  # every argument it reads (busched.framework.arguments)
    reads_clock = False
    # the per-node scorers the array kernels refresh a node's row with (busched.fastpath.nodeorder)
    per_node = kernel.PerNode(BATCH_SCORERS, least_allocated, most_allocated, balanced_allocation, image_locality)

    def __init__(self, arguments: Mapping[str, Any] | None = None) -> None:
        self.weights = weights_from(arguments)
        self.view: SessionPods | None = None

    def on_session_open(self, ssn: Session) -> None:
        self.view = session_pods(ssn)
        # each callback carries its vectorised twin (busched.fastpath.nodeorder)
        # (and answers row by row for a run of one template where it can: busched.fastpath.batch)
        ssn.add_fn(points.NODE_ORDER, self.name, self.node_order,
                   twin=declare(lambda t, arrays, rows: kernel.node_order(self, t, arrays, rows),
                                lambda t, arrays: kernel.node_order_local(self, t, arrays)))
        ssn.add_fn(points.BATCH_NODE_ORDER, self.name, self.batch_node_order,
                   twin=declare(lambda t, arrays, rows, nodes: kernel.batch_node_order(self, t, arrays, rows, nodes),
                                lambda t, arrays: kernel.batch_node_order_local(self, t, arrays)))

    def node_order(self, task: TaskInfo, node: NodeInfo) -> float:
        w = self.weights["imagelocality.weight"]
        assert self.view is not None, "nodeorder: session not open"
        return float(image_locality(self.view, task, node) * w) if w else 0.0

    def batch_node_order(self, task: TaskInfo, nodes: list[NodeInfo]) -> dict[str, float]:
        out: dict[str, float] = {}
        view = self.view
        assert view is not None, "nodeorder: session not open"
        for key, scorer in BATCH_SCORERS.items():
            w = self.weights[key]
            if not w or not nodes:
                continue
            scores = scorer(view, task, nodes)
            if scores is None:
                continue
            for name, s in scores.items():
                out[name] = out.get(name, 0.0) + float(s * w)
        return out
