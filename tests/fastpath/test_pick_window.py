"""The draw read as slices when the walk's rows all pass (busched.fastpath.pick.pick_window).

Random columns (few distinct totals so that ties are common, NaNs, signed zeros; rows that all
pass or not, fit idle or only future idle or a mix), random starts and search sizes (windows that
wrap past the last row, wider than the passing rows, the whole cluster): `pick_window`'s answer
must be `pick_arrays`' and a plain walk's written from allocate's description, with the session's
random source drawn the same number of times on the same counts (its state compared after every
choice), and both its own slice path and its fallback must have answered.  Then whole cycles on
sampled clusters through `batch.choose` against the per-task path, the slice path taken.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from busched.fastpath import pick
from busched.fastpath.pick import pick_arrays, pick_window
from tests.fastpath.test_batch_choice import run, with_replicas
from tests.fastpath.test_kernels_select import CONFIGS
from tests.kernel_cases import random_cluster

VALUES = [0.0, -0.0, 1.0, 2.5, 7.0, 100.0, float("inf"), float("-inf"), float("nan")]


def walk(ok: list[bool], idle: list[bool], total: list[float], start: int, to_find: int,
         rng: random.Random) -> tuple[int, int] | None:
    """Allocate's choice node by node: walk from ``start`` (wrapping) until ``to_find`` rows pass,
    the rows fitting idle if any (else all found), the best total, NaN declining, the tied drawn."""
    size = len(ok)
    found: list[int] = []
    processed = 0
    for i in range(size):
        if len(found) >= to_find:
            break
        r = (start + i) % size
        processed += 1
        if ok[r]:
            found.append(r)
    if not found:
        return None
    bucket = [r for r in found if idle[r]] or found
    if len(bucket) == 1:
        return bucket[0], processed
    if any(total[r] != total[r] for r in bucket):
        return None
    best = max(total[r] for r in bucket)
    tied = [r for r in bucket if total[r] == best]
    return (tied[0] if len(tied) == 1 else tied[rng.randrange(len(tied))]), processed


def columns(rng: random.Random, size: int) -> tuple[list[bool], list[bool], list[float]]:
    p_ok = rng.choice([1.0, 1.0, 0.97, 0.6, 0.1])
    p_idle = rng.choice([1.0, 0.0, 0.5, 0.95])
    values = VALUES if rng.random() < 0.3 else VALUES[:-1]
    values = values[:rng.choice([2, 3, len(values)])] if rng.random() < 0.5 else values
    return ([rng.random() < p_ok for _ in range(size)], [rng.random() < p_idle for _ in range(size)],
            [rng.choice(values) for _ in range(size)])


@pytest.mark.parametrize("seed", range(30))
def test_the_window_draws_as_the_arrays_and_the_plain_walk(seed):
    rng = random.Random(seed)
    size = rng.choice([1, 2, 3, 8, 64, 300, 1000])
    ok, idle, total = columns(rng, size)
    arrays = np.array(ok, dtype=bool), np.array(idle, dtype=bool), np.array(total)
    ours, theirs, plain = random.Random(seed), random.Random(seed), random.Random(seed)
    for _ in range(80):
        start = rng.choice([0, 0, rng.randrange(size), size - 1])
        to_find = rng.choice([1, 2, size, size + 3, max(1, size // 3), max(1, size - start), 100])
        got = pick_window(*arrays, start, to_find, ours)
        assert got == pick_arrays(*arrays, start, to_find, theirs) == walk(ok, idle, total, start, to_find, plain)
        assert ours.getstate() == theirs.getstate() == plain.getstate()
        for _ in range(rng.choice([1, 1, 3])):  # a placement changes a row or a few
            r = rng.randrange(size)
            row = columns(rng, 1)
            ok[r], idle[r], total[r] = row[0][0], row[1][0], row[2][0]
            for a, v in zip(arrays, (ok[r], idle[r], total[r]), strict=True):
                a[r] = v


def test_every_way_through_answers_on_random_columns():
    """Over many columns each way decides (so the oracle above tests them all): a run whose rows all
    pass, a run widened past failing rows, and `pick_arrays` after `pick.ROUNDS` widenings."""
    seen = {"run": 0, "widened": 0, "arrays": 0}
    for seed in range(300):
        rng = random.Random(seed)
        size = rng.choice([8, 64, 300])
        ok, _, _ = columns(rng, size)
        walked = pick._walked(np.array(ok, dtype=bool), rng.randrange(size), rng.choice([1, 5, size // 2, size]))
        seen["arrays" if walked is None else "run" if walked[1] is None else "widened"] += 1
    assert min(seen.values()) > 20, seen


def test_a_nan_best_declines_and_a_single_row_bucket_is_chosen_whatever_its_score():
    nan = float("nan")
    ok, idle = np.ones(6, dtype=bool), np.array([False, True, False, False, False, False])
    total = np.array([1.0, nan, 3.0, 3.0, 0.0, 0.0])
    rng = random.Random(1)
    state = rng.getstate()
    assert pick_window(ok, idle, total, 0, 6, rng) == (1, 6)  # the only idle row, NaN or not
    assert pick_window(ok, np.zeros(6, dtype=bool), total, 0, 4, rng) is None  # a NaN among the found
    assert rng.getstate() == state  # no draw made
    assert pick_window(ok, np.zeros(6, dtype=bool), total, 2, 3, rng) in ((2, 3), (3, 3))


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("seed", range(2))
def test_sampled_cycles_choose_as_the_per_task_path(monkeypatch, config, seed):
    """Whole cycles on clusters the search samples (to_find below the node count), through the slice path."""
    taken = {"slices": 0}
    real = pick.pick_window

    def counted(ok, idle, total, start, to_find, rng):
        taken["slices"] += to_find < len(ok) and pick._walked(ok, start, to_find) is not None
        return real(ok, idle, total, start, to_find, rng)

    monkeypatch.setattr("busched.fastpath.batch.pick_window", counted)
    rng = random.Random(4400 + seed)
    spec = with_replicas(rng, random_cluster(rng, nodes=rng.choice([300, 420]), fancy=False), sized=seed == 0)
    counts = {"answered": 0, "declined": 0}
    fast = run(spec, CONFIGS[config], seed, True, monkeypatch, counts)
    plain = run(spec, CONFIGS[config], seed, False, monkeypatch, counts)
    assert fast["decisions"]
    assert fast == plain
    assert taken["slices"] > 10


def test_the_last_widening_is_read() -> None:
    """Four rows failing one after another: the fourth widening reaches the fifth passing row, and the run ends
    there (before, its count was not looked at and the walk went to `pick_arrays` again)."""
    from busched.fastpath import pick

    ok = np.ones(100, dtype=bool)
    ok[4:8] = False
    walked = pick._walked(ok, 0, 5)
    assert walked is not None and walked[0] == 9 and walked[1] is not None
    assert walked[1].tolist() == [0, 1, 2, 3, 8]


def test_the_tied_draw_is_the_nonzero_one_on_every_small_array() -> None:
    """`_tied` (its faster branch included) against ``nonzero()[0][j]`` on every bool array up to length 10, with a
    stand-in random source returning each j: the same row and the same single randrange call."""
    import itertools

    from busched.fastpath import pick

    class _Rng:
        def __init__(self, j: int) -> None:
            self.j, self.calls = j, []

        def randrange(self, n: int) -> int:
            self.calls.append(n)
            return self.j

    for size in range(1, 11):
        for bits in itertools.product((False, True), repeat=size):
            tied = np.array(bits, dtype=bool)
            where = tied.nonzero()[0]
            for j in range(max(1, len(where))):
                if not len(where):
                    continue
                rng = _Rng(j)
                got = pick._tied(tied, rng)
                assert got == int(where[j if len(where) > 1 else 0]), (bits, j)
                assert rng.calls == ([len(where)] if len(where) > 1 else []), (bits, j)
