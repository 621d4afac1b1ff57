"""A template's choice on a small cluster, kept as Python values and decided without numpy calls.

`busched.fastpath.batch` keeps, per template, where the search may find a node (``ok``), where
the request fits idle (``idle``) and every node's total score (``total``), and after each
placement refreshes one row.  Its choice then makes about a dozen numpy calls (the walk, the
bucket, the best, the tied ones), each costing a microsecond or so whatever the length: on a
hundred nodes they are most of the choice.  A `Board` holds the same three columns as Python
lists and, beside them, the rows that can be chosen grouped by class (the first non-empty
gradient: ``ok`` and ``idle``, else ``ok`` only) and by total, so that a row's change moves it
between two groups and a choice reads the best group of the first non-empty class.

It answers only when every node the walk sees is found (``to_find`` covers every node, or fewer
nodes pass than it asks for): then the nodes found are every passing row in walk order (from
``start``, wrapping) and the walk looked at every node.  Its answer is the one
`batch.choose`'s array path gives for the same columns: the only row of the bucket (NaN or not),
else None when the bucket holds a NaN, else the tied best row the session's random source draws
(the same one call, on the same count, indexing the tied rows in walk order).
tests/fastpath/test_board.py compares both on random columns, the random source's state included.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from random import Random
from typing import Any

__all__ = ["Board", "NAN"]

NAN = -1  # `Board.pick`'s answer when the bucket's best is NaN (the per-task path scores node by node)


class Board:
    """``ok``, ``idle`` and ``total`` per row, and the choosable rows by class and total."""

    __slots__ = ("ok", "idle", "total", "cls", "groups", "nans", "count")

    def __init__(self, ok: list[bool], idle: list[bool], total: list[float]) -> None:
        self.reset(ok, idle, total)

    def reset(self, ok: list[bool], idle: list[bool], total: list[float]) -> None:
        """Every row anew (lists the board keeps)."""
        self.ok, self.idle, self.total = ok, idle, total
        # class 0: passes and fits idle; 1: passes, fits only future idle; -1: not choosable
        self.cls = [-1] * len(ok)
        self.groups: tuple[dict[Any, list[int]], dict[Any, list[int]]] = ({}, {})
        self.nans: tuple[list[int], list[int]] = ([], [])
        self.count = [0, 0]
        for r in range(len(ok)):
            self._enter(r)

    def _enter(self, r: int) -> None:
        if not self.ok[r]:
            self.cls[r] = -1
            return
        c = 0 if self.idle[r] else 1
        self.cls[r] = c
        self.count[c] += 1
        v = self.total[r]
        if v != v:
            insort(self.nans[c], r)
            return
        group = self.groups[c].get(v)
        if group is None:
            self.groups[c][v] = [r]
        else:
            insort(group, r)

    def _leave(self, r: int) -> None:
        c = self.cls[r]
        if c < 0:
            return
        self.count[c] -= 1
        v = self.total[r]
        if v != v:
            self.nans[c].remove(r)
            return
        groups = self.groups[c]
        group = groups[v]
        if len(group) == 1:
            del groups[v]
        else:
            group.remove(r)

    def set_row(self, r: int, ok: bool, idle: bool, total: float) -> None:
        """Row ``r``'s new values: `_leave`, the values stored, `_enter`.  A row choosable before
        and after with non-NaN totals (a placement's common case) moves between groups here."""
        c = self.cls[r]
        v = self.total[r]
        if c < 0 or not ok or v != v or total != total:
            self._leave(r)
            self.ok[r], self.idle[r], self.total[r] = ok, idle, total
            self._enter(r)
            return
        # _leave's and _enter's non-NaN branches, written out
        groups = self.groups[c]
        group = groups[v]
        if len(group) == 1:
            del groups[v]
        else:
            group.remove(r)
        self.ok[r], self.idle[r], self.total[r] = ok, idle, total
        n = 0 if idle else 1
        if n != c:
            count = self.count
            count[c] -= 1
            count[n] += 1
            self.cls[r] = n
            groups = self.groups[n]
        into = groups.get(total)
        if into is None:
            groups[total] = [r]
        else:
            insort(into, r)

    def answers(self, start: int, to_find: int) -> bool:
        """Whether the walk from ``start`` for ``to_find`` nodes finds every passing row (and so
        looks at every node): the only walks `pick` decides."""
        size = len(self.ok)
        return to_find > 0 and 0 <= start < size and (to_find >= size or self.count[0] + self.count[1] < to_find)

    def pick(self, rng: Random, start: int) -> int | None:
        """The row chosen (`answers` having held), None when no row passes, `NAN` when the
        bucket's best is NaN.  Draws from ``rng`` exactly when the array path would."""
        c = 0 if self.count[0] else 1
        n = self.count[c]
        if not n:
            return None
        nans = self.nans[c]
        if n == 1:  # the only row of the bucket, whatever its score
            return nans[0] if nans else next(iter(self.groups[c].values()))[0]
        if nans:
            return NAN
        groups = self.groups[c]
        tied = groups[max(groups)]
        k = len(tied)
        if k == 1:
            return tied[0]
        # the tied rows in walk order are tied[at:] + tied[:at]
        at = bisect_left(tied, start)
        return tied[(at + rng.randrange(k)) % k]
