"""What the failover bench sees of a running cluster, from a connection of its own.

`Watch` listens to two things nobody can fake for the scheduler:

* every bind decision as it is published (core delivery of the decision stream's subjects): which
  tasks were bound, and when (monotonic, on arrival) the first decision of each epoch came, so the
  bench can time a takeover from the old leader's SIGKILL to the new leader's first bind;
* the agents' heartbeats, the agents' own view of what each node holds (``holding``: task -> attempt)
  and counts as used: a task held by two fresh nodes at one moment is a double run, a node whose
  holdings' requests or ``used`` exceed its allocatable is over-committed.

The checks are the ones of tests/faults/cluster.py's Observer (which a package cannot import), kept
to what the bench reports.  Times are read on arrival only; nothing here waits.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from busched.api.resource import Resource
from busched.bus import messages as m
from busched.bus import subjects as S

__all__ = ["Watch", "fetch_tasks"]


@dataclass
class _Node:
    holding: dict[str, int]
    interval: float
    at: float  # monotonic arrival of its latest heartbeat


@dataclass
class Watch:
    """Bind decisions and heartbeats; ``allocatable`` and ``request`` are the fleet's node and task shapes."""

    allocatable: Resource
    request: Resource
    bound: set[str] = field(default_factory=set)  # tasks with a bind decision seen
    first_bind_of_epoch: dict[int, float] = field(default_factory=dict)  # epoch -> monotonic arrival
    nodes: dict[str, _Node] = field(default_factory=dict)
    double_runs: set[str] = field(default_factory=set)  # tasks two fresh nodes held at one moment
    overcommitted: set[str] = field(default_factory=set)  # nodes whose heartbeat said more than they have
    placements: dict[str, set[tuple[str, int]]] = field(default_factory=lambda: defaultdict(set))
    heartbeats: int = 0

    async def start(self, bus: Any) -> None:
        await bus.subscribe(f"{S.DECISION_PREFIX}.*.bind.>", self.on_bind)
        await bus.subscribe(f"{S.HEARTBEAT_PREFIX}.*", self.on_heartbeat)
        await bus.flush()

    def on_bind(self, subject: str, data: bytes) -> None:
        try:
            d = m.decode(data)
        except Exception:  # noqa: BLE001 - not ours to judge: only decisions count
            return
        if isinstance(d, m.BindDecision):
            self.bound.add(f"{d.task.namespace}/{d.task.name}")
            self.first_bind_of_epoch.setdefault(d.epoch, time.monotonic())

    @staticmethod
    def fresh_window(interval: float) -> float:
        """As the fault tests: a node's heartbeat counts for four intervals (one second at least)."""
        return max(1.0, 4 * interval)

    def on_heartbeat(self, subject: str, data: bytes) -> None:
        try:
            hb = m.decode(data)
        except Exception:  # noqa: BLE001
            return
        if not isinstance(hb, m.NodeHeartbeat):
            return
        self.heartbeats += 1
        now = time.monotonic()
        self.nodes[hb.node] = _Node(dict(hb.holding), hb.interval, now)
        for task, attempt in hb.holding.items():
            self.placements[task].add((hb.node, attempt))
        # over-commit, as the agent counts it and as its holdings' requests add up
        held = Resource()
        for _ in hb.holding:
            held.add(self.request)
        if not held.less_equal(self.allocatable) or not Resource.from_list(hb.used).less_equal(self.allocatable):
            self.overcommitted.add(hb.node)
        # two holders of one task at this moment, among the nodes whose heartbeat is fresh (one node holds
        # one attempt of a task at most, so two attempts at once are two holders)
        if not hb.holding:
            return
        for node, v in self.nodes.items():
            if node == hb.node or now - v.at > self.fresh_window(v.interval):
                continue
            for task in hb.holding.keys() & v.holding.keys():
                self.double_runs.add(task)


async def fetch_tasks(bus: Any, timeout: float = 5.0) -> dict[str, dict[str, Any]]:
    """The scheduler's tasks (``busched get tasks``' request, `Bus.get_view`), by ``ns/name``."""
    items = await bus.get_view("tasks", timeout=timeout)
    return {f"{t['namespace']}/{t['name']}": t for t in items}
