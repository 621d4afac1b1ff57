"""A template's choice kept as Python values (busched.fastpath.board) against the array path.

Random columns (few distinct totals so that ties are common, NaNs, signed zeros, rows that pass
or not, fit idle or only future idle), changed row by row as placements change them: wherever
the board answers, its choice must be `batch.pick_arrays`' on the same columns, NaN and empty
answers included, with the session's random source drawn the same number of times on the same
counts (its state compared after every choice).  Then `batch.choose` through templates kept as
lists against the same templates kept as arrays, placement after placement, walks sampled or not.
Whole cycles through the board are compared with the per-task path in
tests/fastpath/test_batch_choice.py.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from busched.api.task import TaskStatus
from busched.builtin import open_session
from busched.fastpath import FastPathSettings, batch
from busched.fastpath.batch import pick_arrays
from busched.fastpath.board import NAN, Board
from busched.framework.config import DEFAULT_CONFIG, load_config
from busched.framework.statement import Statement
from tests.fastpath.test_batch_choice import with_shaped_replicas
from tests.kernel_cases import cache_of, random_cluster

VALUES = [0.0, -0.0, 1.0, 2.5, 2.5, 7.0, 100.0, 250.0, float("nan")]


def column(rng: random.Random, size: int, nan: bool) -> tuple[list[bool], list[bool], list[float]]:
    values = VALUES if nan else VALUES[:-1]
    return ([rng.random() < 0.7 for _ in range(size)], [rng.random() < 0.6 for _ in range(size)],
            [rng.choice(values) for _ in range(size)])


def reference(ok: list[bool], idle: list[bool], total: list[float], start: int, to_find: int,
              rng: random.Random) -> int | None:
    got = pick_arrays(np.array(ok, dtype=bool), np.array(idle, dtype=bool), np.array(total), start, to_find, rng)
    if got is None:
        # no row passes, or the best is NaN: told apart as the board tells them
        return None if not any(ok) else NAN
    assert got[1] == len(ok)  # every node walked: the only walks the board decides
    return got[0]


@pytest.mark.parametrize("seed", range(40))
def test_the_board_chooses_as_the_arrays(seed):
    rng = random.Random(seed)
    size = rng.choice([1, 2, 3, 8, 20, 100])
    nan = seed % 4 == 3
    ok, idle, total = column(rng, size, nan)
    board = Board(list(ok), list(idle), list(total))
    ours, theirs = random.Random(seed), random.Random(seed)
    answered = 0
    for _ in range(60):
        start = rng.randrange(size)
        to_find = rng.choice([size, size + 5, max(1, size // 2), 100])
        if board.answers(start, to_find):
            answered += 1
            want = reference(ok, idle, total, start, to_find, theirs)
            assert board.pick(ours, start) == want
            assert ours.getstate() == theirs.getstate()
        else:
            assert 0 < to_find < size and sum(ok) >= to_find
        for _ in range(rng.choice([1, 1, 1, 3])):  # a placement changes a row or a few
            r = rng.randrange(size)
            row = column(rng, 1, nan)
            ok[r], idle[r], total[r] = row[0][0], row[1][0], row[2][0]
            board.set_row(r, ok[r], idle[r], total[r])
    assert answered > 20
    # the board's index holds every choosable row once, under its class and total
    again = Board(list(ok), list(idle), list(total))
    assert (board.count, board.nans) == (again.count, again.nans)
    assert board.groups == again.groups


def test_a_single_row_bucket_is_chosen_even_with_a_nan_score():
    board = Board([True, True], [True, False], [float("nan"), 1.0])
    rng = random.Random(1)
    state = rng.getstate()
    assert board.pick(rng, 1) == 0 == reference([True, True], [True, False], [float("nan"), 1.0], 1, 2, rng)
    assert rng.getstate() == state  # no draw


def test_tied_rows_are_drawn_in_walk_order():
    total = [5.0] * 6
    board = Board([True] * 6, [True] * 6, list(total))
    for start in range(6):
        ours, theirs = random.Random(start), random.Random(start)
        assert board.pick(ours, start) == reference([True] * 6, [True] * 6, total, start, 6, theirs)
        assert ours.getstate() == theirs.getstate()


@pytest.mark.parametrize("seed", range(4))
def test_a_template_kept_as_lists_chooses_as_one_kept_as_arrays(monkeypatch, seed):
    """`batch.choose` through a plain template (lists and a board, the array path when the walk
    is sampled) and through the same template kept as arrays, placement after placement, walks
    sampled or not: the same node, the same count walked, the same draws."""
    rng = random.Random(40 + seed)
    spec = with_shaped_replicas(rng, random_cluster(rng, nodes=rng.choice([12, 40]), jobs=4, fancy=True), sized=True)
    sessions = [open_session(cache_of(spec, FastPathSettings(kernels=True)).snapshot(), load_config(DEFAULT_CONFIG),
                             seed=seed) for _ in range(2)]
    stmts = [Statement(ssn) for ssn in sessions]
    reps = [sorted((t for j in ssn.jobs.values() for t in j.tasks_in(TaskStatus.Pending) if t.job.startswith("ns/rep")),
                   key=lambda t: t.key) for ssn in sessions]
    plain_max = batch.PLAIN_MAX
    placed = 0
    kinds = set()
    for step in range(min(60, len(reps[0]))):
        size = len(sessions[0].node_list)
        start, to_find = (0, size) if step % 3 != 2 else (rng.randrange(size), rng.randrange(1, size))
        got = []
        for i, ssn in enumerate(sessions):
            monkeypatch.setattr(batch, "PLAIN_MAX", plain_max if i == 0 else 0)
            task = reps[i][step]
            answer = batch.choose(ssn, task, ssn.node_list, ssn.predicate_for_allocate, start, to_find)
            got.append((task.key, None if answer is None else (answer[0].name, answer[1])))
            if answer is not None:
                stmts[i].allocate(task, answer[0].name)
            kinds.update((i, t.board is not None) for t in ssn.arrays.cache.get("batch-choice", ()))
        assert got[0] == got[1]
        assert sessions[0].rng.getstate() == sessions[1].rng.getstate()
        placed += got[0][1] is not None
    assert placed
    assert (0, True) in kinds and (1, True) not in kinds  # plain templates on one side only
    # and the columns themselves: the plain templates' lists (as arrays) are the array templates' vectors
    plain, arrays = (sessions[i].arrays.cache["batch-choice"] for i in range(2))
    for a, b in zip(plain, arrays):
        assert a.task.key == b.task.key and a.declined == b.declined
        if not a.declined:
            for mine, theirs in zip(a.arrays(), b.arrays()):
                assert np.array_equal(mine, theirs)
