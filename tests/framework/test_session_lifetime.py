"""A session and all it holds are freed once nobody holds it: a long-running scheduler cycles
forever, so anything that keeps old sessions reachable (a global map keyed by session whose value
leads back to it, a chain of sessions through carried kernel state) grows without bound."""

from __future__ import annotations

import gc
import random
import weakref

from busched.builtin import run_cycle
from busched.fastpath.fit import NodeArrays
from busched.framework import points
from busched.framework.config import DEFAULT_CONFIG, load_config
from tests.helpers import sessions_left_for_the_collector
from tests.kernel_cases import cache_of, random_cluster


def test_old_sessions_are_freed():
    cache = cache_of(random_cluster(random.Random(3), nodes=40))
    cfg = load_config(DEFAULT_CONFIG)
    refs = []
    for i in range(4):
        ssn = run_cycle(cache.snapshot(), cfg, seed=0, uid=f"c{i}")
        assert ssn.decisions or i > 0  # the first cycle places something: the kernels and views were used
        _ = ssn.arrays  # node arrays built (and carried to the next session's)
        refs.append(weakref.ref(ssn))
        del ssn
    gc.collect()
    # the newest may stay reachable through what the cache keeps for the next cycle (its lent
    # nodes' listeners); none older may
    alive = [i for i, r in enumerate(refs[:-1]) if r() is not None]
    assert not alive, f"sessions {alive} of {len(refs)} still reachable"
    assert len([o for o in gc.get_objects() if isinstance(o, NodeArrays)]) <= 1


def test_a_released_session_leaves_nothing_for_the_collector():
    """The scheduler releases each session once it has read it (`Session.release`): the session, its pod
    view and its plugins' state are then freed by reference counting, so its collector (which collects
    rarely, busched.scheduler.memory) is not what keeps a running scheduler's memory from growing."""
    cache = cache_of(random_cluster(random.Random(5), nodes=40))
    cfg = load_config(DEFAULT_CONFIG)
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        refs = []
        for i in range(3):
            ssn = run_cycle(cache.snapshot(), cfg, seed=0, uid=f"r{i}")
            assert "pods" in ssn.shared and ssn.plugins  # the pod view and the plugins were built
            decided = list(ssn.decisions)
            ssn.release()
            assert ssn.decisions == decided and ssn.jobs  # what it read and decided stays readable
            assert not ssn.plugins and not ssn.hooks.callbacks(points.JOB_VALID)
            refs.append(weakref.ref(ssn))
            del ssn
        # freed as the last reference went: no collection has run
        assert [r() is None for r in refs] == [True] * len(refs)
        left = sessions_left_for_the_collector()
        assert not left, f"left for the collector: {left}"
    finally:
        if was:
            gc.enable()
