"""Sums of Resources over every job or node, kept from session to session (by
`busched.fastpath.memo.incremental`) and updated for what changed.

`Sum` / `summed` keep a sum up to date by taking parts out and putting parts in
while that gives exactly what adding every part again in order gives (whole
numbers in a float's exact range); past that range `Running` keeps running sums
in order, so replacing part i adds again only from i on.  Either way the total
is the very float the plain in-order sum gives (tests/fastpath/test_memo_sums.py).
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from busched.api.resource import Resource
from busched.fastpath.memo import Pairs, incremental

__all__ = ["whole", "Sum", "Running", "summed", "add_all"]

_EXACT = float(2**52)


def whole(r: Resource) -> bool:
    """Every value a whole number well inside a float's exact range: sums of such values are the
    same in any order (requests are whole milli-cpus, bytes and milli-units)."""
    c, m = r.cpu, r.memory
    if not (c.is_integer() and m.is_integer() and -_EXACT < c < _EXACT and -_EXACT < m < _EXACT):
        return False
    for v in r.scalars.values():  # noqa: SIM110 - a loop, not all(): a first full build calls this for every part
        if not (v.is_integer() and -_EXACT < v < _EXACT):
            return False
    return True


class Sum:
    """A sum of Resources kept up to date by taking parts out and putting parts in, while that gives
    what summing every part again in order would: all parts whole (`whole`) and every part's scalar
    names, in order, either none or the same as the sum's (so no name moves or goes).

    Built by `add` (in order, nothing checked: a session that only sums pays no more than the sum);
    the first update (`check`, then `take` / `put`) looks at every part once."""

    __slots__ = ("total", "names", "named", "exact", "checked")

    def __init__(self) -> None:
        self.total = Resource()
        self.names: tuple[str, ...] | None = None  # the one name order parts have (None: none seen)
        self.named = 0  # how many parts have scalar names
        self.exact = True
        self.checked = False

    def add(self, part: Resource | None) -> None:
        """Add a part, in order, before any update (nothing checked)."""
        if part is not None:
            self.total.add(part)

    def check(self, parts: Any) -> None:
        """Look at every part summed so far, once: can the sum be kept up to date exactly?"""
        if self.checked:
            return
        self.checked = True
        for p in parts:
            if p is None:
                continue
            if not self._fits(p):
                self.exact = False
                return
            if p.scalars:
                self.named += 1
        self.exact = self.exact and whole(self.total)

    def _fits(self, part: Resource) -> bool:
        if not whole(part):
            return False
        if part.scalars:
            names = tuple(part.scalars)
            if self.names is None:
                self.names = names
            elif names != self.names:
                return False
        return True

    def put(self, part: Resource | None) -> None:
        """Put a part in (after `check`)."""
        if part is None:
            return
        if part.scalars:
            if not self._fits(part):
                self.exact = False
            self.named += 1
        elif not whole(part):  # (no names to line up)
            self.exact = False
        self.total.add(part)

    def take(self, part: Resource | None) -> bool:
        """Take a part out (after `check`); False when the sum can no longer be kept exactly."""
        if part is None:
            return True
        if not self.exact or not self._fits(part):
            return False
        if part.scalars:
            self.named -= 1
            if self.named == 0:
                return False  # the sum would keep names no part has any more
        self.total.sub(part)
        return whole(self.total)

    def copy(self) -> Sum:
        s = Sum()
        s.total, s.names, s.named, s.exact, s.checked = (self.total.clone(), self.names, self.named,
                                                         self.exact, self.checked)
        return s


class _Summed:
    """The kept sum: by `Sum` (``sum``, ``parts``) or, once that cannot be exact, by ``prefix``."""

    __slots__ = ("sum", "parts", "prefix", "total")
    sum: Sum | None
    parts: list[Resource | None] | None

    def __init__(self, parts: list[Resource | None]) -> None:
        self.parts = parts  # each object's part as summed (copies: the objects may change later)
        self.sum = Sum()
        add_all(self.sum.total, [p for p in parts if p is not None])  # `Sum.add` of each part, in order
        self.prefix: Running | None = None
        self.total = self.sum.total


def summed(ssn: Any, key: Any, objects: list[Any], part: Callable[[Any], Resource | None]) -> Resource:
    """``part(o)`` summed over ``objects`` in order (None adds nothing), kept up to date from session
    to session by `incremental`: by `Sum` while it can, else by `Running` (a sum past a float's
    exact range: 20,000 nodes of 256Gi).  Shared: the caller copies it to change it."""

    def full(objs: list[Any]) -> _Summed:
        return _Summed([_copy(part(o)) for o in objs])

    def update(last: _Summed, pairs: Pairs) -> _Summed | None:
        if last.prefix is None:
            got = _sum_update(last, pairs, part)
            if got is not None:
                return got
            assert last.parts is not None
            start = Running(last.parts)  # once: later updates move the running sums
        else:
            start = last.prefix
        running = start.update([(i, _copy(part(new))) for i, _, new in pairs])
        if running is None:
            return None
        out = _Summed.__new__(_Summed)
        out.sum, out.parts, out.prefix, out.total = None, None, running, running.total()
        return out

    return incremental(ssn, ("summed", key), objects, full, update).total


def _sum_update(last: _Summed, pairs: Pairs, part: Callable[[Any], Resource | None]) -> _Summed | None:
    assert last.sum is not None and last.parts is not None  # (kept by Sum: no prefix yet)
    s = last.sum.copy()
    s.check(last.parts)
    parts = list(last.parts)
    for i, _, new in pairs:
        if i < len(parts) and not s.take(parts[i]):
            return None
        p = _copy(part(new))
        s.put(p)
        if i < len(parts):
            parts[i] = p
        else:
            parts.append(p)
    if not s.exact:
        return None
    out = _Summed.__new__(_Summed)
    out.sum, out.parts, out.prefix, out.total = s, parts, None, s.total
    return out


class Running:
    """A sum of Resources as running sums, one array per resource name: ``np.cumsum`` adds left to
    right, one float addition at a time, as `Resource.add` over the parts in order does, so a part
    replaced at place i costs the sums from i on (in C), whatever the values.

    A part lacking a scalar adds 0.0 to it, which changes no sum (the sums start at +0.0 and so
    are never -0.0); the scalars' order in the total is their first appearance, kept while a
    replaced part has the very names of the one it replaces."""

    __slots__ = ("names", "keys", "cols", "sums")

    def __init__(self, parts: list[Resource | None]) -> None:
        n = len(parts)
        self.keys = [tuple(p.scalars) if p is not None else () for p in parts]
        names: dict[str, None] = {"cpu": None, "memory": None}
        for k in self.keys:
            for s in k:
                names.setdefault(s)
        self.names = list(names)
        self.cols = {"cpu": np.fromiter((p.cpu if p is not None else 0.0 for p in parts), float, n),
                     "memory": np.fromiter((p.memory if p is not None else 0.0 for p in parts), float, n)}
        for s in self.names[2:]:
            self.cols[s] = np.fromiter((p.scalars.get(s, 0.0) if p is not None else 0.0 for p in parts), float, n)
        self.sums = {s: _running(c, 0) for s, c in self.cols.items()}

    def update(self, changed: list[tuple[int, Resource | None]]) -> Running | None:
        """A copy with the part at each place replaced (a place past the end: appended, in order);
        None when a replaced part's scalar names are not those of the part it replaces."""
        out = Running.__new__(Running)
        out.keys, out.names = list(self.keys), list(self.names)
        n = len(out.keys)
        grow = sum(1 for i, _ in changed if i >= n)
        out.cols = {s: np.concatenate((c, np.zeros(grow))) if grow else c.copy() for s, c in self.cols.items()}
        low = n + grow
        for i, p in changed:
            key = tuple(p.scalars) if p is not None else ()
            if i < n:
                if key != out.keys[i]:
                    return None
                out.keys[i] = key
            else:
                out.keys.append(key)
                for s in key:
                    if s not in out.cols:
                        out.names.append(s)
                        out.cols[s] = np.zeros(n + grow)
            low = min(low, i)
            out.cols["cpu"][i] = p.cpu if p is not None else 0.0
            out.cols["memory"][i] = p.memory if p is not None else 0.0
            for s in out.names[2:]:
                out.cols[s][i] = p.scalars.get(s, 0.0) if p is not None else 0.0
        out.sums = {}
        for s, c in out.cols.items():
            old = self.sums.get(s)
            if old is None:
                out.sums[s] = _running(c, 0)
            else:
                sums = np.empty(len(c))
                sums[:low] = old[:low]
                sums[low:] = _running(c, low, old[low - 1] if low else 0.0)
                out.sums[s] = sums
        return out

    def total(self) -> Resource:
        r = Resource()
        if not self.keys:
            return r
        r.cpu = float(self.sums["cpu"][-1])
        r.memory = float(self.sums["memory"][-1])
        r.scalars = {s: float(self.sums[s][-1]) for s in self.names[2:]}
        return r


