"""Run scheduling cycles over a `Cache` the way the scheduler loop does, with a stopwatch per phase.

`timed_cycle` is `busched.framework.cycle.run_cycle` taken apart so each phase
(snapshot, open, every action, close) gets its own wall-clock figure; the
clock is read only between phases, never inside the session.  `apply_decisions`
plays the binder and the agents: a bind makes the task Running on its node,
an eviction deletes the task, and each podgroup phase the session computed is
written back, so the next cycle starts from what a real cluster would report.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from busched.builtin import close_session, open_session, paused_gc
from busched.cache.cache import Cache
from busched.framework.config import SchedulerConfig, load_config
from busched.framework.session import Session
from busched.scheduler.memory import CollectorPolicy

__all__ = ["CycleTiming", "timed_cycle", "collect_garbage", "apply_decisions", "bench_config", "rss_mb",
           "percentile"]


@dataclass
class CycleTiming:
    """Seconds per phase of one cycle, in the order they ran."""

    phases: dict[str, float] = field(default_factory=dict)
    cpu: float = 0.0  # process CPU seconds over the cycle (the machine may be shared)
    gc: float = 0.0  # seconds of garbage collection when the collector resumed after the cycle (not in total)
    session: Any = None
    binds: int = 0
    evictions: int = 0

    @property
    def total(self) -> float:
        return sum(self.phases.values())

    def ms(self) -> dict[str, float]:
        return {k: round(v * 1000, 3) for k, v in self.phases.items()}


def bench_config(text: str) -> tuple[SchedulerConfig, list[str], list[str]]:
    """The configuration with every plugin and action this build lacks left out.

    Returns the config and the names of the missing plugins and actions, which every
    workload reports so a figure is never read as covering code that did not run.
    """
    from busched.actions import ACTIONS
    from busched.plugins import PLUGINS

    cfg = load_config(text)
    missing_plugins = [p.name for t in cfg.tiers for p in t.plugins if not _loads(PLUGINS, p.name, p.arguments)]
    missing_actions = [a for a in cfg.actions if not _loads(ACTIONS, a, None)]
    if not missing_plugins and not missing_actions:
        return cfg, [], []
    from busched.framework.config import Tier

    tiers = tuple(Tier(plugins=tuple(p for p in t.plugins if p.name not in missing_plugins)) for t in cfg.tiers)
    actions = tuple(a for a in cfg.actions if a not in missing_actions)
    fitted = SchedulerConfig(actions=actions, tiers=tiers, configurations=cfg.configurations,
                             node_search=cfg.node_search)
    return fitted, missing_plugins, missing_actions


def _loads(registry: Any, name: str, arguments: Any) -> bool:
    if name not in registry:
        return False
    try:
        registry[name](arguments) if arguments is not None else registry[name]()
    except ImportError:
        return False
    return True


def timed_cycle(cache: Cache, config: SchedulerConfig, *, seed: int = 0, uid: str = "session",
                on_decision: Callable[[Session], None] | None = None) -> tuple[Session, CycleTiming]:
    """One cycle over ``cache`` with its phases timed, the garbage collector paused as in `run_cycle`."""
    timing = CycleTiming()
    with paused_gc():
        _timed(cache, config, seed, uid, on_decision, timing, time.perf_counter)
        t0 = time.perf_counter()
    # the collector resumes here and usually collects at once: what the cycle left it to do
    timing.gc = time.perf_counter() - t0
    ssn, timing.session = timing.session, None
    return ssn, timing


def collect_garbage(policy: CollectorPolicy, *, defer: bool = False) -> float:
    """What the scheduler's collector does after a cycle (`CollectorPolicy.after_cycle`, entered by the
    caller): the young objects collected and the survivors frozen, everything unfrozen and collected once
    the frozen generation has doubled; ``defer`` as after a cycle that bound tasks.  A bench that froze
    after every cycle and never unfroze would keep whatever the later cycles replaced among the frozen
    objects, and its memory would grow with its cycles where a running scheduler's does not.  Returns the
    seconds it took."""
    before = policy.seconds
    policy.after_cycle(defer=defer)
    return policy.seconds - before


def _timed(cache: Cache, config: SchedulerConfig, seed: int, uid: str,
           on_decision: Callable[[Session], None] | None, timing: CycleTiming, clock: Callable[[], float]) -> None:
    cpu0 = time.process_time()
    t0 = clock()
    snap = cache.snapshot()
    t1 = clock()
    timing.phases["snapshot"] = t1 - t0
    ssn = open_session(snap, config, seed=seed, uid=uid)
    t0 = clock()
    timing.phases["open"] = t0 - t1
    try:
        _run(ssn, config, on_decision, timing, clock, t0)
    except BaseException:
        ssn.abandon()  # what it lent is assembled afresh (busched.fastpath.lending)
        raise
    timing.cpu = time.process_time() - cpu0
    for d in ssn.decisions:
        if d.kind == "bind":
            timing.binds += 1
        elif d.kind == "evict":
            timing.evictions += 1
    timing.session = ssn


def _run(ssn: Session, config: SchedulerConfig, on_decision: Callable[[Session], None] | None,
         timing: CycleTiming, clock: Callable[[], float], t0: float) -> None:
    """The actions and close, each timed from ``t0`` on."""
    from busched.actions import ACTIONS

    for name in config.actions:
        ACTIONS[name]().execute(ssn)
        t1 = clock()
        key = name if name not in timing.phases else f"{name}#{len(timing.phases)}"
        timing.phases[key] = t1 - t0
        t0 = t1
        if on_decision is not None and ssn.decisions:
            on_decision(ssn)
            on_decision = None
            t0 = clock()
    close_session(ssn)
    timing.phases["close"] = clock() - t0


def apply_decisions(cache: Cache, ssn: Session) -> None:
    """What the binder and the agents would report back after a cycle."""
    tasks = cache.objects["task"]
    for d in ssn.decisions:
        spec = tasks.get(d.task)
        if spec is None:
            continue
        if d.kind == "bind":
            cache.upsert("task", msgspec.structs.replace(spec, node=d.node, phase="Running"))
        elif d.kind == "evict":
            cache.delete("task", d.task)
    jobs = cache.objects["job"]
    for uid, job in ssn.jobs.items():
        spec = jobs.get(uid)
        if spec is not None and spec.phase != job.phase:
            cache.upsert("job", msgspec.structs.replace(spec, phase=job.phase))


def rss_mb() -> float:
    """Peak resident set size of this process, in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def percentile(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    k = min(len(s) - 1, max(0, int(round(p / 100.0 * (len(s) - 1)))))
    return s[k]
