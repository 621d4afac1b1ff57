"""A template's kept windows (busched.fastpath.windows.Windows.pick) against `pick.pick_window` on the
same columns, the reference.

Random columns (every row passing and fitting idle, or some failing, some fitting only future idle;
totals from a few values so rows tie, now and then a NaN), a run of picks whose starts rotate as the
stream's searches do (each start after the rows the last walk looked at) or jump, and between two
picks a few rows changed as `batch._Template._combine` changes them (the columns written, the
change logged), sometimes many at once as `_combine_all` does (new columns, every window
forgotten).  Every answer (row and rows looked at, or None) and the random source's state after it
must be `pick_window`'s; the kept windows must really have answered most picks.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from busched.fastpath import windows as windows_module
from busched.fastpath.pick import pick_window
from busched.fastpath.windows import Windows


class Columns:
    """A template's combined columns as `batch._Template` keeps them, with its windows told of changes."""

    def __init__(self, rng: random.Random, size: int, values: list[float], p_fail: float, p_future: float,
                 p_nan: float = 0.0) -> None:
        self.rng, self.values, self.p_fail, self.p_future, self.p_nan = rng, values, p_fail, p_future, p_nan
        self.windows = Windows()
        self.all(size)

    def row(self) -> tuple[bool, bool, float]:
        rng = self.rng
        total = float("nan") if self.p_nan and rng.random() < self.p_nan else rng.choice(self.values)
        return rng.random() >= self.p_fail, rng.random() >= self.p_future, total

    def all(self, size: int) -> None:
        """Every row anew (`_combine_all`)."""
        rows = [self.row() for _ in range(size)]
        self.ok = np.array([r[0] for r in rows], dtype=bool)
        self.idle = np.array([r[1] for r in rows], dtype=bool)
        self.total = np.array([r[2] for r in rows], dtype=float)
        self.windows.reset()

    def change(self, r: int) -> None:
        """Row ``r`` anew (`_combine`): the columns written, the change logged as they hold it."""
        ok, idle, total = self.row()
        self.ok[r], self.idle[r], self.total[r] = ok, idle, total
        self.windows.changed(r, self.ok.item(r), self.idle.item(r), self.total.item(r))


def picks(seed: int, size: int, values: list[float], p_fail: float, p_future: float, rounds: int,
          jumps: float, changes: int, p_nan: float = 0.0, to_find: int = 0) -> dict:
    """Run ``rounds`` picks both ways; the counts of what happened."""
    rng = random.Random(seed)
    cols = Columns(rng, size, values, p_fail, p_future, p_nan)
    kept_rng, ref_rng = random.Random(seed + 1), random.Random(seed + 1)
    to_find = to_find or rng.randint(1, size)
    start = rng.randrange(size)
    counts = {"answered": 0, "none": 0}
    for _ in range(rounds):
        got = cols.windows.pick(cols.ok, cols.idle, cols.total, start, to_find, kept_rng)
        want = pick_window(cols.ok, cols.idle, cols.total, start, to_find, ref_rng)
        assert got == want, (start, to_find)
        assert kept_rng.getstate() == ref_rng.getstate()
        counts["answered" if got is not None else "none"] += 1
        # the row placed on, and now and then others, change before the next pick
        if got is not None:
            cols.change(got[0])
            start = (start + got[1]) % size
        for _ in range(rng.randint(0, changes)):
            cols.change(rng.randrange(size))
        if rng.random() < jumps:
            start = rng.randrange(size)
        if rng.random() < 0.01:
            cols.all(size)
        if rng.random() < 0.01:
            to_find = rng.randint(1, size)
    return counts


def kept_answers(monkeypatch) -> dict:
    """Count the picks `Windows.pick` left to `pick_window` (the rest the kept windows answered)."""
    counts = {"left": 0}
    real = windows_module.pick_window

    def left(*a, **kw):
        counts["left"] += 1
        return real(*a, **kw)

    monkeypatch.setattr(windows_module, "pick_window", left)
    return counts


@pytest.mark.parametrize("seed", range(12))
def test_kept_windows_answer_as_pick_window_where_every_row_passes(monkeypatch, seed):
    """The stream's common case: every row passes and fits idle, the placed row's total moves (up or
    down), ties made and broken, the starts rotating with a jump now and then."""
    left = kept_answers(monkeypatch)
    rng = random.Random(seed)
    size = rng.choice([7, 40, 100, 500])
    values = [rng.choice([0.0, 1.5, 3.0, 7.0]) for _ in range(rng.randint(1, 4))]
    counts = picks(seed, size, values, 0.0, 0.0, 600, jumps=0.05, changes=rng.choice([0, 1, 3]))
    assert counts["answered"] == 600
    assert left["left"] < 600 // 4, left  # the kept windows really answered


@pytest.mark.parametrize("seed", range(12))
def test_kept_windows_answer_as_pick_window_on_any_columns(monkeypatch, seed):
    """Failing rows (the walk widened), rows fitting only future idle (the idle bucket), NaN totals
    (no answer), one-row windows, windows wider than the passing rows."""
    rng = random.Random(100 + seed)
    size = rng.choice([2, 9, 60, 300])
    values = [rng.choice([0.0, 2.0, 5.0]) for _ in range(rng.randint(1, 3))]
    counts = picks(100 + seed, size, values, rng.choice([0.0, 0.02, 0.3]), rng.choice([0.0, 0.01, 0.5]),
                   400, jumps=0.2, changes=rng.choice([0, 2, 8]), p_nan=0.002 if seed % 3 == 0 else 0.0)
    assert counts["answered"] > 0
    if seed % 3 == 0:
        assert counts["none"] > 0  # a NaN best (or no row passing) met


