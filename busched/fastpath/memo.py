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
  putting parts in, only while that gives exactly what adding every part
  again in order gives.

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

from busched.api.resource import Resource

__all__ = ["job_value", "node_value", "incremental", "Pairs", "whole", "Sum", "summed"]

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
    slot = ("reuse", key)
    m = state.get(slot)
    v = None
    if m is not None:
        old, last = m
        if old == objects:
            return last
        n = len(old)
        if len(objects) >= n:
            changed = itertools.compress(range(n), map(operator.is_not, old, objects))
            pairs: Pairs = [(i, old[i], objects[i]) for i in changed]
            pairs.extend((i, None, objects[i]) for i in range(n, len(objects)))
            if len(pairs) <= len(objects) // 4:  # more than that changed: as cheap to start over
                v = update(last, pairs)
    if v is None:
        v = full(objects)
    state[slot] = (objects, v)
    return v


def split(ssn: Any, key: Any, objects: list[Any], test: Callable[[Any], bool]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The objects that pass ``test`` and the others, each by uid in the objects' order, kept from
    session to session (`incremental`): only the replaced and added ones are tested again.
    ``test`` must answer the same for an object lent unchanged."""
    def full(objs: list[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        yes: dict[str, Any] = {}
        no: dict[str, Any] = {}
        for o in objs:
            (yes if test(o) else no)[o.uid] = o
        return yes, no

    def update(last: tuple[dict[str, Any], dict[str, Any]], pairs: Pairs) -> tuple[dict[str, Any], dict[str, Any]]:
        yes, no = dict(last[0]), dict(last[1])
        for _, old, o in pairs:
            if old is not None:
                yes.pop(old.uid, None)
                no.pop(old.uid, None)
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
    __slots__ = ("sum", "parts")

    def __init__(self, parts: list[Resource | None]) -> None:
        self.parts = parts  # each object's part as summed (copies: the objects may change later)
        self.sum = Sum()
        for p in parts:
            self.sum.add(p)


def summed(ssn: Any, key: Any, objects: list[Any], part: Callable[[Any], Resource | None]) -> Resource:
    """``part(o)`` summed over ``objects`` in order (None adds nothing), kept up to date from session
    to session by `incremental` while `Sum` can.  Shared: the caller copies it to change it."""

    def full(objs: list[Any]) -> _Summed:
        return _Summed([_copy(part(o)) for o in objs])

    def update(last: _Summed, pairs: Pairs) -> _Summed | None:
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
        out.sum, out.parts = s, parts
        return out

    return incremental(ssn, ("summed", key), objects, full, update).sum.total


def _copy(r: Resource | None) -> Resource | None:
    return r.clone() if r is not None else None
