"""The idle bench collects garbage as the scheduler's loop does (`CollectorPolicy`, shared, not copied):
what a cycle leaves frozen is still freed once it became garbage, so the bench's memory does not grow
with its cycles (freezing after every cycle and never unfreezing kept it forever)."""

from __future__ import annotations

import gc
import weakref

from busched.bench import idle
from busched.bench.driver import collect_garbage
from busched.scheduler.memory import CollectorPolicy


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


def test_frozen_garbage_is_freed_once_the_frozen_generation_doubled() -> None:
    was_enabled = gc.isenabled()
    policy = CollectorPolicy()
    policy.enter()
    try:
        held = [_Node()]
        gone = weakref.ref(held[0])
        survivors = [[] for _ in range(20_000)]  # enough young objects for a collection
        collect_garbage(policy)  # a young collection: the node survives and is frozen
        assert gc.get_freeze_count() > 0 and gone() is not None
        held.clear()  # garbage now, but frozen: young collections never look at it
        collect_garbage(policy)
        assert gone() is not None and policy.full == 0
        # the frozen generation doubles (a busy cluster's caches grow): everything is collected once
        survivors.extend([] for _ in range(2 * gc.get_freeze_count()))
        collect_garbage(policy)  # (frozen in turn by this young collection)
        assert policy.full == 0 and gone() is not None
        survivors.extend([] for _ in range(20_000))
        assert collect_garbage(policy) > 0.0
        assert policy.full == 1 and gone() is None
    finally:
        policy.exit()
    assert gc.isenabled() == was_enabled and gc.get_freeze_count() == 0  # (everything given back)


def test_idle_bench_gives_the_collector_back() -> None:
    was = gc.isenabled()
    got = idle.run(nodes=6, tasks=60, jobs=6, cycles=2)
    assert got["churn_binds"] == 5 and got["gc_ms"] >= 0
    assert gc.isenabled() == was
