"""conformance: never evict system-critical pods or anything in kube-system."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from busched.api.task import TaskInfo
from busched.framework import points
from busched.framework.arguments import Arguments
from busched.framework.session import Session

CRITICAL_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})
SYSTEM_NAMESPACE = "kube-system"


class ConformancePlugin:
    name = "conformance"
    reads_arguments = ()  # every argument it reads (busched.framework.arguments)
    reads_clock = False

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        self.arguments = Arguments.of(arguments)

    def on_session_open(self, ssn: Session) -> None:
        def keep(evictees: list[TaskInfo]) -> tuple[list[TaskInfo], int]:
            victims = [t for t in evictees
                       if t.priority_class_name not in CRITICAL_CLASSES and t.namespace != SYSTEM_NAMESPACE]
            return victims, 1

        def evictable(_: TaskInfo, evictees: list[TaskInfo]) -> tuple[list[TaskInfo], int]:
            return keep(evictees)

        ssn.add_fn(points.PREEMPTABLE, self.name, evictable)
        ssn.add_fn(points.RECLAIMABLE, self.name, evictable)
        ssn.add_fn(points.UNIFIED_EVICTABLE, self.name, lambda _ctx, cands: keep(cands))
