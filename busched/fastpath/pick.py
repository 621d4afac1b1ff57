"""A template's draw from its combined vectors: the reference on arrays and its one-run shortcut.

`busched.fastpath.batch` keeps, per template, where the search may find a node (``ok``), where the
request fits idle (``idle``) and every node's total score (``total``).  `pick_arrays` makes the
choice allocate's per-task path makes from them: the walk from ``start`` for ``to_find`` passing
rows (`select.feasible_scan_array`), the first non-empty gradient of the rows found, the best total
there, a draw among the tied.  It takes the passing rows' positions and then indexes ``idle`` and
``total`` with them: on a sampled search of a large cluster (2,500 of 50,000 nodes) that is four
passes over thousands of positions per task, and copies.

Most walks of a sampled search find every row they look at passing (the cluster has room: only
full or unsuitable nodes fail), so the rows found are one run ``start .. start + to_find``.
`pick_window` checks that with one count over the run and then reads ``idle`` and ``total`` as
slices (views: no positions, no copies).  A run holding failing rows is widened by what it lacks
until it holds ``to_find`` passing rows or every row (`_walked`; after `ROUNDS` widenings it takes
`pick_arrays`); a run past the last row is two slices joined.  It draws from the same random source
the same one call on the same count, indexing the tied rows in the same (walk) order, so the row and
the source's state after are `pick_arrays`' (tests/fastpath/test_pick_window.py, on random columns:
ties, NaN, wrapping windows, windows wider than the passing rows, ``to_find`` the whole cluster).

A block summary of the columns (per 64 rows: the best total and its ties, passing counts), walked by
whole blocks between two partial ends, was measured against this and left out: its cheapest case
took about twice `pick_window`'s instructions per draw with its upkeep (docs/benchmarks.md,
"Throughput at 50,000 nodes: the draw on one run").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from busched.fastpath import select

__all__ = ["pick_arrays", "pick_window"]


def pick_arrays(ok: np.ndarray, idle: np.ndarray, total: np.ndarray, start: int, to_find: int,
                rng: Any) -> tuple[int, int] | None:
    """The row chosen from a template's combined vectors and how many nodes the walk looked at:
    the walk from ``start`` for ``to_find`` passing rows, the first non-empty gradient of those
    found, the best total there, a draw from ``rng`` among the tied.  None (no draw made) when no
    row passes or the best is NaN.  `board.Board.pick` and `pick_window` give the same."""
    found, processed, _ = select.feasible_scan_array(ok, start, to_find, False)
    if not len(found):
        return None  # the per-task path records the fit errors
    on_idle = idle[found]
    k = int(np.count_nonzero(on_idle))
    # the first non-empty gradient: fits idle, else fits only future idle (every node found does)
    bucket = found if k == len(found) or not k else found[on_idle]
    if len(bucket) == 1:
        return int(bucket[0]), processed
    values = total[bucket]
    best = values[values.argmax()]
    if best != best:  # NaN: the per-task path scores node by node
        return None
    tied = (values == best).nonzero()[0]
    if len(tied) == 1:
        return int(bucket[int(tied[0])]), processed
    return int(bucket[int(tied[rng.randrange(len(tied))])]), processed


def _run(column: np.ndarray, start: int, n: int) -> np.ndarray:
    """``column``'s ``n`` rows from ``start`` on, wrapping past the last row (a view unless it wraps)."""
    size = len(column)
    start %= size
    end = start + n
    return column[start:end] if end <= size else np.concatenate((column[start:], column[:end - size]))


ROUNDS = 4  # a walk that still lacks passing rows after this many widenings takes `pick_arrays`


def _walked(ok: np.ndarray, start: int, to_find: int) -> tuple[int, np.ndarray | None] | None:
    """How many rows from ``start`` the walk looks at, and the positions in that run of the rows
    it finds (None: every row of the run).  The run is widened by what it lacks until it holds
    ``to_find`` passing rows (its last row then passes) or every row; None after `ROUNDS`."""
    size = len(ok)
    n = min(to_find, size)
    found = int(np.count_nonzero(_run(ok, start, n)))
    if found == n:
        return n, None
    for _ in range(ROUNDS):
        more = min(to_find - found, size - n)
        found += int(np.count_nonzero(_run(ok, start + n, more)))
        n += more
        if found >= to_find or n == size:  # (the last widening's count read too)
            return n, _run(ok, start, n).nonzero()[0]
    return None


def pick_window(ok: np.ndarray, idle: np.ndarray, total: np.ndarray, start: int, to_find: int,
                rng: Any) -> tuple[int, int] | None:
    """`pick_arrays`' answer (and draw), the walk's rows read as one run of slices."""
    size = len(ok)
    walked = _walked(ok, start, to_find) if to_find > 0 and 0 <= start < size else None
    if walked is None:
        return pick_arrays(ok, idle, total, start, to_find, rng)
    n, found = walked  # the run's i-th row is row (start + i) % size
    on_idle = _run(idle, start, n)
    values = _run(total, start, n)
    if found is None:  # every row of the run passes
        k = int(np.count_nonzero(on_idle))
        at = None if k == n or not k else on_idle.nonzero()[0]
    else:
        if not len(found):
            return None  # no row passes: the per-task path records the fit errors
        on_idle = on_idle[found]
        k = int(np.count_nonzero(on_idle))
        at = found if k == len(found) or not k else found[on_idle]
    # the first non-empty gradient: fits idle, else fits only future idle (every row found does)
    if at is not None:
        if len(at) == 1:
            return (start + int(at[0])) % size, n
        values = values[at]
    elif n == 1:
        return start, n
    best = values[values.argmax()]
    if best != best:  # NaN: the per-task path scores node by node
        return None
    i = _tied(values == best, rng)
    return (start + (i if at is None else int(at[i]))) % size, n


def _tied(tied: np.ndarray, rng: Any) -> int:
    """``tied.nonzero()[0][rng.randrange(count)]`` (no draw when one is tied), without listing
    every tied position when most are: the j-th tied one is at ``j`` plus the untied before it, so
    within ``untied + 1`` places from ``j``."""
    count = int(np.count_nonzero(tied))
    if count == 1:
        return int(tied.argmax())
    j = rng.randrange(count)
    untied = len(tied) - count
    if untied >= count:
        return int(tied.nonzero()[0][j])
    before = int(np.count_nonzero(tied[:j]))  # tied positions before position j
    return j + int(tied[j:j + untied + 1].nonzero()[0][j - before])
