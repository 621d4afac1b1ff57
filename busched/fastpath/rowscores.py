"""One node's node-local score for a template, with what the task contributes read once.

The kept vectors of a template (`busched.fastpath.batch`, `busched.fastpath.rowcache`) refresh the
row of the node a task was just placed on with the plugins' own per-node scorers: nodeorder's
least / most requested and balanced allocation (three calls, each asking the pod view for the
node's sums and the task for its requests, through ``_resource_pairs``' general walk) and
binpack's score (which lists the task's requested resources and their weights on every call).
For a run of one template the task's part is the same on every row.  The functions here take it
once and then compute, row by row, exactly what those scorers compute: the same integer and
float operations on the same values in the same order.  The plugins' scorers stay the reference
(the per-task paths with the kernels off use them); tests/fastpath/test_rowscores.py checks every
row equal on random clusters, after placements.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from busched.api import k8s
from busched.api.node import NodeInfo
from busched.api.task import TaskInfo

__all__ = ["resource_row"]

MAX = k8s.MAX_NODE_SCORE


def resource_row(view: Any, nodes: Sequence[NodeInfo], task: TaskInfo, wl: int, wm: int,
                 wb: int) -> Callable[[int], int] | None:
    """``least_allocated * wl + most_allocated * wm + balanced_allocation * wb`` for row ``r`` (the
    plugin's weighted sum), for a task asking for cpu and memory only; None for any other task (the
    scorers' general walk over extended resources applies: the caller keeps the plugin's)."""
    pc, pm, scalars = k8s.pod_requests(task)
    if scalars:
        return None
    npc, npm = k8s.non_zero_requests(task)
    requested = view.requested
    go_div = k8s.go_div

    def one(r: int) -> int:
        n = nodes[r]
        cpu, mem, nz_cpu, nz_mem, _ = requested(n.name)
        a = n.allocatable
        ac, am = int(a.cpu), int(a.memory)
        out = 0
        if wl or wm:  # both on the non-zero requests, each resource the node has
            least = most = weight = 0
            if ac:
                lc, mc = _least_most(nz_cpu + npc, ac)
                least, most, weight = least + lc, most + mc, weight + 1
            if am:
                lm, mm = _least_most(nz_mem + npm, am)
                least, most, weight = least + lm, most + mm, weight + 1
            if wl and weight:
                out += (least // (weight * 50) if least >= 0 else go_div(least, weight * 50)) * wl
            if wm and weight:
                out += (most // weight if most >= 0 else go_div(most, weight)) * wm
        if wb:  # on the requests as they are
            if ac and am:
                f0, f1 = min((cpu + pc) / ac, 1.0), min((mem + pm) / am, 1.0)
                std = abs((f0 - f1) / 2)
            else:
                std = 0.0  # one fraction or none
            out += int((1 - std) * MAX) * wb
        return out

    if wl and not wm and wb:
        return _least_balanced(requested, nodes, pc, pm, npc, npm, wl, wb, one)
    return one


def _least_most(req: int, cap: int) -> tuple[int, int]:
    """One resource's least- and most-requested parts (before the weighting) for ``req`` of ``cap``.
    Go's truncating division is Python's floor division on a non-negative numerator and a positive
    divisor, which requests and allocatable are; `k8s.go_div` itself otherwise."""
    if cap > 0 and req >= 0:
        return (0 if req > cap else (cap - req) * MAX // cap * 50), min(req, cap) * MAX // cap
    go_div = k8s.go_div
    return (0 if req > cap else go_div((cap - req) * MAX, cap) * 50), go_div(min(req, cap) * MAX, cap)


def _least_balanced(requested: Callable[[str], Any], nodes: Sequence[NodeInfo], pc: int, pm: int, npc: int,
                    npm: int, wl: int, wb: int, general: Callable[[int], int]) -> Callable[[int], int]:
    """`resource_row`'s row for the default weights (least requested and balanced allocation on,
    most requested off), its branches taken once: the same integer and float operations.  A node
    with both cpu and memory allocatable (every real node) takes the first path; anything else
    (a zero or negative allocatable, a negative request) the general row, ``general``."""

    def one(r: int) -> int:
        n = nodes[r]
        cpu, mem, nz_cpu, nz_mem, _ = requested(n.name)
        a = n.allocatable
        ac, am = int(a.cpu), int(a.memory)
        rc, rm = nz_cpu + npc, nz_mem + npm
        if ac > 0 and am > 0 and rc >= 0 and rm >= 0:
            # _least_most's first branch for each, then the least part over a weight of 2
            least = (0 if rc > ac else (ac - rc) * MAX // ac * 50) + (0 if rm > am else (am - rm) * MAX // am * 50)
            f0, f1 = (cpu + pc) / ac, (mem + pm) / am
            if f0 > 1.0:
                f0 = 1.0
            if f1 > 1.0:
                f1 = 1.0
            return least // 100 * wl + int((1 - abs((f0 - f1) / 2)) * MAX) * wb
        return general(r)

    return one
