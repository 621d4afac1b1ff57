"""Actions: one module each; an action only calls session hooks, never plugins."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

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


def _lazy(spec: str) -> Callable[[], Any]:
    mod, cls = spec.split(":")

    def build() -> Any:
        return getattr(importlib.import_module(f"busched.actions.{mod}"), cls)()

    return build


ACTIONS = Registry("action", {name: _lazy(spec) for name, spec in _ENTRIES.items()})
