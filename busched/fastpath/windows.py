"""A template's draws on a sampled search's windows, kept between the walks that look at them again.

A sampled search walks from the session's rotating start for ``to_find`` passing rows
(`pick.pick_window`).  On a cluster with room every row it looks at passes, so it looks at exactly
``to_find`` rows and the next search starts right after them: the starts go round the cluster in
steps of ``to_find``, and the same few windows (5,000 nodes, 500 a search: ten) come back again and
again.  `pick_window` then counts the window's passing and idle rows, finds its best total and
counts and draws among the tied, half a dozen numpy calls over ``to_find`` rows each time, though
between two visits of a window only the rows placed on since (one per task placed: a handful, most
of them in other windows) have changed.

`Windows` keeps, per window start, what `pick_window` finds there when every row of the window
passes and fits idle (its first gradient is the whole window): the best total and the tied rows in
walk order.  The template's combined rows log every change (`Windows.changed`, from
`batch._Template._combine`; a whole recombination forgets every window), and a window seen again
takes the rows logged since: a row that no longer passes, no longer fits idle or has a NaN total
forgets the window; a row above the best becomes the only tied one; one equal to it joins the tied;
a tied one below it leaves them (none left: the window is looked at afresh).  The draw is
`pick._tied`'s: none when one row is tied, else ``rng.randrange(count)`` indexing the tied rows in
walk order.  Anything else (a window with failing rows or rows fitting only future idle, a NaN best,
a one-row window) is `pick_window`'s to answer, as before.

The reference is `pick_window` on the same columns: tests/fastpath/test_windows.py draws random
columns, changes random rows between the picks (ties made and broken, rows failing and NaN) and
compares every answer and the random source's state; the stream's choice (busched.fastpath.
streamchoice) that asks it is compared with the per-task path on whole cycles.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

import numpy as np

from busched.fastpath.pick import _run, pick_window

__all__ = ["Windows"]

LOG_MAX = 4096  # rows logged before every window is forgotten (and the log emptied)


class _Window:
    """One window's best total and its tied rows (offsets from the start, ascending: walk order),
    and where in the log it was last brought up to date."""

    __slots__ = ("pos", "n", "best", "tied")

    def __init__(self, pos: int, n: int, best: float, tied: list[int]) -> None:
        self.pos, self.n, self.best, self.tied = pos, n, best, tied


class Windows:
    """A template's kept windows (by start) and the log of its changed rows."""

    __slots__ = ("log", "at")

    def __init__(self) -> None:
        self.log: list[tuple[int, bool, bool, float]] = []  # (row, passes, fits idle, total), in order
        self.at: dict[int, _Window] = {}

    def changed(self, r: int, ok: bool, idle: bool, total: float) -> None:
        """Row ``r`` of the template's columns now holds these values."""
        self.log.append((r, ok, idle, total))

    def reset(self) -> None:
        """Every row may have changed: every window is looked at afresh."""
        self.log = []
        self.at = {}

    def pick(self, ok: np.ndarray, idle: np.ndarray, total: np.ndarray, start: int, to_find: int,
             rng: Any) -> tuple[int, int] | None:
        """`pick_window`'s answer (and draw) for these columns."""
        size = len(ok)
        n = min(to_find, size)
        w = self.at.get(start)
        if w is not None and w.n == n and self._caught_up(w, start, size):
            return self._draw(w, start, size, rng)
        if n < 2 or not 0 <= start < size:
            return pick_window(ok, idle, total, start, to_find, rng)
        # every row of the window passes and fits idle: the whole window is the bucket
        if (int(np.count_nonzero(_run(ok, start, n))) != n
                or int(np.count_nonzero(_run(idle, start, n))) != n):
            self.at.pop(start, None)
            return pick_window(ok, idle, total, start, to_find, rng)
        values = _run(total, start, n)
        best = values[values.argmax()]
        if best != best:  # NaN: the per-task path scores node by node
            self.at.pop(start, None)
            return None
        if len(self.log) >= LOG_MAX:
            self.reset()
        w = self.at[start] = _Window(len(self.log), n, float(best), (values == best).nonzero()[0].tolist())
        return self._draw(w, start, size, rng)

    def _caught_up(self, w: _Window, start: int, size: int) -> bool:
        """Take the rows logged since ``w`` was last brought up to date; False when the window must
        be looked at afresh (`pick` then replaces or drops it)."""
        log = self.log
        end = len(log)
        if w.pos == end:
            return bool(w.tied)
        n, best, tied = w.n, w.best, w.tied
        for i in range(w.pos, end):
            r, ok, idle, value = log[i]
            d = r - start
            if d < 0:
                d += size
            if d >= n:
                continue
            if not (ok and idle) or value != value:
                return False
            if value > best:
                best = value
                tied = [d]
            elif value == best:
                at = bisect_left(tied, d)
                if at == len(tied) or tied[at] != d:
                    tied.insert(at, d)
            else:
                at = bisect_left(tied, d)
                if at < len(tied) and tied[at] == d:
                    del tied[at]
        w.pos, w.best, w.tied = end, best, tied
        return bool(tied)

    @staticmethod
    def _draw(w: _Window, start: int, size: int, rng: Any) -> tuple[int, int]:
        tied = w.tied
        k = len(tied)
        d = tied[0] if k == 1 else tied[rng.randrange(k)]
        r = start + d
        return (r - size if r >= size else r), w.n
