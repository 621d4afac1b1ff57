"""nodeorder's scores for many nodes at once.

Replaces, node by node, `busched.plugins.nodeorder`'s ``least_allocated``,
``most_allocated``, ``balanced_allocation``, the raw count of
``taint_toleration_scores`` and ``image_locality``, with the same integer and
float arithmetic over `PodViewArrays` (the pod view's per-node sums).  Scorers
with no twin here (node affinity preferences, inter-pod affinity, topology
spread) still run their dict form over the candidate nodes, and their result
is read back into the array, so `batch_node_order` gives exactly what the
plugin's ``batch_node_order`` gives, as floats in node order.

Per-session caches hold what depends only on a node's fixed facts (taints,
images) and a task's spec (tolerations, images).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

from busched.api import k8s
from busched.api.node import NodeInfo
from busched.api.resource import GPU
from busched.api.task import TaskInfo
from busched.fastpath import rowcache, rowscores
from busched.fastpath.fit import NodeArrays
from busched.fastpath.podview import PodViewArrays, pod_view_arrays
from busched.fastpath.rowlocal import Local

__all__ = ["view_arrays", "least_allocated", "most_allocated", "balanced_allocation", "taint_raw",
           "image_locality", "batch_node_order", "node_order", "PerNode", "node_order_local",
           "batch_node_order_local"]

MAX = 100
_taints = operator.attrgetter("taints")


class PerNode(NamedTuple):
    """The plugin's own per-node scorers, which the kernels use to refresh one node's row (and
    `batch_node_order` for the scorers it does not vectorise); the plugin hands them over."""

    batch_scorers: Mapping[str, Callable[..., Any]]  # weight name -> scorer over the candidate nodes
    least: Callable[..., int]
    most: Callable[..., int]
    balanced: Callable[..., int]
    image_locality: Callable[..., int]


def view_arrays(view: Any, arrays: NodeArrays) -> PodViewArrays | None:
    return pod_view_arrays(view, arrays, k8s.pod_requests, k8s.non_zero_requests)


def _floor_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Go's integer division for non-negative operands (b > 0 where it matters)."""
    return a // np.where(b == 0, 1, b)


def least_allocated(pv: PodViewArrays, task: TaskInfo, rows: np.ndarray) -> np.ndarray:
    """nodeorder.least_allocated: free share of cpu and memory over non-zero requests, 50 each."""
    pc, pm = k8s.non_zero_requests(task)
    total = np.zeros(len(rows), dtype=np.int64)
    weight = np.zeros(len(rows), dtype=np.int64)
    for req, alloc in ((pv.nz_cpu[rows] + pc, pv.alloc_cpu[rows]), (pv.nz_mem[rows] + pm, pv.alloc_mem[rows])):
        has = alloc != 0
        part = np.where(req > alloc, 0, _floor_div((alloc - req) * MAX, alloc) * 50)
        total += np.where(has, part, 0)
        weight += np.where(has, 50, 0)
    return np.where(weight != 0, _floor_div(total, weight), 0)


def most_allocated(pv: PodViewArrays, task: TaskInfo, rows: np.ndarray) -> np.ndarray:
    """nodeorder.most_allocated: used share of cpu and memory (capped), weight 1 each."""
    pc, pm = k8s.non_zero_requests(task)
    total = np.zeros(len(rows), dtype=np.int64)
    weight = np.zeros(len(rows), dtype=np.int64)
    for req, alloc in ((pv.nz_cpu[rows] + pc, pv.alloc_cpu[rows]), (pv.nz_mem[rows] + pm, pv.alloc_mem[rows])):
        has = alloc != 0
        total += np.where(has, _floor_div(np.minimum(req, alloc) * MAX, alloc), 0)
        weight += has.astype(np.int64)
    return np.where(weight != 0, _floor_div(total, weight), 0)


