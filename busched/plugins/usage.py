"""usage: load-aware scheduling on the cpu and memory load each node measures.

A node reports its load as Volcano's NodeUsage (``NodeInfo.usage``): the time
it was measured and, per averaging period, the cpu and memory load in percent.
The plugin reads the period ``"10m"`` (Volcano's ``NODE_METRICS_PERIOD``).
Metrics measured more than five minutes before the session clock (``ssn.now``)
are stale, as are absent ones (Volcano's zero time): on such a node the
predicate passes and the score is 0.

- predicate: fresh cpu load above ``thresholds.cpu``, else fresh memory load
  above ``thresholds.mem``, is UnschedulableAndUnresolvable (a load equal to
  the threshold passes); a period the node did not report counts as load 0.
- node order: ``((1 - cpu) * cpu.weight + (1 - mem) * memory.weight) /
  (cpu.weight + memory.weight) * 100 * usage.weight``, where cpu and mem are
  *composite* utilisations in 0..1: the measured load plus a shadow estimate
  of the tasks the measurement cannot see yet, over the node's capacity
  (clamped to 0..1).  A node without fresh metrics scores 0; a period the
  node did not report counts as load 0.

The shadow estimate (Volcano's ShadowLoadCache, one per session): a task on a
node that is Allocated, Binding or Bound, or Running for less than the metrics
interval (30 s; start time unknown counts as recent), is estimated at
``(request * request_ratio + (limit - request) * burst_ratio) * risk`` per
dimension, clamped to 0..limit (busched carries no limits, so limit = request),
or ``be_cpu`` / ``be_mem`` times risk for a best-effort task.  ``risk`` is
``risk_factor`` once the node's weighted composite load reaches
``risk_threshold``, else 1.  Each allocation or pipelining in the session adds
its task's estimate (replacing an earlier one of the same task), each
eviction or discard subtracts exactly what was added.

Arguments (Volcano's names, read with busched.framework.arguments.Arguments;
a value out of range keeps the default)::

    usage.weight: 5        # >= 0
    cpu.weight: 1          # >= 0
    memory.weight: 1       # >= 0
    thresholds: {cpu: 80, mem: 80}     # integers 0..100 (the memory key is "mem")
    estimator: {request_ratio: 0.7, burst_ratio: 0, risk_threshold: 0.6,   # 0..1
                risk_factor: 1.2,                                          # >= 1
                be_cpu: 250m, be_mem: 200Mi}   # quantities, or integers (millicores, MiB)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from busched.api.fit import Code
from busched.api.node import NodeInfo
from busched.api.quantity import QuantityError, milli_value, value
from busched.api.task import TaskInfo, TaskStatus
from busched.framework import points
from busched.framework.arguments import Arguments
from busched.framework.decision import fit_error
from busched.framework.session import EventHandler, Session

__all__ = ["UsagePlugin", "UsageArgs", "ShadowLoad", "metrics_fresh", "node_score", "composite",
           "estimate_task", "in_shadow", "PERIOD", "METRICS_ACTIVE_TIME", "CPU_EXTEND", "MEMORY_EXTEND"]

PERIOD = "10m"  # Volcano's source.NODE_METRICS_PERIOD
METRICS_ACTIVE_TIME = 300  # seconds: older metrics are ignored
METRICS_INTERVAL = 30.0  # seconds a started task stays invisible to the measurement
MAX_NODE_SCORE = 100
CPU_EXTEND = "the CPU load of the node exceeds the upper limit."
MEMORY_EXTEND = "the memory load of the node exceeds the upper limit."
MIB = 1024 * 1024
_SHADOWED = frozenset({TaskStatus.Allocated, TaskStatus.Binding, TaskStatus.Bound})


def _best_effort(raw: Any, default: float, milli: bool) -> float:
    """be_cpu (millicores) / be_mem (bytes): a quantity string, or an integer (millicores / MiB)."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return default if raw < 0 else float(raw) * (1 if milli else MIB)
    if isinstance(raw, str):
        try:
            v = milli_value(raw) if milli else value(raw)
        except QuantityError:
            return default
        return default if v < 0 else float(v)
    return default


