"""Queues, priority classes and hypernodes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from busched.api.resource import Resource

__all__ = ["QueueInfo", "PriorityClass", "HyperNode", "QueueState"]


class QueueState:
    Open = "Open"
    Closed = "Closed"
    Closing = "Closing"


@dataclass(eq=False)
class QueueInfo:
    uid: str
    name: str
    weight: int = 1
    capability: Resource | None = None
    deserved: Resource | None = None
    guarantee: Resource | None = None
    reclaimable: bool = True
    state: str = QueueState.Open
    priority: int = 0
    parent: str = ""
    annotations: dict[str, str] = field(default_factory=dict)
    affinity: dict[str, Any] | None = None
    created: float = 0.0  # creation time (seconds); ties fall back on uid
    # raw resource lists as given (capacity needs to know which dimensions were set)
    capability_list: dict[str, Any] = field(default_factory=dict)
    deserved_list: dict[str, Any] = field(default_factory=dict)
    guarantee_list: dict[str, Any] = field(default_factory=dict)

    def clone(self) -> QueueInfo:
        return QueueInfo(**{f: getattr(self, f) for f in self.__dataclass_fields__})

    def __repr__(self) -> str:
        return f"Queue({self.name} weight={self.weight} state={self.state})"


@dataclass(frozen=True)
class PriorityClass:
    name: str
    value: int
    preemption_policy: str = "PreemptLowerPriority"
    global_default: bool = False


@dataclass(eq=False)
class HyperNode:
    """A hypernode with its members resolved (`busched.api.members`): ``members`` the untyped names (a
    hypernode when one is so named, else a node), ``hypernode_members`` and ``node_members`` the typed
    ones, a node member's pattern or labels already matched against the nodes there are."""

    name: str
    tier: int
    tier_name: str = ""
    members: list[str] = field(default_factory=list)
    hypernode_members: list[str] = field(default_factory=list)
    node_members: list[str] = field(default_factory=list)
