"""One scheduling cycle: open a session over a snapshot, run the actions, close it.

This is the whole of what the scheduler loop, replay and the conformance runner
share: ``run_cycle(snapshot, config, plugins=, actions=) -> Session`` with the
decisions recorded on the session.  The registries are handed in: the framework
never imports an action or a plugin (`busched.builtin` supplies the built-ins).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from time import perf_counter
from typing import Any

from busched.api.snapshot import ClusterSnapshot
from busched.framework.config import SchedulerConfig
from busched.framework.registry import Registry
from busched.framework.session import Session

__all__ = ["open_session", "close_session", "run_cycle", "run_actions", "finish_cycle", "paused_gc", "QuietCycles"]


class QuietCycles:
    """Lets a scheduler loop skip cycles that cannot decide anything.

    A session is a function of its snapshot, the configuration, the seed and the clock.  After a
    cycle that decided nothing, whose podgroup changes (none) left the cache as it was, and while
    the cache has not changed since, another cycle would decide nothing again.  Plugins that read
    the clock or keep state from cycle to cycle (those declaring ``reads_clock``, asked of the
    plugin registry) break that, so with any of them configured every cycle is due.  Use: ``if
    gate.due(cache.generation): run the cycle, write back its results, then gate.done(ssn,
    generation_at_snapshot, cache.generation)``.
    """

    def __init__(self, config: SchedulerConfig, plugins: Registry) -> None:
        self.enabled = not any(plugins.reads_clock(p.name) for t in config.tiers for p in t.plugins
                               if p.name in plugins)
        self._quiet_at: int | None = None
        self.skipped = 0

    def due(self, generation: int) -> bool:
        if self.enabled and generation == self._quiet_at:
            self.skipped += 1
            return False
        return True

    def done(self, ssn: Session, before: int, after: int) -> None:
        """``before``: the cache generation the snapshot was taken at; ``after``: once written back."""
        self._quiet_at = after if (not ssn.decisions and after == before) else None


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection inside: a cycle builds millions of objects, and with a big
    cluster alive every automatic full collection rescans all of them (most of a cold snapshot's
    time).  The collector resumes afterwards and collects the cycle's garbage once."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def open_session(snapshot: ClusterSnapshot, config: SchedulerConfig, plugins: Registry,
                 *, seed: int = 0, uid: str = "session", now: float = 0.0) -> Session:
    """Open a session and let each configured plugin register its callbacks (the built-in registry:
    `busched.builtin.open_session`)."""
    t0 = perf_counter()
    ssn = Session(snapshot, config, seed=seed, uid=uid, now=now)
    # seconds per phase, read by the metrics (busched.scheduler.volcano_metrics): "open" (the whole of
    # open_session), "actions" [(name, s)], "plugins" [(name, "OnSessionOpen" | "OnSessionClose", s)]
    timings: dict[str, Any] = {"open": 0.0, "actions": [], "plugins": []}
    ssn.timings = timings  # type: ignore[attr-defined]
    try:
        for tier in config.tiers:
            for opt in tier.plugins:
                if opt.name in ssn.plugins:
                    continue
                t1 = perf_counter()
                plugin = plugins[opt.name](opt.arguments)
                ssn.plugins[opt.name] = plugin
                plugin.on_session_open(ssn)
                timings["plugins"].append((opt.name, "OnSessionOpen", perf_counter() - t1))
        ssn.freeze()  # every plugin has registered: each point's callback lists, resolved once
    except BaseException:
        ssn.abandon()  # what it lent is assembled afresh (busched.fastpath.lending)
        raise
    timings["open"] = perf_counter() - t0
    return ssn


def close_session(ssn: Session) -> None:
    timed = getattr(ssn, "timings", None)
    for name, plugin in ssn.plugins.items():
        close = getattr(plugin, "on_session_close", None)
        if close is not None:
            t0 = perf_counter()
            close(ssn)
            if timed is not None:
                timed["plugins"].append((name, "OnSessionClose", perf_counter() - t0))
    ssn.close()


def run_cycle(snapshot: ClusterSnapshot, config: SchedulerConfig, *, plugins: Registry,
              actions: Registry, seed: int = 0, uid: str = "session",
              before_close: Any = None, now: float = 0.0) -> Session:
    ssn = run_actions(snapshot, config, plugins=plugins, actions=actions, seed=seed, uid=uid, now=now)
    if before_close is not None:
        try:
            before_close(ssn)
        except BaseException:
            ssn.abandon()
            raise
    finish_cycle(ssn)
    return ssn


def run_actions(snapshot: ClusterSnapshot, config: SchedulerConfig, *, plugins: Registry,
                actions: Registry, seed: int = 0, uid: str = "session", now: float = 0.0,
                opened: Callable[[Session], None] | None = None) -> Session:
    """The first part of `run_cycle`: open the session and run the actions.  Its decisions are final
    here (Volcano binds as allocate commits, before the session closes), so a caller may send them
    out before `finish_cycle` recomputes every job's status.  ``opened`` is handed the session once it
    is open: ``ssn.decisions`` only grows and each is final once appended, so a caller running this in
    a worker thread may send the binds out while the actions still place (busched.scheduler.bind_stream)."""
    with paused_gc():
        ssn = open_session(snapshot, config, plugins, seed=seed, uid=uid, now=now)
        try:
            if opened is not None:
                opened(ssn)
            timed = ssn.timings["actions"]  # type: ignore[attr-defined]
            for name in config.actions:
                t0 = perf_counter()
                actions[name]().execute(ssn)
                timed.append((name, perf_counter() - t0))
        except BaseException:
            ssn.abandon()  # what it lent is assembled afresh (busched.fastpath.lending)
            raise
    return ssn


def finish_cycle(ssn: Session) -> None:
    """The second part of `run_cycle`: close the session."""
    with paused_gc():
        try:
            close_session(ssn)
        except BaseException:
            ssn.abandon()
            raise
