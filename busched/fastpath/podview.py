"""The predicates plugin's pod view (`SessionPods`) as per-node integer arrays.

`SessionPods.requested(node)` sums the requests of the pods on one node by a
loop over them; `len(view.on(node))` counts them.  `PodViewArrays` keeps the
same sums for every node at once (int64, exact), built on first use and kept
current as the view tells it of each pod added or removed.  Rows follow the
session's `NodeArrays`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from busched.api import k8s
from busched.fastpath.fit import NodeArrays

__all__ = ["PodViewArrays", "pod_view_arrays"]


# a node's allocatable, row by row (`NodeArrays.carried`) and a column at a time (all mapped in C)
def _max_tasks(nd: Any) -> Any:
    return nd.allocatable.max_task_num


def _alloc_cpu(nd: Any) -> int:
    return int(nd.allocatable.cpu)


def _alloc_mem(nd: Any) -> int:
    return int(nd.allocatable.memory)


_allocatable = operator.attrgetter("allocatable")


def _column(name: str, to_int: bool) -> Callable[[list[Any]], np.ndarray]:
    get = operator.attrgetter(name)

    def build(nodes: list[Any]) -> np.ndarray:
        values = map(get, map(_allocatable, nodes))
        return np.fromiter(map(int, values) if to_int else values, dtype=np.int64, count=len(nodes))
    return build


class PodViewArrays:
    def __init__(self, view: Any, arrays: NodeArrays, pod_requests: Any, non_zero_requests: Any) -> None:
        self.view = view
        self.arrays = arrays
        self.pod_requests = pod_requests
        self.non_zero_requests = non_zero_requests
        # the view's part of a pod added is this view's own (`pod_added`) when these are k8s's functions
        self.k8s_parts = pod_requests is k8s.pod_requests and non_zero_requests is k8s.non_zero_requests
        n = len(arrays.nodes)
        self.count = np.zeros(n, dtype=np.int64)
        self.cpu = np.zeros(n, dtype=np.int64)
        self.mem = np.zeros(n, dtype=np.int64)
        self.nz_cpu = np.zeros(n, dtype=np.int64)
        self.nz_mem = np.zeros(n, dtype=np.int64)
        self.scalars: dict[str, np.ndarray] = {}
        self.log: list[int] = []  # rows whose pods changed, in order (busched.fastpath.rowcache)
        self._contrib: dict[str, tuple[int, int, int, int, dict[str, int]]] = {}
        # a node's allocatable is its spec's: carried from session to session (changed rows again)
        self.max_tasks = arrays.carried("podview.max_tasks", _max_tasks, np.int64, _column("max_task_num", False))
        self.alloc_cpu = arrays.carried("podview.alloc_cpu", _alloc_cpu, np.int64, _column("cpu", True))
        self.alloc_mem = arrays.carried("podview.alloc_mem", _alloc_mem, np.int64, _column("memory", True))
        # the view keeps its nodes' sums (busched.plugins.predicates: SessionPods.pod_columns) and gives
        # them whole: a pod removed later that was not added here is taken off by its own requests
        self.count, self.cpu, self.mem, self.nz_cpu, self.nz_mem, self.scalars = view.pod_columns()
        view.listeners.append(self)

    def _add(self, i: int, task: Any, part: tuple[int, int, int, int, dict[str, int]] | None = None) -> None:
        if part is None or not self.k8s_parts:
            c, m, sc = self.pod_requests(task)
            nc, nm = self.non_zero_requests(task)
            part = (c, m, nc, nm, sc)
        else:
            c, m, nc, nm, sc = part
        self._contrib[task.uid] = part
        self.count[i] += 1
        self.cpu[i] += c
        self.mem[i] += m
        self.nz_cpu[i] += nc
        self.nz_mem[i] += nm
        for k, v in sc.items():
            col = self.scalars.get(k)
            if col is None:
                col = self.scalars[k] = np.zeros(len(self.count), dtype=np.int64)
            col[i] += v

    # -- listener (SessionPods calls these) ----------------------------------------------------
    def pod_added(self, node: str, task: Any, part: tuple[int, int, int, int, dict[str, int]] | None = None) -> None:
        """``task`` was put on ``node``; ``part``: its (cpu, memory, non-zero cpu, non-zero memory,
        scalars) as `k8s.pod_requests` and `k8s.non_zero_requests` give them, when the view read them."""
        i = self.arrays.row.get(node)
        if i is None:
            return
        if part is None or not self.k8s_parts or part[4]:
            self._add(i, task, part)
        else:  # `_add` for a pod of cpu and memory only (most pods), written out
            self._contrib[task.uid] = part
            self.count[i] += 1
            self.cpu[i] += part[0]
            self.mem[i] += part[1]
            self.nz_cpu[i] += part[2]
            self.nz_mem[i] += part[3]
        self.log.append(i)

    def pod_removed(self, node: str, task: Any) -> None:
        i = self.arrays.row.get(node)
        got = self._contrib.pop(task.uid, None)
        if got is None and i is not None:
            c, m, sc = self.pod_requests(task)
            got = (c, m, *self.non_zero_requests(task), sc)
        if i is None or got is None:
            return
        self.log.append(i)
        c, m, nc, nm, sc = got
        self.count[i] -= 1
        self.cpu[i] -= c
        self.mem[i] -= m
        self.nz_cpu[i] -= nc
        self.nz_mem[i] -= nm
        for k, v in sc.items():
            self.scalars[k][i] -= v

    def scalar(self, name: str) -> np.ndarray:
        col = self.scalars.get(name)
        return col if col is not None else np.zeros(len(self.count), dtype=np.int64)


def pod_view_arrays(view: Any, arrays: NodeArrays, pod_requests: Any, non_zero_requests: Any) -> PodViewArrays | None:
    """The arrays for ``view``, built on first use; None when the view's nodes are not the arrays' nodes."""
    key = ("podview", id(view))
    pv = arrays.cache.get(key)
    if pv is not None:
        return pv if pv is not False and pv.view is view else None
    if view.node_list != arrays.nodes:  # (nodes compare by identity: the same objects in the same order)
        arrays.cache[key] = False
        return None
    pv = arrays.cache[key] = PodViewArrays(view, arrays, pod_requests, non_zero_requests)
    return pv
