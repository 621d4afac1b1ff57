"""A template's choice kept as Python values (busched.fastpath.board) against the array path.

Random columns (few distinct totals so that ties are common, NaNs, signed zeros, rows that pass
or not, fit idle or only future idle), changed row by row as placements change them: wherever
the board answers, its choice must be `batch.pick_arrays`' on the same columns, NaN and empty
answers included, with the session's random source drawn the same number of times on the same
counts (its state compared after every choice).  Whole cycles through the board are compared
with the per-task path in tests/fastpath/test_batch_choice.py.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from busched.fastpath.batch import pick_arrays
from busched.fastpath.board import NAN, Board

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