def _running(col: np.ndarray, start: int, before: float = 0.0) -> np.ndarray:
    """The running sums of ``col[start:]`` after ``before``: before + c0, (before + c0) + c1, ..."""
    seg = col[start:].copy()
    if len(seg):
        seg[0] = before + seg[0]
    return np.cumsum(seg)


def _copy(r: Resource | None) -> Resource | None:
    return r.clone() if r is not None else None


def add_all(total: Resource, parts: list[Resource]) -> None:
    """``total.add(p)`` for each part in order, one resource name at a time: the same float additions
    in the same order (``functools.reduce`` of ``+``, in C; a scalar starts from 0.0 as `Resource.add`
    starts it, and a part without the name adds 0.0, which changes no sum that starts from 0.0).  A
    first session sums 50,000 nodes' allocatable and used here."""
    total.cpu = functools.reduce(operator.add, map(_cpu, parts), total.cpu)
    total.memory = functools.reduce(operator.add, map(_memory, parts), total.memory)
    named = list(filter(None, map(_scalars, parts)))
    if not named:
        return
    own = total.scalars
    for name in dict.fromkeys(itertools.chain.from_iterable(named)):  # first seen first, as `add` puts them
        if name in own:  # (added part by part: a sum that did not start from 0.0)
            for sc in named:
                if name in sc:
                    own[name] = own[name] + sc[name]
            continue
        own[name] = functools.reduce(operator.add, map(operator.methodcaller("get", name, 0.0), named), 0.0)


_cpu, _memory, _scalars = operator.attrgetter("cpu"), operator.attrgetter("memory"), operator.attrgetter("scalars")
