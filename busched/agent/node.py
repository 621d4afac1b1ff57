"""What an agent knows of each node it serves: the tasks it holds and the decisions it has answered.

Kept apart from the `Agent` so the decision handling, the heartbeat and the read-back of earlier
answers (`busched.agent.decisions`, `.heartbeat`, `.answers`) share one plain record per node and
its two memories (answered attempts, decision fences) with their bounds in one place.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field

from busched.api.objects import NodeSpec, TaskSpec
from busched.api.resource import Resource

__all__ = ["HeldTask", "AgentNode", "MEMORY_LIMIT"]

MEMORY_LIMIT = 10000  # answered attempts and fences remembered per node (the oldest are forgotten first)


@dataclass
class HeldTask:
    key: str
    attempt: int
    spec: TaskSpec
    request: Resource
    phase: str = "Running"
    started: float = 0.0  # monotonic
    start_time: float = 0.0  # wall clock (epoch seconds) when it was reported Running: the pod's startTime
    timer: asyncio.TimerHandle | None = None


@dataclass
class AgentNode:
    spec: NodeSpec
    allocatable: Resource
    tasks: dict[str, HeldTask] = field(default_factory=dict)
    through_seq: int = 0
    hb_seq: int = 0
    done: OrderedDict[tuple[str, int], str] = field(default_factory=OrderedDict)  # answered attempts
    fences: OrderedDict[str, int] = field(default_factory=OrderedDict)  # task -> highest decision fence seen
    epochs: dict[str, int] = field(default_factory=dict)  # per shard ("" the default one): the highest epoch

    @property
    def name(self) -> str:
        return self.spec.name

    def used(self) -> Resource:
        r = Resource()
        for t in self.tasks.values():
            r.add(t.request)
        return r

    def remember(self, task: str, attempt: int, outcome: str) -> None:
        """Record how an attempt was answered, so a redelivered decision for it is never run again."""
        self.done[(task, attempt)] = outcome
        while len(self.done) > MEMORY_LIMIT:
            self.done.popitem(last=False)

    def fenced(self, task: str, fence: int, epoch: int = 0, shard: str = "") -> bool:
        """Whether a decision is older than one already seen for this task, or comes from a scheduler epoch
        older than one already seen of its shard (a deposed writer's): then it is ignored.  Fences are the
        stream sequences of the binding records that decided them; epochs are the leaders' lease epochs,
        each shard's its own (two shards' leaders write at once)."""
        newest = self.epochs.get(shard, 0)
        if epoch < newest:
            return True
        if epoch > newest:
            self.epochs[shard] = epoch
        seen = self.fences.get(task, 0)
        if fence and fence < seen:
            return True
        if fence > seen:
            self.fences[task] = fence
            self.fences.move_to_end(task)
            while len(self.fences) > MEMORY_LIMIT:
                self.fences.popitem(last=False)
        return False
