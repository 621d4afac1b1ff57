"""Actions: one module each; an action only calls session hooks, never plugins."""

from __future__ import annotations

import importlib
from typing import Any

from busched.framework.arguments import declared_of
from busched.framework.registry import Registry

__all__ = ["ACTIONS"]

_ENTRIES = {
    "enqueue": "enqueue:EnqueueAction",
    "allocate": "allocate:AllocateAction",
    "backfill": "backfill:BackfillAction",
    "preempt": "preempt:PreemptAction",
    "reclaim": "reclaim:ReclaimAction",
    "shuffle": "shuffle:ShuffleAction",
    "gangpreempt": "gangpreempt:GangPreemptAction",
    "gangreclaim": "gangreclaim:GangReclaimAction",
}


class _Lazy:
    """Builds the action class named by ``"module:Class"``, importing the module on first use."""

    def __init__(self, spec: str) -> None:
        self.module, self.cls = spec.split(":")

    def action_class(self) -> Any:
        return getattr(importlib.import_module(f"busched.actions.{self.module}"), self.cls)

    @property
    def reads_arguments(self) -> tuple[str, ...] | None:
        """The action's declared arguments (busched.framework.arguments)."""
        return declared_of(self.action_class())

    def __call__(self) -> Any:
        return self.action_class()()


ACTIONS = Registry("action", {name: _Lazy(spec) for name, spec in _ENTRIES.items()})
