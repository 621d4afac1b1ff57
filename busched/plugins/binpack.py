"""binpack: prefer the nodes a task would fill the most (best fit), to keep large holes free.

For each resource the task requests that has a weight, a node scores
``(used + request) * weight / allocatable``; the sum over resources divided by
the sum of their weights, times 100 (the maximum node score) times
``binpack.weight``, is the node's score.  A node where any such resource would
overflow scores 0.

Arguments (all integers, default 1; a negative per-resource weight means 1)::

    binpack.weight: 10
    binpack.cpu: 5
    binpack.memory: 1
    binpack.resources: nvidia.com/gpu, example.com/foo
    binpack.resources.nvidia.com/gpu: 2
    binpack.resources.example.com/foo: 3

With ``binpack.weight: 0`` the plugin registers no node-order function.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from busched.api.node import NodeInfo
from busched.api.resource import CPU, MEMORY
from busched.api.task import TaskInfo
from busched.fastpath import binpack as kernel
from busched.fastpath.rowlocal import declare
from busched.framework import points
from busched.framework.arguments import Arguments
from busched.framework.session import Session

__all__ = ["BinpackPlugin", "BinpackWeights", "binpack_score", "resource_binpack_score", "MAX_NODE_SCORE"]

MAX_NODE_SCORE = 100
WEIGHT_KEY = "binpack.weight"
CPU_KEY = "binpack.cpu"
MEMORY_KEY = "binpack.memory"
RESOURCES_KEY = "binpack.resources"
RESOURCES_PREFIX = RESOURCES_KEY + "."


class BinpackWeights:
    """binpack.weight and the per-resource weights (cpu and memory always present)."""

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        args = Arguments.of(arguments)
        self.weight = args.get_int(WEIGHT_KEY, 1)
        self.cpu = args.get_int(CPU_KEY, 1)
        if self.cpu < 0:
            self.cpu = 1
        self.memory = args.get_int(MEMORY_KEY, 1)
        if self.memory < 0:
            self.memory = 1
        names = args.get_str(RESOURCES_KEY, "")
        self.resources: dict[str, int] = {}
        for name in names.split(","):
            name = name.strip()
            if not name:
                continue
            w = args.get_int(RESOURCES_PREFIX + name, 1)
            self.resources[name] = 1 if w < 0 else w
        self.resources[CPU] = self.cpu
        self.resources[MEMORY] = self.memory

    def __repr__(self) -> str:
        return f"BinpackWeights(weight={self.weight}, resources={self.resources})"


def resource_binpack_score(requested: float, capacity: float, used: float, weight: int) -> float | None:
    """One resource's score, or None when the node cannot hold the request."""
    if capacity == 0 or weight == 0:
        return 0.0
    final = requested + used
    if final > capacity:
        return None
    return final * weight / capacity


def binpack_score(task: TaskInfo, node: NodeInfo, w: BinpackWeights) -> float:
    score = 0.0
    weight_sum = 0
    for rn, request in kernel.requested(task.resreq):  # (name, value) over req.names()
        if request == 0:
            continue
        rw = w.resources.get(rn)
        if rw is None:
            continue
        s = resource_binpack_score(request, node.allocatable.get(rn), node.used.get(rn), rw)
        if s is None:
            return 0.0
        score += s
        weight_sum += rw
    if weight_sum > 0:
        score /= weight_sum
    return score * float(MAX_NODE_SCORE * w.weight)


class BinpackPlugin:
    name = "binpack"
    reads_arguments = (WEIGHT_KEY, CPU_KEY, MEMORY_KEY, RESOURCES_KEY, RESOURCES_PREFIX + "*")
    reads_clock = False

    def __init__(self, arguments: Mapping[str, Any] | None = None) -> None:
        self.arguments = Arguments.of(arguments)
        self.weights = BinpackWeights(self.arguments)

    def on_session_open(self, ssn: Session) -> None:
        if self.weights.weight != 0:
            # the twin answers row by row for a run of one template (busched.fastpath.batch)
            twin = declare(lambda t, arrays, rows: self.score_batch(t, arrays, rows),
                           lambda t, arrays: kernel.binpack_local(t, arrays, self.score, self.weights,
                                                                     MAX_NODE_SCORE))
            ssn.add_fn(points.NODE_ORDER, self.name, self.score, twin=twin)

    def score(self, task: TaskInfo, node: NodeInfo) -> float:
        return binpack_score(task, node, self.weights)

    def score_batch(self, task: TaskInfo, arrays: Any, rows: Any) -> Any:
        """`score` for many nodes at once (busched.fastpath.binpack)."""
        return kernel.binpack_scores(task, arrays, rows, self.weights, MAX_NODE_SCORE, self.score)

    def on_session_close(self, ssn: Session) -> None:
        pass
