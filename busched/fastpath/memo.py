"""Work a session does over every job or node, done again only for what changed.

Lent objects (busched.fastpath.lending) keep their identity from session to session
for as long as they do not change, so identity is a version, as it is for the
cache's specs:

* `job_value` / `node_value` keep a value derived from one job (its spec and
  task index) or one node (its spec and tasks) on the object itself, in its
  ``derived`` map, which the object empties whenever its task index changes.
  Such a value may depend on nothing else but what ``key`` names.
* `incremental` keeps, from one session to the next, a result computed over
  all of the session's jobs (nodes) with the list of objects it came from.
  The next session whose objects are the very same, in the same order, gets
  it again (comparing identities costs a pass in C); when only some were
  replaced in place and some added at the end (a job assembled again keeps
  its place in the session's order; new jobs come last), an update function
  gets the old result and the (place, old, new) triples, so a session after
  a small change costs what changed, not the cluster.  Results are kept with
  the cache's other cross-cycle state (``plugin_state``); where there is
  none (a snapshot built by hand) nothing is kept.
* `Sum` / `summed` keep a sum of Resources up to date by taking parts out and
  putting parts in while that gives exactly what adding every part again in
  order gives (whole numbers in a float's exact range); past that range
  `Running` keeps running sums in order, so replacing part i adds again only
  from i on.

Values handed out are shared between sessions: callers must not change them
(copy first, as drf does with a job's share before an allocation moves it).
An update may build on the old result: the session it was computed for has
closed (a lease that does not come back makes the lending start over, and
with new objects every result is computed afresh).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from busched.api.resource import Resource

__all__ = ["job_value", "node_value", "incremental", "Pairs", "whole", "Sum", "Running", "summed"]

# (place, old, new) for the objects replaced in place, then (place, None, new) for those added
Pairs = list[tuple[int, Any, Any]]

_MISSING = object()


def job_value(job: Any, key: Any, fn: Callable[[Any], Any]) -> Any:
    """``fn(job)``, computed once while the job's tasks and spec do not change."""
    d = job.derived
    v = d.get(key, _MISSING)
    if v is _MISSING:
        v = d[key] = fn(job)
    return v


node_value = job_value  # the same contract: a node's ``derived`` map is emptied when its tasks change


def incremental(ssn: Any, key: Any, objects: list[Any], full: Callable[[list[Any]], Any],
                update: Callable[[Any, Pairs], Any]) -> Any:
    """``full(objects)``, or ``update(last result, pairs)`` when the last session's objects are these
    but for some replaced in place and some added at the end.  ``update`` returns None when it
    cannot follow the change (then ``full`` runs).  The old objects may have changed in the last
    session: what an update takes out must come from the result, not from them."""
    state = ssn.others.get("plugin_state")
    if state is None:
        return full(objects)
    seen = getattr(ssn, "shared", None)
    objects, token = _one_of(state, seen, objects)
    slot = ("reuse", key)
    m = state.get(slot)
    v = None
    if m is not None:
        old, last, old_token = m
        n = len(old)
        if len(objects) >= n:
            changed = _changed(seen, old, old_token, objects, token)
            if not changed and len(objects) == n:
                return last
            pairs: Pairs = [(i, old[i], objects[i]) for i in changed]
            pairs.extend((i, None, objects[i]) for i in range(n, len(objects)))
            if len(pairs) <= len(objects) // 4:  # more than that changed: as cheap to start over
                del state[slot]  # an update may change ``last`` in place: if it fails midway, none is kept
                v = update(last, pairs)
    if v is None:
        v = full(objects)
    state[slot] = (objects, v, token)
    return v


def _one_of(state: dict[Any, Any], seen: dict[str, Any] | None, objects: list[Any]) -> tuple[list[Any], object]:
    """The list with these very objects that an earlier call of this session kept, else ``objects``
    (kept), with its token: every result over the session's jobs (nodes) then keeps one list, so the
    next session compares its lists with the last one once (`_changed`), not once per result.

    The lists are kept in ``state`` under the session's mark (``seen``, its shared state, holds only
    the mark): dropped there by the next session, they go when their results do, not with the
    session's garbage (a list of 50,000 jobs freed by the collector would lengthen its pause)."""
    if seen is None:
        return objects, None
    mark = seen.get("reuse.mark")
    if mark is None:
        mark = seen["reuse.mark"] = object()
    kept_lists = state.get("reuse.lists")
    if kept_lists is None or kept_lists[0] is not mark:
        kept_lists = state["reuse.lists"] = (mark, [])
    lists: list[tuple[list[Any], object]] = kept_lists[1]
    for kept, token in lists:
        if len(kept) == len(objects) and kept == objects:  # identity (lent objects compare so), in C
            return kept, token
    token = object()
    lists.append((objects, token))
    return objects, token


def _changed(seen: dict[str, Any] | None, old: list[Any], old_token: object, objects: list[Any],
             token: object) -> list[int]:
    """The places below ``len(old)`` where ``objects`` holds another object than ``old``, worked out
    once per session for each pair of kept lists, known by their tokens (``seen``: the session's
    shared state).  Only the tokens are held there: a session holding the last one's list would
    hold the objects it wrote, and through their listeners that session, and so on back."""
    if seen is None or old_token is None or token is None:
        return list(itertools.compress(range(len(old)), map(operator.is_not, old, objects)))
    diffs: dict[tuple[int, int], tuple[object, object, list[int]]] = seen.setdefault("reuse.diffs", {})
    got = diffs.get((id(old_token), id(token)))
    if got is None or got[0] is not old_token or got[1] is not token:
        got = (old_token, token, list(itertools.compress(range(len(old)), map(operator.is_not, old, objects))))
        diffs[(id(old_token), id(token))] = got
    return got[2]


def split(ssn: Any, key: Any, objects: list[Any], test: Callable[[Any], bool]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The objects that pass ``test`` and the others, each by uid, kept from session to session
    (`incremental`): only the replaced and added ones are tested again (so after an update the maps'
    order is no longer the objects': read them as sets). ``test`` must answer the same for an object
    lent unchanged."""
    def full(objs: list[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        yes: dict[str, Any] = {}
        no: dict[str, Any] = {}
        for o in objs:
            (yes if test(o) else no)[o.uid] = o
        return yes, no

    def update(last: tuple[dict[str, Any], dict[str, Any]], pairs: Pairs) -> tuple[dict[str, Any], dict[str, Any]]:
        yes, no = last  # changed in place: the session they were given to has closed (no copy of 50,000)
        # every replaced object out first, then every new one in: a job deleted shifts the ones after it
        # down a place, so an object may be the new one of a pair and the old one of the next ([B, C] ->
        # [C, D]); taken out pair by pair, C would be put in and then taken out again
        for _, old, _new in pairs:
            if old is not None:
                yes.pop(old.uid, None)
                no.pop(old.uid, None)
        for _, _, o in pairs:
            (yes if test(o) else no)[o.uid] = o
        return yes, no

    return incremental(ssn, key, objects, full, update)


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
        for p in parts:
            self.sum.add(p)
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
