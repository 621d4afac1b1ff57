"""The limit figure: what the array kernels alone take to compute a cycle's placements.

`busched bench throughput` (and gang, mixed) report, beside the scheduler's own rate, how
fast a bare numpy loop computes the same placements with no session, no plugins, no
statements and no event handlers: for each placed task, in the order the cycle placed it,
the resource fit on every node's free resources, the sampled walk from the rotating start
until enough nodes fit (Volcano's feasible-node sampling), the default node-order scores
over those nodes (least requested and balanced allocation, weight 1 each, and binpack with
cpu and memory at weight 1; the constant scores of taints and image locality are left out),
their best, and the chosen node's accounting.  The fit vector is kept while the tasks keep one
shape (only the chosen node's entry changes), and the walk is the scheduler's own
(`select.feasible_scan_array`: a window first).  That is the work any scheduler that places tasks one by one must
do, written as cheaply as numpy allows; the ratio of the
scheduler's rate to it says how much of the cycle is everything else.

The loop places each task on the node the cycle chose (so both follow the same state) and
counts how often that node is among the kernel's best (``agrees``): a check that the loop
does the same work, not a second scheduler.  Nothing here reads a clock: the caller
(`busched.bench`) times `place_all`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from busched.fastpath import select

__all__ = ["KernelInput", "place_all"]

MAX = 100


@dataclass
class KernelInput:
    """A cluster as arrays: per node (rows in the session's node order) allocatable and used
    cpu (milli), memory (bytes) and pods, before the cycle; per placed task its cpu and memory
    request and the row the cycle chose; the sampling limit and the walk's first start."""

    alloc: np.ndarray  # (nodes, 3) float: cpu, memory, pods
    used: np.ndarray  # (nodes, 3) float
    requests: np.ndarray  # (tasks, 2) float: cpu, memory
    chosen: np.ndarray  # (tasks,) int: the row each task went to
    to_find: int
    start: int = 0


def place_all(inp: KernelInput) -> int:
    """Run the loop over every task; returns how many chosen nodes were among the kernel's best."""
    alloc = inp.alloc
    used = inp.used.copy()
    n = len(alloc)
    a_cpu, a_mem, a_pods = alloc[:, 0], alloc[:, 1], alloc[:, 2]
    u_cpu, u_mem, u_pods = used[:, 0], used[:, 1], used[:, 2]
    has_cpu, has_mem = a_cpu != 0, a_mem != 0
    safe_cpu, safe_mem = np.where(has_cpu, a_cpu, 1.0), np.where(has_mem, a_mem, 1.0)
    start, to_find = inp.start, min(inp.to_find, n)
    agrees = 0
    shape = None
    ok = np.zeros(n, dtype=bool)
    for (rc, rm), row in zip(inp.requests.tolist(), inp.chosen.tolist()):
        if (rc, rm) != shape:  # the fit of every node, kept while the tasks keep one shape
            shape = (rc, rm)
            ok = (u_cpu + rc <= a_cpu) & (u_mem + rm <= a_mem) & (u_pods + 1 <= a_pods)
        # the walk from ``start``, wrapping, until ``to_find`` nodes fit: the scheduler's own scan
        rows, processed, _ = select.feasible_scan_array(ok, start, to_find, failures=False)
        if to_find < n:
            start = (start + processed) % n
        if len(rows):
            fc = (u_cpu[rows] + rc) / safe_cpu[rows]
            fm = (u_mem[rows] + rm) / safe_mem[rows]
            ac, am = a_cpu[rows], a_mem[rows]
            least = (np.floor((ac - u_cpu[rows] - rc) * MAX / safe_cpu[rows]) * 50
                     + np.floor((am - u_mem[rows] - rm) * MAX / safe_mem[rows]) * 50) // 100
            balanced = np.trunc((1 - np.abs(np.minimum(fc, 1.0) - np.minimum(fm, 1.0)) / 2) * MAX)
            binpack = (fc + fm) / 2 * MAX
            total = least + balanced + binpack
            best = total.max()
            if row in rows[total == best].tolist():
                agrees += 1
        u_cpu[row] += rc
        u_mem[row] += rm
        u_pods[row] += 1
        ok[row] = u_cpu[row] + rc <= a_cpu[row] and u_mem[row] + rm <= a_mem[row] and u_pods[row] + 1 <= a_pods[row]
    return agrees
