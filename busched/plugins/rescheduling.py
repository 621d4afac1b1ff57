"""rescheduling: victims for the shuffle action, to even out node utilization.

Arguments (Volcano's)::

    interval: 5m                 # Go duration; unparsable or absent: 5m
    strategies:
    - name: lowNodeUtilization
      params:
        thresholds: {cpu: 20, memory: 20}         # percent; default 100
        targetThresholds: {cpu: 50, memory: 50}   # percent; default 100

The strategies run at most once per interval: the session that opens more than
``interval`` after the last run (or after the scheduler's first session, which
stands for Volcano's process start) registers the victim functions and becomes
the last run.  That time outlives the session (`busched.framework.plugin_state`).
Time is the session clock, ``ssn.now``.

lowNodeUtilization (the only strategy Volcano has; unknown names are ignored).
A node's utilization of cpu and memory is used / allocatable in percent, from
the session (Volcano reads a metrics server).  Only ``cpu`` and ``memory``
thresholds count, and only integer (or float) values are read.

1. Low nodes: schedulable, every resource below its threshold.  High nodes:
   the others with some resource above its target threshold.  Nothing happens
   when there is no low node, no high node, or every node is low.
2. The room on low nodes, per resource: the sum over them of (target - usage)
   percent of allocatable, in whole milli-cpu and bytes.
3. High nodes by cpu + memory utilization, highest first; on each, its pods by
   priority, then BestEffort before the others (no limits are known, so no pod
   is Guaranteed).  While the node still has some resource at or above its
   target and no room total is exactly zero, the next pod is a victim if a
   candidate task has its name; its request then leaves the room and its share
   of the node's capacity leaves the node's utilization.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from busched.api.node import NodeInfo
from busched.api.resource import Resource
from busched.api.task import TaskInfo
from busched.framework import points
from busched.framework.arguments import Arguments
from busched.framework.plugin_state import state_of
from busched.framework.session import Session

__all__ = ["ReschedulingPlugin", "LowNodeUtilizationConf", "parse_arguments", "low_node_utilization_victims",
           "node_utilization", "DEFAULT_INTERVAL", "LOW_NODE_UTILIZATION"]

DEFAULT_INTERVAL = 300.0
LOW_NODE_UTILIZATION = "lowNodeUtilization"
CPU, MEMORY = "cpu", "memory"
RESOURCES = (CPU, MEMORY)


@dataclass
class LowNodeUtilizationConf:
    thresholds: dict[str, float] = field(default_factory=lambda: {CPU: 100.0, MEMORY: 100.0, "pods": 100.0})
    target_thresholds: dict[str, float] = field(
        default_factory=lambda: {CPU: 100.0, MEMORY: 100.0, "pods": 100.0})

    @classmethod
    def parse(cls, params: Mapping[str, Any] | None) -> LowNodeUtilizationConf:
        conf = cls()
        if not params:
            return conf
        for key, target in (("thresholds", conf.thresholds), ("targetThresholds", conf.target_thresholds)):
            if key not in params:
                continue
            given = params[key]
            if not isinstance(given, Mapping):
                return conf  # Volcano abandons the rest of the parse here
            # Volcano reads cpu, memory and "pod" (sic; utilization never has it)
            for name in (CPU, MEMORY, "pod"):
                v = given.get(name)
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    target[name] = float(v)
        return conf


def parse_arguments(arguments: Mapping[str, Any]) -> tuple[float, list[tuple[str, Mapping[str, Any] | None]]]:
    """(interval seconds, [(strategy name, params)]); the default strategy is lowNodeUtilization."""
    interval = Arguments.of(arguments).get_duration("interval", DEFAULT_INTERVAL)
    strategies: list[tuple[str, Mapping[str, Any] | None]] = [(LOW_NODE_UTILIZATION, None)]
    given = arguments.get("strategies")
    if isinstance(given, list) and given:
        strategies = []
        for s in given:
            if not isinstance(s, Mapping) or not isinstance(s.get("name", ""), str):
                continue
            params = s.get("params")
            if params is not None and not isinstance(params, Mapping):
                continue
            strategies.append((s.get("name", ""), params))
    return interval, strategies


def node_utilization(node: NodeInfo) -> dict[str, float]:
    """Used / allocatable, in percent, for cpu and memory (0 where nothing is allocatable)."""
    out = {}
    for r in RESOURCES:
        alloc = node.allocatable.get(r)
        out[r] = node.used.get(r) * 100 / alloc if alloc > 0 else 0.0
    return out


def _go_div(a: float, b: float) -> float:
    """Float division as Go does it: x/0 is +-Inf, 0/0 is NaN."""
    if b == 0:
        if a == 0 or math.isnan(a):
            return math.nan
        return math.inf if a > 0 else -math.inf
    return a / b


def _capacity_for_room(node: NodeInfo) -> Resource:
    """getNodeCapacity: allocatable, unless the node reports none."""
    a = node.allocatable
    return a if (a.cpu or a.memory or any(a.scalars.values())) else node.capacity


@dataclass(eq=False)
class _Usage:
    node: NodeInfo
    util: dict[str, float]


def low_node_utilization_victims(ssn: Session, conf: LowNodeUtilizationConf,
                                 tasks: list[TaskInfo]) -> list[TaskInfo]:
    usages = [_Usage(n, node_utilization(n)) for n in ssn.node_list]
    low, high = [], []
    for u in usages:
        if not u.node.unschedulable and all(u.util[r] < conf.thresholds[r] for r in RESOURCES):
            low.append(u)
        elif any(u.util[r] > conf.target_thresholds[r] for r in RESOURCES):
            high.append(u)
    if not low or len(low) == len(ssn.nodes) or not high:
        return []

    room = {CPU: 0, MEMORY: 0}  # whole milli-cpu and bytes, as Kubernetes quantities
    for u in low:
        cap = _capacity_for_room(u.node)
        for r in RESOURCES:
            room[r] += int(conf.target_thresholds[r] * cap.get(r) * 0.01)
            room[r] -= int(u.util[r] * cap.get(r) * 0.01)

    def keep_going(u: _Usage) -> bool:
        if not any(u.util[r] >= conf.target_thresholds[r] for r in RESOURCES):
            return False
        return all(v != 0 for v in room.values())

    high.sort(key=lambda u: -(u.util[CPU] + u.util[MEMORY]))
    victims: list[TaskInfo] = []
    for u in high:
        pods = sorted(u.node.tasks.values(), key=lambda t: (t.priority, 0 if t.best_effort else 1))
        for pod in pods:
            if not keep_going(u):
                break
            task = next((t for t in tasks if t.name == pod.name), None)  # Volcano matches the name only
            if task is None:
                continue
            cpu, mem = int(task.resreq.cpu), int(task.resreq.memory)
            room[CPU] -= cpu
            room[MEMORY] -= mem
            cap = u.node.capacity
            u.util[CPU] -= _go_div(cpu / 1000 * 100, cap.cpu / 1000)
            u.util[MEMORY] -= _go_div(mem * 100, cap.memory)
            victims.append(task)
    return victims


class ReschedulingPlugin:
    name = "rescheduling"
    reads_arguments = ("interval", "strategies")  # every argument it reads (busched.framework.arguments)
    reads_clock = True  # runs once an interval has passed since its last run (kept across cycles)

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        self.interval, self.strategies = parse_arguments(arguments)

    def time_to_run(self, ssn: Session) -> bool:
        state = state_of(ssn, self.name)
        last = state.get("last_run_at")
        if last is None:  # the first session the scheduler runs stands for its start
            last = state["last_run_at"] = ssn.now
        if last + self.interval < ssn.now:
            state["last_run_at"] = ssn.now
            return True
        return False

    def on_session_open(self, ssn: Session) -> None:
        if not self.time_to_run(ssn):
            return
        params = dict(self.strategies)  # a later entry of the same name wins, as in Volcano's registry
        fns: list[Callable[[list[TaskInfo]], list[TaskInfo]]] = []
        for name, _ in self.strategies:
            if name == LOW_NODE_UTILIZATION:
                conf = LowNodeUtilizationConf.parse(params.get(name))
                fns.append(functools.partial(low_node_utilization_victims, ssn, conf))
        ssn.add_fn(points.VICTIM_TASKS, self.name, fns)
