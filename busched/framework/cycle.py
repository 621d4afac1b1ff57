"""One scheduling cycle: open a session over a snapshot, run the actions, close it.

This is the whole of what the scheduler loop, replay and the conformance runner
share: ``run_cycle(snapshot, config) -> Session`` with the decisions recorded on
the session.
"""

from __future__ import annotations

from typing import Any

from busched.framework.config import SchedulerConfig
from busched.framework.registry import Registry
from busched.framework.session import Session
from busched.framework.snapshot import ClusterSnapshot

__all__ = ["open_session", "close_session", "run_cycle"]


def open_session(snapshot: ClusterSnapshot, config: SchedulerConfig, plugins: Registry | None = None,
                 *, seed: int = 0, uid: str = "session", now: float = 0.0) -> Session:
    if plugins is None:
        from busched.plugins import PLUGINS as plugins  # noqa: N811
    ssn = Session(snapshot, config, seed=seed, uid=uid, now=now)
    for tier in config.tiers:
        for opt in tier.plugins:
            if opt.name in ssn.plugins:
                continue
            plugin = plugins[opt.name](opt.arguments)
            ssn.plugins[opt.name] = plugin
            plugin.on_session_open(ssn)
    return ssn


def close_session(ssn: Session) -> None:
    for plugin in ssn.plugins.values():
        close = getattr(plugin, "on_session_close", None)
        if close is not None:
            close(ssn)
    ssn.close()


def run_cycle(snapshot: ClusterSnapshot, config: SchedulerConfig, *, plugins: Registry | None = None,
              actions: Registry | None = None, seed: int = 0, uid: str = "session",
              before_close: Any = None, now: float = 0.0) -> Session:
    if actions is None:
        from busched.actions import ACTIONS as actions  # noqa: N811
    ssn = open_session(snapshot, config, plugins, seed=seed, uid=uid, now=now)
    for name in config.actions:
        actions[name]().execute(ssn)
    if before_close is not None:
        before_close(ssn)
    close_session(ssn)
    return ssn
