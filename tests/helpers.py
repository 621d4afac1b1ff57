"""Small builders for unit tests: a cluster in a few lines, a session over it."""

from __future__ import annotations

import gc
from typing import Any

import msgspec

from busched.api.objects import ClusterSpec, JobSpec, NodeSpec, QueueSpec, TaskSpec
from busched.builtin import open_session
from busched.cache.cache import Cache
from busched.framework.config import load_config
from busched.framework.podview import SessionPods
from busched.framework.session import Session


def cluster(nodes: list[tuple[str, str, str]], tasks: list[dict[str, Any]], jobs: list[dict[str, Any]],
            queues: tuple[str, ...] = ("q1",)) -> ClusterSpec:
    return ClusterSpec(
        nodes=[NodeSpec(name=n, allocatable={"cpu": c, "memory": m, "pods": 110}) for n, c, m in nodes],
        tasks=[msgspec.convert(t, TaskSpec) for t in tasks],
        jobs=[msgspec.convert(j, JobSpec) for j in jobs],
        queues=[QueueSpec(name=q) for q in queues],
    )


def session(spec: ClusterSpec, config: str = 'actions: ""\ntiers:\n- plugins:\n  - name: gang\n') -> Session:
    c = Cache()
    c.load(spec)
    return open_session(c.snapshot(), load_config(config))


def sessions_left_for_the_collector() -> list[str]:
    """The sessions (and their pod views) a full collection would free now: what reference counting did not
    (a released session leaves none; call with the collector disabled since the sessions ran)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return [type(o).__name__ for o in gc.garbage if isinstance(o, (Session, SessionPods))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
