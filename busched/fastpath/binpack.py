"""binpack's score for many nodes at once.

Replaces `busched.plugins.binpack.binpack_score` called node by node: the same
resources in the same order, the same float operations on the same values
(the nodes' own ``allocatable`` and ``used``, mirrored in `NodeArrays`), so
every score is bit-identical.  `binpack_scores` keeps the vector per request
shape and refreshes changed nodes with the per-node function itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from busched.api.node import NodeInfo
from busched.api.resource import CPU, MEMORY, MIN_RESOURCE, Resource
from busched.api.task import TaskInfo
from busched.fastpath import rowcache
from busched.fastpath.fit import NodeArrays
from busched.fastpath.rowlocal import Local

__all__ = ["binpack_vector", "binpack_scores", "requested", "binpack_local", "binpack_row"]


def binpack_vector(task: TaskInfo, arrays: NodeArrays, rows: np.ndarray, weights: Any,
                   max_node_score: int) -> np.ndarray:
    """binpack_score(task, node) for the nodes at ``rows``."""
    k = len(rows)
    score = np.zeros(k)
    over = np.zeros(k, dtype=bool)
    weight_sum = 0
    req = task.resreq
    for rn in req.names():
        request = req.get(rn)
        if request == 0:
            continue
        rw = weights.resources.get(rn)
        if rw is None:
            continue
        weight_sum += rw
        if rw == 0:
            continue  # resource_binpack_score gives 0.0: the sum is unchanged
        capacity = arrays.column(arrays.allocatable, rn, rows)
        used = arrays.column(arrays.used, rn, rows)
        final = request + used
        has = capacity != 0
        with np.errstate(divide="ignore", invalid="ignore"):
            s = np.where(has, final * rw / np.where(has, capacity, 1.0), 0.0)
        over |= has & (final > capacity)
        score = score + s
    if weight_sum > 0:
        score = score / weight_sum
    score = score * float(max_node_score * weights.weight)
    score[over] = 0.0
    return score


def requested(req: Resource) -> tuple:
    """``tuple((rn, req.get(rn)) for rn in req.names())``, written out (asked for every task)."""
    out = []
    if req.cpu >= MIN_RESOURCE:
        out.append((CPU, req.cpu))
    if req.memory >= MIN_RESOURCE:
        out.append((MEMORY, req.memory))
    if req.scalars:
        for rn, v in req.scalars.items():
            if v >= MIN_RESOURCE:
                out.append((rn, req.get(rn)))
    return tuple(out)


def binpack_scores(task: TaskInfo, arrays: NodeArrays, rows: np.ndarray, weights: Any, max_node_score: int,
                   per_node: Callable[[TaskInfo, NodeInfo], float]) -> np.ndarray:
    """`binpack_vector` for ``rows``, from the vector kept for the task's request shape."""
    req = task.resreq
    key = ("binpack", id(weights), requested(req))
    nodes = arrays.nodes
    vec = rowcache.cached(arrays.cache, key, (arrays.log,), len(nodes),
                          lambda: binpack_vector(task, arrays, arrays.all_rows, weights, max_node_score),
                          _row(task, nodes, weights, max_node_score, per_node))
    return vec if rows is arrays.all_rows else vec[rows]


def binpack_local(task: TaskInfo, arrays: NodeArrays, per_node: Callable[[TaskInfo, NodeInfo], float],
                  weights: Any = None, max_node_score: int = 0) -> Local:
    """`binpack_scores` row by row (`busched.fastpath.batch`): a node's score follows its accounting."""
    return Local((arrays.log,), _row(task, arrays.nodes, weights, max_node_score, per_node))


def _row(task: TaskInfo, nodes: list[NodeInfo], weights: Any, max_node_score: int,
         per_node: Callable[[TaskInfo, NodeInfo], float]) -> Callable[[int], float]:
    """One row's score: `binpack_row` (the per-node function with the task's part read once), or the
    per-node function itself when no weights are given."""
    if weights is None:
        return lambda r: per_node(task, nodes[r])
    return binpack_row(task, nodes, weights, max_node_score)


def binpack_row(task: TaskInfo, nodes: list[NodeInfo], weights: Any, max_node_score: int) -> Callable[[int], float]:
    """`busched.plugins.binpack.binpack_score` for row ``r``: the task's requested resources and their
    weights listed once, then per row the same float operations on the same values in the same order
    (resource_binpack_score written out; its None ends the score at 0.0, and the weights summed are
    those of the resources before it, which no longer matter)."""
    wanted = []
    weight_sum = 0
    for rn, request in requested(task.resreq):
        if request == 0:
            continue
        rw = weights.resources.get(rn)
        if rw is None:
            continue
        wanted.append((rn, request, rw))
        weight_sum += rw
    factor = float(max_node_score * weights.weight)
    if [rn for rn, _, _ in wanted] == [CPU, MEMORY]:
        (_, rc, wc), (_, rm, wm) = wanted
        return _cpu_memory_row(nodes, rc, wc, rm, wm, weight_sum, factor)

    def one(r: int) -> float:
        n = nodes[r]
        alloc, used = n.allocatable, n.used
        score = 0.0
        for rn, request, rw in wanted:
            capacity = alloc.get(rn)
            if capacity == 0 or rw == 0:
                score += 0.0
                continue
            final = request + used.get(rn)
            if final > capacity:
                return 0.0
            score += final * rw / capacity
        if weight_sum > 0:
            score /= weight_sum
        return score * factor

    return one


def _cpu_memory_row(nodes: list[NodeInfo], rc: float, wc: Any, rm: float, wm: Any, weight_sum: Any,
                    factor: float) -> Callable[[int], float]:
    """`binpack_row`'s row for a request of cpu and memory only (most tasks): the loop over the two
    written out, the node's values read as fields (`Resource.get` gives the same): the same float
    operations in the same order."""

    def one(r: int) -> float:
        n = nodes[r]
        alloc, used = n.allocatable, n.used
        score = 0.0
        capacity = alloc.cpu
        if capacity == 0 or wc == 0:
            score += 0.0
        else:
            final = rc + used.cpu
            if final > capacity:
                return 0.0
            score += final * wc / capacity
        capacity = alloc.memory
        if capacity == 0 or wm == 0:
            score += 0.0
        else:
            final = rm + used.memory
            if final > capacity:
                return 0.0
            score += final * wm / capacity
        if weight_sum > 0:
            score /= weight_sum
        return score * factor

    return one
