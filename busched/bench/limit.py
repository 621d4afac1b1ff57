"""The kernel-only limit beside a cycle's figures (`busched.fastpath.limit`).

`kernel_figures` takes a finished session, rebuilds the cluster as it stood before the cycle
(each node's usage less the tasks the cycle bound to it) and the binds in the order they
were decided, times the bare numpy loop over them, and gives ``kernel_tasks_per_second``
and ``kernel_ratio`` (the scheduler's rate over the loop's: 1.0 would mean the session,
plugins and statements cost nothing), with ``kernel_agrees`` (binds whose node is among the
loop's best: the loop did the same work).  Best of three runs of the loop, since it is short
and the machine is shared.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from busched.api.resource import PODS
from busched.fastpath.limit import KernelInput, place_all
from busched.framework.nodeselect import num_feasible_nodes_to_find
from busched.framework.session import Session

__all__ = ["kernel_input", "kernel_figures"]


def kernel_input(ssn: Session) -> KernelInput:
    """The loop's input for the binds ``ssn`` decided, the cluster as it was before them."""
    nodes = ssn.node_list
    row = {n.name: i for i, n in enumerate(nodes)}
    tasks = {t.key: t for job in ssn.jobs.values() for t in job.tasks.values()}
    alloc = np.array([(n.allocatable.cpu, n.allocatable.memory, n.allocatable.get(PODS)) for n in nodes],
                     dtype=float).reshape(-1, 3)
    used = np.array([(n.used.cpu, n.used.memory, len(n.tasks)) for n in nodes], dtype=float).reshape(-1, 3)
    binds = [d for d in ssn.decisions if d.kind == "bind" and d.task in tasks and d.node in row]
    requests = np.array([(tasks[d.task].resreq.cpu, tasks[d.task].resreq.memory) for d in binds],
                        dtype=float).reshape(-1, 2)
    chosen = np.array([row[d.node] for d in binds], dtype=np.int64)
    for (cpu, mem), r in zip(requests.tolist(), chosen.tolist()):
        used[r] -= (cpu, mem, 1)
    return KernelInput(alloc=alloc, used=used, requests=requests, chosen=chosen,
                       to_find=num_feasible_nodes_to_find(len(nodes), ssn.config.node_search))


def kernel_figures(ssn: Session, cycle_seconds: float, runs: int = 3) -> dict[str, Any]:
    inp = kernel_input(ssn)
    placed = len(inp.chosen)
    best = float("inf")
    agrees = 0
    for _ in range(runs):
        t0 = time.perf_counter()
        agrees = place_all(inp)
        best = min(best, time.perf_counter() - t0)
    rate = placed / best if best > 0 and placed else 0.0
    ours = placed / cycle_seconds if cycle_seconds > 0 else 0.0
    return {
        "kernel_ms": round(best * 1000, 3),
        "kernel_tasks_per_second": round(rate, 1),
        "kernel_ratio": round(ours / rate, 3) if rate else 0.0,
        "kernel_agrees": agrees,
    }
