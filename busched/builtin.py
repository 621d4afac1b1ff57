"""The built-in actions and plugins, and a scheduling cycle that uses them when none are given.

`busched.framework.cycle` runs a cycle with whatever registries it is handed, so the framework never
imports an action or a plugin (they sit above it).  This module is where the two meet: the callers
that want Volcano's built-ins (the scheduler loop, replay, the scenario runner, benchmarks, tests)
open sessions and run cycles through it.
"""

from __future__ import annotations

from typing import Any

from busched.actions import ACTIONS
from busched.api.snapshot import ClusterSnapshot
from busched.framework import cycle
from busched.framework.config import SchedulerConfig
from busched.framework.cycle import QuietCycles, close_session, finish_cycle, paused_gc
from busched.framework.registry import Registry
from busched.framework.session import Session
from busched.plugins import PLUGINS

__all__ = ["ACTIONS", "PLUGINS", "open_session", "run_actions", "run_cycle", "close_session", "finish_cycle",
           "paused_gc", "QuietCycles", "quiet_cycles"]


def quiet_cycles(config: SchedulerConfig, plugins: Registry | None = None) -> QuietCycles:
    """The quiet-cycle gate over ``plugins`` (the built-in plugins by default)."""
    return QuietCycles(config, PLUGINS if plugins is None else plugins)


def open_session(snapshot: ClusterSnapshot, config: SchedulerConfig, plugins: Registry | None = None,
                 **kw: Any) -> Session:
    return cycle.open_session(snapshot, config, PLUGINS if plugins is None else plugins, **kw)


def run_actions(snapshot: ClusterSnapshot, config: SchedulerConfig, *, plugins: Registry | None = None,
                actions: Registry | None = None, **kw: Any) -> Session:
    return cycle.run_actions(snapshot, config, plugins=PLUGINS if plugins is None else plugins,
                             actions=ACTIONS if actions is None else actions, **kw)


def run_cycle(snapshot: ClusterSnapshot, config: SchedulerConfig, *, plugins: Registry | None = None,
              actions: Registry | None = None, **kw: Any) -> Session:
    return cycle.run_cycle(snapshot, config, plugins=PLUGINS if plugins is None else plugins,
                           actions=ACTIONS if actions is None else actions, **kw)