def max_or(v: int, default: int) -> int:
    """A negative weight keeps the default."""
    return default if v < 0 else v


class UsageArgs:
    """The plugin's arguments with Volcano's defaults and range rules."""

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        args = Arguments.of(arguments)
        self.usage_weight = max_or(args.get_int("usage.weight", 5), 5)
        self.cpu_weight = max_or(args.get_int("cpu.weight", 1), 1)
        self.memory_weight = max_or(args.get_int("memory.weight", 1), 1)
        self.cpu_threshold = 80.0
        self.mem_threshold = 80.0
        th = args.get_mapping("thresholds")
        if th is not None:
            cpu = th.get_int("cpu", 80)
            if 0 <= cpu <= 100:
                self.cpu_threshold = float(cpu)
            mem = th.get_int("mem", 80)
            if 0 <= mem <= 100:
                self.mem_threshold = float(mem)
        self.request_ratio, self.burst_ratio = 0.7, 0.0
        self.risk_threshold, self.risk_factor = 0.6, 1.2
        self.be_cpu, self.be_memory = 250.0, float(200 * MIB)
        est = args.get_mapping("estimator")
        if est is not None:
            for attr, key in (("request_ratio", "request_ratio"), ("burst_ratio", "burst_ratio"),
                              ("risk_threshold", "risk_threshold")):
                v = est.get_float(key, getattr(self, attr))
                if 0 <= v <= 1:
                    setattr(self, attr, v)
            rf = est.get_float("risk_factor", self.risk_factor)
            if rf >= 1:
                self.risk_factor = rf
            self.be_cpu = _best_effort(est.get("be_cpu"), self.be_cpu, milli=True)
            self.be_memory = _best_effort(est.get("be_mem"), self.be_memory, milli=False)


def metrics_fresh(node: NodeInfo, now: float) -> bool:
    """Measured at most five minutes before ``now`` (compared in whole nanoseconds, as Go does)."""
    u = node.usage
    if u is None:
        return False  # never reported: Volcano's zero metrics time
    return round((now - u.time) * 1e9) <= METRICS_ACTIVE_TIME * 10**9


def composite(load_percent: float, shadow: float, capacity: float) -> float:
    """(measured load + shadow estimate) / capacity, clamped to 0..1; 0 without capacity."""
    if capacity <= 0:
        return 0.0
    return min(1.0, max(0.0, (load_percent / 100.0 * capacity + shadow) / capacity))


def node_score(cpu: float, mem: float, a: UsageArgs) -> float:
    total = a.cpu_weight + a.memory_weight
    if total == 0:
        return 0.0
    s = ((1.0 - cpu) * a.cpu_weight + (1.0 - mem) * a.memory_weight) / total
    return s * MAX_NODE_SCORE * a.usage_weight


def _estimate(request: float, limit: float, a: UsageArgs, risk: float) -> float:
    request = max(request, 0.0)
    eff = request if limit <= 0 or limit < request else limit
    burst = max(eff - request, 0.0)
    return min(max((request * a.request_ratio + burst * a.burst_ratio) * risk, 0.0), eff)


def estimate_task(task: TaskInfo, a: UsageArgs, risk: float) -> tuple[float, float]:
    """(millicores, bytes) the task will likely use before the measurement sees it."""
    if task.best_effort:
        return max(a.be_cpu, 0.0) * risk, max(a.be_memory, 0.0) * risk
    req = task.init_resreq
    # busched carries no limits: a pod without limits, whose effective limit is its request
    return _estimate(req.cpu, 0.0, a, risk), _estimate(req.memory, 0.0, a, risk)


def in_shadow(task: TaskInfo, now: float, interval: float = METRICS_INTERVAL) -> bool:
    """A task on a node whose load the node's metrics cannot show yet."""
    if not task.node_name:
        return False
    if task.status in _SHADOWED:
        return True
    if task.status == TaskStatus.Running:
        return task.start_time == 0.0 or now - task.start_time < interval
    return False


