"""A template's draws on a sampled search's windows, kept between the walks that look at them again.

A sampled search walks from the session's rotating start for ``to_find`` passing rows
(`pick.pick_window`).  On a cluster with room every row it looks at passes, so it looks at exactly
``to_find`` rows and the next search starts right after them: the starts go round the cluster in
steps of ``to_find``.  When the cluster's size is a multiple of ``to_find`` the same few windows
(5,000 nodes, 500 a search: ten) come back again and again; when it is not (5,003 nodes) the start
drifts by the remainder every lap and a window comes back only after thousands of walks, if at all.
At each walk `pick_window` counts the window's passing and idle rows, finds its best total and
counts and draws among the tied, half a dozen numpy calls over ``to_find`` rows each time, though
between two visits of a window only the rows placed on since (one per task placed: a handful, most
of them in other windows) have changed.

`Windows` keeps, per window start, what `pick_window` finds there when every row of the window
passes and fits idle (its first gradient is the whole window): the best total and the tied rows in
walk order.  It keeps one only for a start walked again within a lap (``size // n + 1`` walks,
``n`` the window's length), and at most that many, the oldest dropped: any other
start takes `pick_window`'s draw made in place.  (tp8 kept a window at every new start and never
dropped one: on a size no multiple of ``to_find`` they piled up toward one per start, every placed
row walked into hundreds of them, and allocate ran 4-16 times slower, 1 GB at 50,003 nodes; the
review of tp8, docs/benchmarks.md.)  The template's combined rows tell it of every change (`Windows.changed`, from
`batch._Template._combine`; a whole recombination forgets every window), and each kept window that
holds the row (found by bisecting the kept starts: the windows are all ``n`` rows long) takes it at
once: a row that no longer passes, no longer fits idle or has a NaN total forgets the window; a row
above the best becomes the only tied one; one equal to it joins the tied; a tied one below it
leaves them (none left: the window is forgotten, and looked at afresh when walked again).  The
draw is `pick._tied`'s: none when one row is tied, else ``rng.randrange(count)`` indexing the tied rows in
walk order.  Anything else (a window with failing rows or rows fitting only future idle, a NaN best,
a one-row window) is `pick_window`'s to answer, as before.

The reference is `pick_window` on the same columns: tests/fastpath/test_windows.py draws random
columns, changes random rows between the picks (ties made and broken, rows failing and NaN) and
compares every answer and the random source's state; the stream's choice (busched.fastpath.
streamchoice) that asks it is compared with the per-task path on whole cycles.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from typing import Any

import numpy as np

from busched.fastpath.pick import _run, _tied, pick_window

__all__ = ["Windows"]


class _Window:
    """One window's best total and its tied rows (offsets from the start, ascending: walk order)."""

    __slots__ = ("best", "tied")

    def __init__(self, best: float, tied: list[int]) -> None:
        self.best, self.tied = best, tied


