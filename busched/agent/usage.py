"""What a node's agent measures of its load, for the scheduler's ``usage`` plugin (Volcano's NodeUsage).

A heartbeat carries the node's latest measurement (`busched.api.objects.NodeUsageSpec`: when it was
measured, and the cpu and memory load in percent averaged per period, ``5m`` and ``10m`` as Volcano's
metrics sources give them).  The scheduler keeps the newest per node; the usage plugin ignores one
measured more than five minutes before its cycle (stale, as in Volcano), so an agent measures again at
least every ``interval`` (30 s, Volcano's metrics interval) and, in between, sends the same measurement
(same time), which the scheduler recognises and skips.

Three sources:

* `RequestsMeter` (the simulated agent): the node's running tasks' requests over its allocatable;
  deterministic, measured once per ``interval`` (a fleet of thousands then costs the scheduler a few node
  updates a second, not one per bind).
* `ProcMeter` (``busched agent --exec process``, through `busched.agent.process.ProcessExecutor`):
  this host's cpu (/proc/stat, busy time between two reads) and memory (/proc/meminfo: 1 -
  MemAvailable / MemTotal), each period the mean of the samples it covers.
* an integrator's executor that implements `MeasuresUsage` (docs/executors.md).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, runtime_checkable

from busched.agent.node import AgentNode
from busched.api.objects import NodeUsageSpec

__all__ = ["MeasuresUsage", "RequestsMeter", "ProcMeter", "PERIODS", "INTERVAL", "percent"]

PERIODS = {"5m": 300.0, "10m": 600.0}  # the periods reported, and their length in seconds
INTERVAL = 30.0  # measured again at least this often (seconds)


@runtime_checkable
class MeasuresUsage(Protocol):
    """An executor that can say how loaded a node is (optional beside `busched.agent.executor.Executor`)."""

    async def usage(self, node: str) -> NodeUsageSpec | None:
        """The node's load now (``time`` the epoch seconds it was measured), or None when unknown.  Called
        every heartbeat: return the same measurement until a new one is worth sending."""


def percent(part: float, whole: float) -> float:
    """``part`` of ``whole`` in percent, within 0..100 (0 for nothing of nothing)."""
    if whole <= 0 or not math.isfinite(part):
        return 0.0
    return round(min(100.0, max(0.0, 100.0 * part / whole)), 3)


class RequestsMeter:
    """The simulated agent's load: the held tasks' cpu and memory requests over the node's allocatable."""

    def __init__(self, clock: Callable[[], float], *, interval: float = INTERVAL) -> None:
        self.clock = clock  # wall clock, epoch seconds
        self.interval = interval
        self._last: dict[str, NodeUsageSpec] = {}

    def measure(self, node: AgentNode) -> NodeUsageSpec:
        now = self.clock()
        last = self._last.get(node.name)
        if last is not None and isinstance(last.time, float) and now - last.time < self.interval:
            return last  # one measurement per interval, as a metrics source samples: no node update per bind
        used, alloc = node.used(), node.allocatable
        cpu, mem = percent(used.cpu, alloc.cpu), percent(used.memory, alloc.memory)
        out = NodeUsageSpec(time=now, cpu=dict.fromkeys(PERIODS, cpu), memory=dict.fromkeys(PERIODS, mem))
        self._last[node.name] = out
        return out


class ProcMeter:
    """This host's load from /proc: busy cpu time between reads, memory in use; per period the mean of the
    samples taken in it (at most one sample per ``interval``)."""

    def __init__(self, clock: Callable[[], float], *, proc: str | Path = "/proc", interval: float = INTERVAL) -> None:
        self.clock = clock
        self.proc = Path(proc)
        self.interval = interval
        self._prev: tuple[int, int] | None = None  # (busy, total) jiffies at the last read
        self._samples: deque[tuple[float, float, float]] = deque()  # (time, cpu %, memory %)
        self._last: NodeUsageSpec | None = None

    def _cpu(self) -> float:
        fields = (self.proc / "stat").read_text().split("\n", 1)[0].split()[1:]
        ticks = [int(x) for x in fields[:8]]
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
        total = sum(ticks)
        busy = total - idle
        prev, self._prev = self._prev, (busy, total)
        if prev is not None and total > prev[1]:
            busy, total = busy - prev[0], total - prev[1]
        return percent(busy, total)  # the first read: the mean since boot

    def _memory(self) -> float:
        info: dict[str, int] = {}
        for line in (self.proc / "meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("MemTotal", "MemAvailable"):
                info[key] = int(rest.split()[0])
        return percent(info.get("MemTotal", 0) - info.get("MemAvailable", 0), info.get("MemTotal", 0))

    def measure(self) -> NodeUsageSpec | None:
        now = self.clock()
        if self._last is not None and isinstance(self._last.time, float) and now - self._last.time < self.interval:
            return self._last
        try:
            cpu, mem = self._cpu(), self._memory()
        except (OSError, ValueError, IndexError):
            return self._last
        self._samples.append((now, cpu, mem))
        longest = max(PERIODS.values())
        while self._samples and self._samples[0][0] < now - longest:
            self._samples.popleft()
        cpus: dict[str, float] = {}
        mems: dict[str, float] = {}
        for period, seconds in PERIODS.items():
            window = [s for s in self._samples if s[0] >= now - seconds]
            cpus[period] = round(sum(s[1] for s in window) / len(window), 3)
            mems[period] = round(sum(s[2] for s in window) / len(window), 3)
        self._last = NodeUsageSpec(time=now, cpu=cpus, memory=mems)
        return self._last
