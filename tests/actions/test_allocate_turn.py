"""Allocate's per-job turn with less around it (busched.actions.allocate, busched.framework.pqueue,
busched.framework.runs): job queues, and a job's keyed pending tasks, sorted once instead of heaped
(`KeyedQueue`, allocate's and enqueue's), a job's only task held without a heap (`OneTask`), the
predicate helper and the handler run kept from turn to turn while they hold nothing.

`KeyedQueue` against the heap it replaces, on random keys and interleaved pushes and pops (ties
included: then it must make the heap's own moves).  Then whole cycles on random clusters with
replicas of one template (single-task jobs of one shape in two queues, or gangs) run three ways:
as allocate runs them now, with every one of those pieces put back as it was (heaps, a heap per
job, a fresh helper per turn) with the kernels on, and with the kernels off (the plain reference).
Decisions in order, phases, pipelined tasks, fit errors, conditions, the search's rotated start,
the random source's state after the cycle must be equal; against the kernels-on run as it was,
also drf's and proportion's state and every job's maps in order, sums and sub-jobs.
"""

from __future__ import annotations

import random

import pytest

from busched.actions import allocate, util
from busched.api.task import TaskInfo
from busched.builtin import run_cycle
from busched.fastpath import FastPathSettings
from busched.framework import pqueue
from busched.framework.config import load_config
from busched.framework.pqueue import KeyedQueue, PriorityQueue
from tests.fastpath.test_batch_choice import with_replicas
from tests.fastpath.test_kernels_select import CONFIGS, outcome
from tests.framework.test_handler_runs import _handlers_state, _job_state
from tests.kernel_cases import cache_of, random_cluster


def _never(a: object, b: object) -> bool:
    raise AssertionError("a keyed queue never calls less")


def _drive(q, rng: random.Random, keys: list, first: int) -> list:
    """Push ``first`` keys, then pop and push at random until empty: the pops, with len and empty."""
    got = []
    it = iter(keys)
    for _ in range(first):
        q.push(next(it))
    left = len(keys) - first
    while not q.empty() or left:
        if left and (q.empty() or rng.random() < 0.3):
            q.push(next(it))
            left -= 1
        else:
            got.append((q.pop(), len(q), q.empty()))
    return got


@pytest.mark.parametrize("seed", range(30))
def test_keyed_queue_pops_as_the_heap(seed):
    rng = random.Random(seed)
    n = rng.choice([0, 1, 2, 7, 60, 300])
    ties = seed % 3 == 0  # keys that tie: (key, item) pairs then compare items, as the heap's do
    ids = list(range(n))
    rng.shuffle(ids)  # (ids not in push order: a tie between a sorted item and a later one compares the items)
    keys = [((rng.randint(0, 3 if ties else 10**6), rng.random() if not ties else 0.0), i) for i in ids]
    first = rng.randint(0, n)

    def key(item):
        return item[0]

    want = _drive(PriorityQueue(_never, key=key), random.Random(seed), keys, first)
    q = KeyedQueue(_never, key)
    got = _drive(q, random.Random(seed), keys, first)
    assert got == want
    assert len(got) == n


@pytest.mark.parametrize("seed", range(10))
def test_keyed_queue_ties_between_a_sorted_item_and_a_later_one_pop_as_the_heap(seed):
    """No tie among the items pushed before the first pop (so no fall back to the heap), but items pushed
    after it tie with them: the heap then compares the items, and so must the queue."""
    rng = random.Random(seed)
    early = [((k,), rng.randint(0, 99)) for k in rng.sample(range(20), 8)]
    late = [((rng.choice(early)[0][0],), rng.randint(0, 99)) for _ in range(8)]

    def drive(q):
        for e in early:
            q.push(e)
        out = [q.pop()]
        for e in late:
            q.push(e)
            if rng2.random() < 0.4:
                out.append(q.pop())
        while not q.empty():
            out.append(q.pop())
        return out

    rng2 = random.Random(seed)
    want = drive(PriorityQueue(_never, key=lambda v: v[0]))
    rng2 = random.Random(seed)
    assert drive(KeyedQueue(_never, lambda v: v[0])) == want


def test_keyed_queue_items_and_clone():
    q = KeyedQueue(_never, lambda v: v)
    for v in (5, 3, 9):
        q.push(v)
    assert q.pop() == 3
    q.push(1)
    c = q.clone()
    assert sorted(q.items()) == [1, 5, 9]
    assert [c.pop() for _ in range(3)] == [1, 5, 9] and c.empty()
    assert len(q) == 3  # the clone popped its own copy


def _as_before(monkeypatch) -> None:
    """Every piece of the shorter turn put back as it was (kernels on)."""
    def heaped(less, key):
        return PriorityQueue(less, key=key)

    def one_heap(task):
        q = PriorityQueue(_never)  # a job's only task is never compared
        q.push(task)
        return q

    monkeypatch.setattr(allocate, "KeyedQueue", heaped)
    monkeypatch.setattr(util, "KeyedQueue", heaped)
    monkeypatch.setattr(allocate, "OneTask", one_heap)
    monkeypatch.setattr(allocate.AllocateAction, "reuse_helper", False)


def run(spec, config: str, seed: int, kernels: bool) -> dict:
    ends: dict = {}

    def before_close(ssn):
        ends["handlers"] = _handlers_state(ssn)
        ends["jobs"] = {u: _job_state(j) for u, j in sorted(ssn.jobs.items())}

    ssn = run_cycle(cache_of(spec, FastPathSettings(kernels=kernels)).snapshot(), load_config(config), seed=seed,
                    before_close=before_close)
    got = outcome(ssn)
    got["rng"] = ssn.rng.random()  # the same draws were made
    got.update(ends)
    return got


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("seed", range(5))
def test_the_turn_decides_as_before(monkeypatch, config, seed):
    rng = random.Random(1700 + seed)
    spec = with_replicas(rng, random_cluster(rng, nodes=rng.choice([8, 60, 150]), fancy=seed % 3 != 2),
                         sized=seed % 4 == 3)
    sorted_pops = []
    sorted_tasks = []  # the task queues sorted (a gang's pending tasks, keyed: allocate's)
    real_seal = KeyedQueue._seal

    def seal(self):
        real_seal(self)
        sorted_pops.append(len(self._sorted))
        if self._sorted and isinstance(self._sorted[0][1], TaskInfo):
            sorted_tasks.append(len(self._sorted))

    with monkeypatch.context() as m:
        m.setattr(KeyedQueue, "_seal", seal)
        now = run(spec, CONFIGS[config], seed, True)
    assert now["decisions"], "nothing placed: the comparison would be empty"
    assert max(sorted_pops) > 1, "no job queue was sorted: the comparison would not cover it"
    if seed % 4 == 3:  # gangs of 12 to 40 tasks: their task queues were sorted, not heaped
        assert sorted_tasks and max(sorted_tasks) >= 12
    with monkeypatch.context() as m:
        _as_before(m)
        before = run(spec, CONFIGS[config], seed, True)
    assert now == before
    plain = run(spec, CONFIGS[config], seed, False)
    for k in ("handlers", "jobs"):  # (the plain path's plugin bookkeeping may be kept differently)
        plain.pop(k)
        now.pop(k)
    assert now == plain


def test_a_job_queue_of_pqueue_is_the_keyed_one():
    """allocate and enqueue take the queue from the module the tests above replace."""
    assert allocate.KeyedQueue is pqueue.KeyedQueue and util.KeyedQueue is pqueue.KeyedQueue