@pytest.mark.parametrize("seed", range(6))
def test_a_nan_total_in_a_window_where_every_row_passes(seed):
    """A row's total turning NaN in a kept window: pick_window answers None (its best is NaN), or, on
    a one-row window, that row whatever its total; and once the row is a number again, its answers."""
    rng = random.Random(300 + seed)
    size = rng.choice([5, 30, 200])
    counts = {"answered": 0, "none": 0}
    for to_find in (1, 2, max(2, size // 3), size):
        got = picks(300 + seed + to_find, size, [1.0, 4.0], 0.0, 0.0, 150, jumps=0.1, changes=1, p_nan=0.05,
                    to_find=to_find)
        counts = {k: counts[k] + got[k] for k in counts}
    assert counts["answered"] > 0 and counts["none"] > 0, counts


def test_a_window_whose_tied_rows_all_leave_is_looked_at_afresh():
    """Every tied row placed on and scored lower (least-requested spreading): the window's tied rows
    run out one by one and the window is looked at afresh, over and over, as pick_window's draws."""
    size, to_find = 1000, 100
    cols = Columns(random.Random(0), size, [5.0], 0.0, 0.0)
    kept_rng, ref_rng = random.Random(9), random.Random(9)
    start = 0
    for _ in range(3000):
        got = cols.windows.pick(cols.ok, cols.idle, cols.total, start, to_find, kept_rng)
        assert got == pick_window(cols.ok, cols.idle, cols.total, start, to_find, ref_rng)
        r = got[0]
        cols.total[r] -= 1.0  # the placed row scores lower
        cols.windows.changed(r, True, True, cols.total.item(r))
        start = (start + got[1]) % size
    assert kept_rng.getstate() == ref_rng.getstate()
    assert len(cols.windows.at) <= size // to_find


@pytest.mark.parametrize("seed", range(4))
def test_windows_of_another_length_or_cluster_size_are_looked_at_afresh(seed):
    """The windows kept are all of one length and one cluster size: a pick with another ``to_find``
    (or on columns of another size) forgets them, and the answers stay pick_window's."""
    rng = random.Random(400 + seed)
    kept_rng, ref_rng = random.Random(seed), random.Random(seed)
    windows = Windows()
    for _ in range(60):
        size = rng.choice([50, 80])
        cols = Columns(rng, size, [1.0, 2.0], 0.0, 0.0)
        cols.windows = windows  # (the columns anew, the same windows: as told by `reset`)
        windows.reset()
        for _ in range(20):
            to_find = rng.choice([10, 25])
            start = rng.randrange(size)
            got = windows.pick(cols.ok, cols.idle, cols.total, start, to_find, kept_rng)
            assert got == pick_window(cols.ok, cols.idle, cols.total, start, to_find, ref_rng)
            cols.change(got[0])
        assert kept_rng.getstate() == ref_rng.getstate()


@pytest.mark.parametrize("size", [1003, 1000, 997])
def test_kept_windows_stay_few_when_the_size_is_not_a_multiple_of_to_find(size):
    """The review's finding on tp8: with 1,003 rows and 100 a walk, the starts drift by 97 a lap and
    never come back within a lap; a window kept at every new start piled up (615 kept after 3,000
    picks, each placed row walked into hundreds of them).  However the starts go round, the kept
    windows stay about one a start of a lap (and 1,000 rows, the starts coming back: the windows
    still answer); a start not walked again within a lap keeps no window."""
    to_find = 100
    cols = Columns(random.Random(0), size, [5.0], 0.0, 0.0)
    kept_rng, ref_rng = random.Random(9), random.Random(9)
    start, most, kept = 0, 0, 0
    for _ in range(3000):
        kept += start in cols.windows.at
        got = cols.windows.pick(cols.ok, cols.idle, cols.total, start, to_find, kept_rng)
        assert got == pick_window(cols.ok, cols.idle, cols.total, start, to_find, ref_rng)
        r = got[0]
        cols.total[r] -= 1.0
        cols.windows.changed(r, True, True, cols.total.item(r))
        start = (start + got[1]) % size
        most = max(most, len(cols.windows.at))
    assert kept_rng.getstate() == ref_rng.getstate()
    assert most <= size // to_find + 1, most
    assert len(cols.windows.starts) == len(cols.windows.at)
    if size % to_find:  # no start comes back within a lap: none is worth keeping (nor its upkeep)
        assert most == 0, most
    else:
        assert kept > 2000, kept  # the starts come back: the kept windows answer


def test_at_most_a_laps_worth_of_windows_kept_the_oldest_dropped():
    """Starts walked twice in a row, each a new one (every second walk would keep a window): no more
    than ``size // n + 1`` windows are kept, the oldest making room, and the answers
    stay pick_window's."""
    size, to_find = 300, 50
    cols = Columns(random.Random(1), size, [2.0, 3.0], 0.0, 0.0)
    kept_rng, ref_rng = random.Random(3), random.Random(3)
    most = 0
    for i in range(200):
        start = (i // 2) * 7 % size
        got = cols.windows.pick(cols.ok, cols.idle, cols.total, start, to_find, kept_rng)
        assert got == pick_window(cols.ok, cols.idle, cols.total, start, to_find, ref_rng)
        cols.change(got[0])
        most = max(most, len(cols.windows.at))
        assert sorted(cols.windows.at) == cols.windows.starts
        if i % 2 and i > 20:  # the start just walked twice is kept, the oldest of the others dropped
            assert start in cols.windows.at and ((i // 2 - 7) * 7 % size) not in cols.windows.at
    assert kept_rng.getstate() == ref_rng.getstate()
    assert most == size // to_find + 1