def balanced_allocation(pv: PodViewArrays, task: TaskInfo, arrays: NodeArrays, rows: np.ndarray) -> np.ndarray:
    """nodeorder.balanced_allocation: (1 - std of the used fractions of cpu, memory, gpu) * 100."""
    pc, pm, pscalars = k8s.pod_requests(task)
    k = len(rows)
    pairs = [(pv.cpu[rows] + pc, pv.alloc_cpu[rows]), (pv.mem[rows] + pm, pv.alloc_mem[rows])]
    want = pscalars.get(GPU, 0)
    if want != 0:
        raw = arrays.column(arrays.allocatable, GPU, rows)
        gpu_alloc = -((-np.trunc(raw).astype(np.int64)) // 1000)
        pairs.append((pv.scalar(GPU)[rows] + want, gpu_alloc))
    fracs = []
    included = []
    for req, alloc in pairs:
        has = alloc != 0
        with np.errstate(divide="ignore", invalid="ignore"):
            f = np.minimum(req / np.where(has, alloc, 1), 1.0)
        fracs.append(f)
        included.append(has)
    n = sum(h.astype(np.int64) for h in included)
    std = np.zeros(k)
    # exactly two fractions: |(a - b) / 2| over the two included ones, in resource order
    if len(pairs) == 2:
        two = included[0] & included[1]
        std = np.where(two, np.abs((fracs[0] - fracs[1]) / 2), 0.0)
    else:
        c, m, g = included
        fc, fm, fg = fracs
        first = np.where(c, fc, fm)
        second = np.where(c & m, fm, fg)
        std = np.where(n == 2, np.abs((first - second) / 2), 0.0)
        three = n == 3
        if three.any():
            mean = (fc + fm + fg) / 3
            var = ((fc - mean) ** 2 + (fm - mean) ** 2) + (fg - mean) ** 2
            std = np.where(three, np.sqrt(var / 3), std)
    return np.trunc((1 - std) * MAX).astype(np.int64)


def _key(*parts: Any) -> str:
    return repr(parts)


def taint_raw(plugin: Any, task: TaskInfo, arrays: NodeArrays) -> np.ndarray:
    """taint_toleration_scores' raw counts for every node: PreferNoSchedule taints the task does not tolerate."""
    tolerations = [t for t in task.tolerations if (t.get("effect") or "") in ("", k8s.PREFER_NO_SCHEDULE)] \
        if task.tolerations else ()
    key = ("taints", _key(tolerations) if tolerations else "")
    # a node's taints are its spec's: the counts are carried from session to session (changed rows again)
    def row(n: NodeInfo) -> int:
        return sum(1 for taint in n.taints if taint.get("effect") == k8s.PREFER_NO_SCHEDULE
                   and not any(k8s.tolerates(t, taint) for t in tolerations))

    def build(nodes: list[NodeInfo]) -> np.ndarray:
        """``row`` for the tainted nodes only: an untainted node counts none (in C up to them)."""
        out = np.zeros(len(nodes), dtype=np.int64)
        for i in itertools.compress(range(len(nodes)), map(_taints, nodes)):
            out[i] = row(nodes[i])
        return out

    return arrays.carried(key, row, np.int64, build)


def _normalize_reverse(raw: np.ndarray, anywhere: bool = True) -> np.ndarray:
    """k8s.default_normalize(raw, reverse=True) over the candidate nodes (``anywhere`` False: the
    counts are zero on every node)."""
    top = max(0, int(raw.max())) if len(raw) and anywhere else 0
    if top == 0:
        return np.full(len(raw), MAX, dtype=np.int64)
    return MAX - (MAX * raw) // top


def image_locality(plugin: Any, task: TaskInfo, arrays: NodeArrays) -> np.ndarray:
    """nodeorder.image_locality for every node (it depends on the task's images only)."""
    per_node = plugin.per_node.image_locality
    key = ("images", tuple(task.images))
    out = arrays.cache.get(key)
    if out is None:
        view = plugin.view
        if not any(view.images.values()):
            one = per_node(view, task, arrays.nodes[0]) if arrays.nodes else 0
            out = np.full(len(arrays.nodes), one, dtype=np.int64)
        else:
            out = np.fromiter((per_node(view, task, n) for n in arrays.nodes), dtype=np.int64,
                              count=len(arrays.nodes))
        arrays.cache[key] = out
    return out


def node_order(plugin: Any, task: TaskInfo, arrays: NodeArrays, rows: np.ndarray) -> np.ndarray:
    """The twin of NodeOrderPlugin.node_order (image locality times its weight)."""
    w = plugin.weights["imagelocality.weight"]
    if not w:
        return np.zeros(len(rows))
    # a node's image score depends on fixed facts only: the weighted vector is kept per task images
    key = ("images-weighted", tuple(task.images), w)
    vec = arrays.cache.get(key)
    if vec is None:
        vec = (image_locality(plugin, task, arrays) * w).astype(float)
        arrays.cache[key] = vec
    return vec.copy() if rows is arrays.all_rows else vec[rows]


_OWN = ("leastrequested.weight", "mostrequested.weight", "balancedresource.weight")


def _others(plugin: Any, arrays: NodeArrays) -> list[tuple[str, int, Callable[..., Any]]]:
    """The plugin's weighted scorers other than the node-local three, in its order (weights are
    fixed for a plugin: listed once per session)."""
    key = ("nodeorder-others", id(plugin))
    got = arrays.cache.get(key)
    if got is None or got[0] is not plugin:
        w = plugin.weights
        got = arrays.cache[key] = (plugin, [(name, w[name], scorer) for name, scorer in
                                            plugin.per_node.batch_scorers.items() if w[name] and name not in _OWN])
    return got[1]


def _local_part(plugin: Any, task: TaskInfo, arrays: NodeArrays,
                pv: PodViewArrays) -> tuple[Any, Callable[[], np.ndarray], Callable[[int], int]] | None:
    """The node-local scorers' weighted integer sum (least / most requested, balanced) for the task's
    shape: its kept vector's key, the whole vector, and one node's value (the plugin's own scorers,
    the reference).  None when their weights are all zero for the task."""
    scorers = plugin.per_node
    per_node_balanced, per_node_least, per_node_most = scorers.balanced, scorers.least, scorers.most
    w = plugin.weights
    wl, wm, wb = w["leastrequested.weight"], w["mostrequested.weight"], w["balancedresource.weight"]
    cpu, mem, scalars = k8s.pod_requests(task)
    if not cpu and not mem and not scalars.get(GPU):
        wb = 0  # a pod that requests nothing is not balanced (PreScore Skip)
    if not (wl or wm or wb):
        return None
    gpu = scalars.get(GPU, 0)
    nz = (cpu or k8s.DEFAULT_MILLI_CPU, mem or k8s.DEFAULT_MEMORY)  # k8s.non_zero_requests(task)
    view = plugin.view
    all_nodes = arrays.nodes

    def full() -> np.ndarray:
        vec = np.zeros(len(all_nodes), dtype=np.int64)
        if wl:
            vec += least_allocated(pv, task, arrays.all_rows) * wl
        if wm:
            vec += most_allocated(pv, task, arrays.all_rows) * wm
        if wb:
            vec += balanced_allocation(pv, task, arrays, arrays.all_rows) * wb
        return vec

    def one(r: int) -> int:
        n = all_nodes[r]
        return ((per_node_least(view, task, n) * wl if wl else 0) + (per_node_most(view, task, n) * wm if wm else 0)
                + (per_node_balanced(view, task, n) * wb if wb else 0))

    # the same sum with the task's part read once (busched.fastpath.rowscores; the scorers above are its reference)
    fast = rowscores.resource_row(view, all_nodes, task, wl, wm, wb)

    return ("nodeorder", id(plugin), nz, (cpu, mem, gpu) if wb else None, wl, wm, wb), full, fast or one


def _skips(name: str, task: TaskInfo, view: Any) -> bool:
    """Whether the scorer ``name`` (one normalised over the candidate nodes) skips the task (its
    PreScore gives Skip: it adds nothing)."""
    if name == "nodeaffinity.weight":
        return not task.affinity or k8s.preferred_node_affinity(task.affinity) is None
    if name == "podtopologyspread.weight":
        return (not task.topology_spread_constraints
                or not k8s.spread_constraints(task.topology_spread_constraints, task.labels, "ScheduleAnyway"))
    # no preferred terms of its own and no pod with affinity anywhere: Skip
    return name == "podaffinity.weight" and not task.affinity and not view.affinity_nodes


def batch_node_order(plugin: Any, task: TaskInfo, arrays: NodeArrays, rows: np.ndarray,
                     nodes: list[Any]) -> np.ndarray | None:
    """The twin of NodeOrderPlugin.batch_node_order: the weighted sum of its scorers, per node.

    Every scorer gives integers, so the plugin's float sum is exact in any order: the scorers that
    depend on one node alone (least / most requested, balanced) are summed into one integer vector
    kept for the task's shape (`rowcache`, refreshed with the plugin's own per-node scorers); the
    ones normalised over the candidate nodes are added per call.
    """
    k = len(rows)
    if not k:
        return np.zeros(0)
    pv = view_arrays(plugin.view, arrays)
    if pv is None:
        return None
    total: np.ndarray | None = None
    local = _local_part(plugin, task, arrays, pv)
    if local is not None:
        key, full, one = local
        vec = rowcache.cached(arrays.cache, key, (pv.log,), len(arrays.nodes), full, one)
        # no copy: every step below makes a new array, the kept vector is never written here
        total = vec if rows is arrays.all_rows else vec[rows]
    for name, wt, scorer in _others(plugin, arrays):
        part: np.ndarray | None
        if name == "tainttoleration.weight":
            raw = taint_raw(plugin, task, arrays)
            anywhere = arrays.cache.get(("taints-any", id(raw)))
            if anywhere is None:
                anywhere = arrays.cache[("taints-any", id(raw))] = bool(raw.any())
            if not anywhere:
                # no counted taint anywhere: every candidate scores MAX, as _normalize_reverse gives
                total = np.full(k, MAX * wt, dtype=np.int64) if total is None else total + MAX * wt
                continue
            part = _normalize_reverse(raw[rows])
        elif _skips(name, task, plugin.view):
            part = None
        else:
            got = scorer(plugin.view, task, nodes)
            part = None if got is None else np.array([got.get(n.name, 0) for n in nodes], dtype=np.int64)
        if part is not None:
            total = part * wt if total is None else total + part * wt
    return total.astype(float) if total is not None else np.zeros(k)


def node_order_local(plugin: Any, task: TaskInfo, arrays: NodeArrays) -> Local:
    """`node_order` row by row (`busched.fastpath.batch`): image locality reads fixed facts only."""
    return Local((), None)


def batch_node_order_local(plugin: Any, task: TaskInfo, arrays: NodeArrays) -> Local | None:
    """`batch_node_order` row by row (`busched.fastpath.batch`): when every scorer that applies to
    the task is node-local or the same on every node, a node's score follows its pods.  None when a
    scorer normalised over the candidate nodes applies."""
    pv = view_arrays(plugin.view, arrays)
    if pv is None:
        return None
    local = _local_part(plugin, task, arrays, pv)
    same = 0  # what the scorers that are the same on every node add
    view = plugin.view
    for name, wt, _ in _others(plugin, arrays):
        if name == "tainttoleration.weight":
            raw = taint_raw(plugin, task, arrays)
            anywhere = arrays.cache.get(("taints-any", id(raw)))
            if anywhere is None:
                anywhere = arrays.cache[("taints-any", id(raw))] = bool(raw.any())
            if anywhere:
                return None
            same += MAX * wt
        elif not _skips(name, task, view):
            return None
    node_one = local[2] if local is not None else None

    def one(r: int) -> float:
        return float((node_one(r) if node_one is not None else 0) + same)

    # a pod with affinity placed anywhere brings the pod-affinity scorer into play
    return Local((pv.log,), one, lambda: not view.affinity_nodes)