class ShadowLoad:
    """Per node, the summed estimates of shadow tasks; per task, what it added (so it is taken back exactly)."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self.memory: dict[str, float] = {}
        self.by_task: dict[str, tuple[str, float, float]] = {}

    def add(self, node: str, uid: str, cpu: float, memory: float) -> None:
        if uid in self.by_task:
            self.remove(uid)
        self.cpu[node] = self.cpu.get(node, 0.0) + cpu
        self.memory[node] = self.memory.get(node, 0.0) + memory
        self.by_task[uid] = (node, cpu, memory)

    def remove(self, uid: str) -> None:
        got = self.by_task.pop(uid, None)
        if got is None:
            return
        node, cpu, memory = got
        self.cpu[node] = max(self.cpu.get(node, 0.0) - cpu, 0.0)
        self.memory[node] = max(self.memory.get(node, 0.0) - memory, 0.0)

    def of(self, node: str) -> tuple[float, float]:
        return self.cpu.get(node, 0.0), self.memory.get(node, 0.0)


class UsagePlugin:
    name = "usage"
    reads_arguments = ("usage.weight", "cpu.weight", "memory.weight", "thresholds", "estimator")
    reads_clock = True  # node metrics go stale with the clock

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        self.args = UsageArgs(arguments)

    def _composites(self, shadow: ShadowLoad, node: NodeInfo) -> tuple[float, float]:
        cpu_est, mem_est = shadow.of(node.name)
        u = node.usage
        cpu = u.cpu.get(PERIOD, 0.0) if u is not None else 0.0
        mem = u.memory.get(PERIOD, 0.0) if u is not None else 0.0
        return (composite(cpu, cpu_est, node.capacity.cpu),
                composite(mem, mem_est, node.capacity.memory))

    def _risk(self, shadow: ShadowLoad, node: NodeInfo) -> float:
        a = self.args
        if a.risk_factor < 1.0:
            return 1.0
        cpu, mem = self._composites(shadow, node)
        total = a.cpu_weight + a.memory_weight
        load = 0.0 if total == 0 else (cpu * a.cpu_weight + mem * a.memory_weight) / total
        return a.risk_factor if load >= a.risk_threshold else 1.0

    def _add(self, shadow: ShadowLoad, node: NodeInfo, task: TaskInfo) -> None:
        cpu, mem = estimate_task(task, self.args, self._risk(shadow, node))
        shadow.add(node.name, task.uid, cpu, mem)

    def on_session_open(self, ssn: Session) -> None:
        a = self.args
        shadow = ShadowLoad()
        for node in ssn.node_list:
            for task in node.tasks.values():
                if in_shadow(task, ssn.now):
                    self._add(shadow, node, task)

        def allocated(task: TaskInfo) -> None:
            node = ssn.nodes.get(task.node_name)
            if node is not None:
                self._add(shadow, node, task)

        def deallocated(task: TaskInfo) -> None:
            shadow.remove(task.uid)

        def predicate(task: TaskInfo, node: NodeInfo) -> None:
            if not metrics_fresh(node, ssn.now):
                return
            u = node.usage
            assert u is not None
            if u.cpu.get(PERIOD, 0.0) > a.cpu_threshold:
                raise fit_error(task, node, CPU_EXTEND, self.name, Code.UnschedulableAndUnresolvable)
            if u.memory.get(PERIOD, 0.0) > a.mem_threshold:
                raise fit_error(task, node, MEMORY_EXTEND, self.name, Code.UnschedulableAndUnresolvable)

        def node_order(task: TaskInfo, node: NodeInfo) -> float:
            if not metrics_fresh(node, ssn.now):
                return 0.0
            return node_score(*self._composites(shadow, node), a)

        ssn.add_event_handler(EventHandler(allocate=allocated, deallocate=deallocated))
        ssn.add_fn(points.PREDICATE, self.name, predicate)
        ssn.add_fn(points.NODE_ORDER, self.name, node_order)