class Windows:
    """A template's kept windows: by start, their starts in order, the length and the number of
    rows they were taken with (another length or number forgets them all), and when each start
    was last walked without a kept window (``seen``, by the count ``tick`` of such walks; a
    window the rows made it forget counts as walked then): a window is kept only for a start
    walked again within ``cap`` such walks, and at most ``cap`` of them, the oldest dropped.  (A
    walk a kept window answers counts nothing: the common case stays a lookup and a draw.)"""

    __slots__ = ("at", "starts", "n", "size", "cap", "seen", "tick")

    def __init__(self) -> None:
        self.at: dict[int, _Window] = {}
        self.starts: list[int] = []  # the keys of ``at``, ascending
        self.n = self.size = self.cap = self.tick = 0
        self.seen: dict[int, int] = {}  # start -> the ``tick`` it was last walked (or forgotten) at

    def reset(self) -> None:
        """Every row may have changed: every window is looked at afresh."""
        self.at = {}
        self.starts = []

    def _forget(self, start: int) -> None:
        """Drop the window at ``start`` for its rows' changes: walked again soon, it is kept again."""
        self.seen[start] = self.tick
        self._drop(start)

    def _prune(self) -> None:
        """Only the starts walked within the last ``cap`` walks matter.  (Not inline in `pick`: a
        comprehension there would make its locals cells, built at every call.)"""
        tick, cap = self.tick, self.cap
        self.seen = {s: t for s, t in self.seen.items() if tick - t <= cap}

    def _walked_at(self, start: int) -> int:
        return self.seen.get(start, 0)

    def _drop(self, start: int) -> None:
        del self.at[start]
        starts = self.starts
        del starts[bisect_left(starts, start)]

    def changed(self, r: int, ok: bool, idle: bool, total: float) -> None:
        """Row ``r`` of the template's columns now holds these values: the kept windows holding it
        take it (those whose start is at most ``n - 1`` rows before it, wrapping)."""
        starts = self.starts
        if not starts:
            return
        size = self.size
        lo = r - self.n + 1
        if lo >= 0:
            holding = starts[bisect_left(starts, lo):bisect_right(starts, r)]
        else:  # (the windows that wrap past the last row, too)
            holding = starts[:bisect_right(starts, r)] + starts[bisect_left(starts, lo + size):]
        for start in holding:
            if not (ok and idle) or total != total:
                self._forget(start)
                continue
            w = self.at[start]
            d = r - start
            if d < 0:
                d += size
            tied = w.tied
            if total > w.best:
                w.best = total
                w.tied = [d]
            elif total == w.best:
                at = bisect_left(tied, d)
                if at == len(tied) or tied[at] != d:
                    tied.insert(at, d)
            else:
                at = bisect_left(tied, d)
                if at < len(tied) and tied[at] == d:
                    del tied[at]
                    if not tied:
                        self._forget(start)

    def pick(self, ok: np.ndarray, idle: np.ndarray, total: np.ndarray, start: int, to_find: int,
             rng: Any) -> tuple[int, int] | None:
        """`pick_window`'s answer (and draw) for these columns."""
        size = len(ok)
        n = min(to_find, size)
        w = self.at.get(start)
        if w is not None and n == self.n and size == self.size:
            tied = w.tied
            k = len(tied)
            d = tied[0] if k == 1 else tied[rng.randrange(k)]  # (`pick._tied`'s draw)
            r = start + d
            return (r - size if r >= size else r), n
        if n < 2 or not 0 <= start < size:
            return pick_window(ok, idle, total, start, to_find, rng)
        if n != self.n or size != self.size:
            self.reset()
            self.n, self.size, self.cap, self.seen = n, size, size // n + 1, {}
        seen, cap = self.seen, self.cap
        tick = self.tick = self.tick + 1
        last = seen.get(start)
        seen[start] = tick
        if len(seen) > 4 * cap + 8:
            self._prune()
        # every row of the window passes and fits idle: the whole window is the bucket
        if (int(np.count_nonzero(_run(ok, start, n))) != n
                or int(np.count_nonzero(_run(idle, start, n))) != n):
            return pick_window(ok, idle, total, start, to_find, rng)
        values = _run(total, start, n)
        best = values[values.argmax()]
        if best != best:  # NaN: the per-task path scores node by node
            return None
        if last is None or tick - last > cap:
            # a start not walked within the last ``cap`` walks (the first lap, or the starts drift:
            # the cluster's size no multiple of ``n``) is not kept: `pick_window`'s draw, as it makes it
            r = start + _tied(values == best, rng)
            return (r - size if r >= size else r), n
        at = self.at
        if len(at) >= cap:  # the oldest window makes room
            self._drop(min(at, key=self._walked_at))
        w = at[start] = _Window(float(best), (values == best).nonzero()[0].tolist())
        insort(self.starts, start)
        tied = w.tied
        k = len(tied)
        d = tied[0] if k == 1 else tied[rng.randrange(k)]
        r = start + d
        return (r - size if r >= size else r), n
