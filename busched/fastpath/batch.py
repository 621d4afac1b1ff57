"""Allocate's choice for a run of tasks of one template, from vectors kept across the run.

For every task it places, allocate searches (the predicates' batch twins, the fit on future idle, the walk
from the rotating start), buckets the nodes found by idle, scores the bucket (the node-order twins, summed)
and draws among the best.  Each twin keeps its own vector for the task's shape and refreshes only the node just
placed on (`rowcache`), but every call still goes through the twin's preamble: what of the task it reads,
which of its scorers apply, its keys. For a gang's replicas or a deployment's pods those answers are the same
task after task.

Here they are asked once per *template* (tasks whose every field a twin reads is equal): each twin that can
(``row_local``, attached by its plugin with `rowlocal.declare`) says which change logs its answer follows, how to
compute one node's value (its plugin's own per-node function, the one its kept vector is refreshed with) and
what would end the declaration (``still``).  The first task of the template takes each twin's whole vector
once; later tasks refresh the rows logged since with those per-node functions, sum the score vectors as
`select.scores` does, walk and bucket as `select_run.gradients_found` does, and draw among the tied best with
the session's random source as `select.pick_unless_nan` does.  Anything else (a twin without a declaration, a
NaN score, no node found, a twin raising) answers None before any draw, and the caller takes the per-task path
from the same state.  The per-task path is the reference (tests/fastpath/test_batch_choice.py).  On a cluster
small enough that every search looks at every node, a template keeps its vectors as Python lists and chooses
from a `board.Board`, without the dozen numpy calls a choice on arrays makes (`pick_arrays`, its reference,
tests/fastpath/test_board.py); on arrays, a walk whose rows all pass is read as slices (`pick.pick_window`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from busched.api.node import NodeInfo
from busched.api.resource import MIN_RESOURCE, Resource
from busched.api.task import TaskInfo
from busched.fastpath import rowcache, rowlocal, select
from busched.fastpath.board import NAN, Board
from busched.fastpath.fit import FUTURE_IDLE, IDLE, NodeArrays, fit_mask, fits
from busched.fastpath.pick import pick_arrays, pick_window

__all__ = ["choose", "pick_arrays", "KEPT"]

KEPT = 4  # templates kept per session (the oldest dropped first)
# a session whose templates are each used about once (every task its own labels, say) stops
# building them after this many: a template costs a few vectors' copies more than one task's choice
TRIAL = 64
_KEY = "batch-choice"


_NONE: frozenset[int] = frozenset()


class _Part:
    """One twin's kept vector and where in its logs it was last brought up to date.  On a
    template kept as Python values (`_Template.plain`) the vector is a list of the values the
    array would hold (``cast``: its dtype's Python type, applied as the array's store would)."""

    __slots__ = ("twin", "local", "vec", "pos", "args", "dtype", "cast")

    def __init__(self, twin: Any, local: rowlocal.Local, vec: np.ndarray, args: tuple[Any, ...]) -> None:
        self.twin, self.local, self.args = twin, local, args
        self.vec: Any = np.array(vec, copy=True)  # twins may hand back vectors they keep
        self.dtype = self.vec.dtype
        self.cast: Callable[[Any], Any] | None = None
        self.pos = [len(log) for log in local.logs]

    def make_plain(self) -> None:
        """Keep the vector as a list from now on (`_PLAIN` dtypes only)."""
        self.cast = _PLAIN[self.dtype]
        self.vec = self.vec.tolist()

    def array(self) -> np.ndarray:
        """The vector as an array of its dtype."""
        return self.vec if self.cast is None else np.array(self.vec, dtype=self.dtype)

    def refresh(self, size: int) -> set[int] | frozenset[int] | None:
        """Bring the vector up to date: the rows refreshed (an empty set: none), or None when the
        whole vector was computed again (many rows logged).  (`_Template.update` refreshes the
        common case, one row logged in one log, itself.)"""
        local = self.local
        if local.one is None:
            return _NONE
        dirty = rowcache.logged_since(local.logs, self.pos)
        if len(dirty) * 8 > size:
            got = self.twin(*self.args)
            if got is None:
                raise LookupError("the twin declined the template")
            self.vec = np.array(got, copy=True)
            self.dtype = self.vec.dtype
            if self.cast is not None:
                if self.dtype not in _PLAIN:
                    raise LookupError("the twin's vector changed to a dtype kept as arrays")
                self.make_plain()
            return None
        one, vec, cast = local.one, self.vec, self.cast
        for r in dirty:
            vec[r] = one(r) if cast is None else cast(one(r))
        return dirty


# dtypes whose values as Python objects add and compare as the array's do (bool, int64 and
# float64: int64 + float64 is float64, Python int + float is float, the same double)
_PLAIN: dict[Any, Callable[[Any], Any]] = {np.dtype(bool): bool, np.dtype(np.int64): int, np.dtype(np.float64): float}
PLAIN_MAX = 1024  # a template kept as Python values: up to this many nodes, every node searched


def _fit_part(arrays: NodeArrays, req: Resource, which: str) -> _Part:
    """The fit of the template's request on idle or future idle as a kept part: `fit_mask`, and
    row by row the same comparison on the row (which the arrays refill as its node changes)."""
    v, unknown = arrays.request(req)
    avail = arrays.available(which)
    wanted = [(j, float(v[j])) for j in [0, 1] + [arrays.columns[s] for s in req.scalars if s in arrays.columns]]

    def one(r: int) -> bool:
        # all(q - avail[r, j] < MIN_RESOURCE for j, q in wanted), the row read once as Python floats
        # (the same doubles: the same differences and comparisons)
        if unknown:
            return False
        row = avail[r].tolist()
        return all(q - row[j] < MIN_RESOURCE for j, q in wanted)

    if not unknown and len(wanted) <= 3:
        # cpu, memory and at most one more (most requests: pods): the comparisons written out, in
        # the same order, the elements read one by one
        q0, q1 = wanted[0][1], wanted[1][1]
        item = avail.item
        if len(wanted) == 2:
            def one(r: int) -> bool:
                return q0 - item(r, 0) < MIN_RESOURCE and q1 - item(r, 1) < MIN_RESOURCE
        else:
            j2, q2 = wanted[2]

            def one(r: int) -> bool:
                return (q0 - item(r, 0) < MIN_RESOURCE and q1 - item(r, 1) < MIN_RESOURCE
                        and q2 - item(r, j2) < MIN_RESOURCE)

    # the whole vector from the one kept per request shape (`fits`: a new template of a known
    # shape costs a copy); _Part copies it
    return _Part(lambda: fit_mask(arrays, req, which), rowlocal.Local((arrays.log,), one), fits(arrays, req, which), ())


class _Template:
    """The kept vectors of one template (``declined``: some twin cannot answer row by row), and
    what they combine into: where the search may find a node (every predicate twin passes and
    the request fits future idle) and every node's total score.  On a small cluster whose
    searches look at every node (``plain``) the vectors are kept as Python lists and the
    combination as a `board.Board`, which chooses without numpy calls."""

    __slots__ = ("task", "declined", "preds", "orders", "batches", "stills", "future", "idle", "parts", "ok",
                 "total", "plain", "board", "groups", "others", "windows")

    def __init__(self, task: TaskInfo) -> None:
        self.task = task
        self.declined = True
        self.plain = False
        self.board: Board | None = None
        self.windows: Any = None  # a stream's kept windows (busched.fastpath.windows), told of changed rows
        self.preds: list[_Part] = []
        self.orders: list[_Part] = []
        self.batches: list[_Part] = []
        self.stills: list[Callable[[], bool]] = []

    def build(self, ssn: Any, arrays: NodeArrays, nodes: Sequence[NodeInfo], fn: Any, to_find: int) -> None:
        task, rows = self.task, arrays.all_rows
        twins = ssn.predicate_twins(fn)
        plan = select._score_plan(ssn, arrays)
        if twins is None or plan is None:
            return
        wanted = ([(self.preds, t, (task, arrays, rows)) for t in twins]
                  + [(self.orders, t, (task, arrays, rows)) for t in plan[0]]
                  + [(self.batches, t, (task, arrays, rows, nodes)) for _, _, t in plan[1]])
        for into, twin, args in wanted:
            declaration = getattr(twin, "row_local", None)
            local = declaration(task, arrays) if declaration is not None else None
            if local is None:
                return
            vec = twin(*args)
            if vec is None:
                return
            into.append(_Part(twin, local, vec, args))
            if local.still is not None:
                self.stills.append(local.still)
        self.future = _fit_part(arrays, task.init_resreq, FUTURE_IDLE)
        self.idle = _fit_part(arrays, task.init_resreq, IDLE)
        self.parts = [*self.preds, *self.orders, *self.batches, self.future, self.idle]
        # what update walks: the parts that follow one log, grouped by it (a group's parts are at
        # the same place in it, and `update` moves them together), and the others that change
        groups: dict[int, tuple[list[int], list[tuple[_Part, list[int], Callable[[int], Any]]]]] = {}
        self.others: list[_Part] = []
        for p in self.parts:
            one = p.local.one
            if one is None:
                continue
            logs = p.local.logs
            group = groups.get(id(logs[0])) if len(logs) == 1 else None
            if len(logs) != 1 or (group is not None and group[1][0][1][0] != p.pos[0]):
                self.others.append(p)
                continue
            if group is None:
                group = groups[id(logs[0])] = (logs[0], [])
            group[1].append((p, p.pos, one))
        self.groups = list(groups.values())
        size = len(nodes)
        if size <= PLAIN_MAX and to_find >= size and all(p.dtype in _PLAIN for p in self.parts):
            self.plain = True
            for part in self.parts:
                part.make_plain()
        self._combine_all(size)
        self.declined = False

    def _combine_all(self, size: int) -> None:
        mask: np.ndarray | None = None
        for part in self.preds:  # as `select.predicate_mask` combines them, then the fit (`select.scan`)
            mask = part.array() if mask is None else (mask & part.array())
        ok = (np.ones(size, dtype=bool) if mask is None else mask) & self.future.array()
        total = select.summed([p.array() for p in self.orders], [p.array() for p in self.batches], size).copy()
        if self.plain:
            self.board = Board(ok.tolist(), list(self.idle.vec), total.tolist())
        else:
            self.ok, self.total = ok, total
            if self.windows is not None:
                self.windows.reset()

    def _combine(self, r: int) -> None:
        """Row ``r`` of `ok` and `total`, from the parts' rows, combined as `_combine_all` does."""
        ok = True
        for part in self.preds:
            ok = ok and bool(part.vec[r])
        ok = ok and bool(self.future.vec[r])
        total = None
        for part in self.orders:
            total = part.vec[r] if total is None else total + part.vec[r]
        batch_total = None
        for part in self.batches:
            batch_total = part.vec[r] if batch_total is None else batch_total + part.vec[r]
        if batch_total is not None:
            total = batch_total if total is None else total + batch_total
        if self.board is not None:
            self.board.set_row(r, ok, self.idle.vec[r], 0.0 if total is None else float(total))
        else:
            value = 0.0 if total is None else total
            self.ok[r] = ok
            self.total[r] = value
            if self.windows is not None:  # (the values as the columns hold them: a float64 is float's double)
                self.windows.changed(r, ok, self.idle.vec.item(r), float(value))

    def update(self, size: int) -> None:
        """Bring the kept vectors up to date with the rows logged since.  A log with one row
        logged since (a task placed: the common case) has its parts refreshed here, as
        `_Part.refresh` would, without the call and the set it returns."""
        row = -1  # the row refreshed while every log moved by one, to the same row (-1: none yet)
        rows: list[int] = []  # any other rows refreshed
        whole = False
        fast = size >= 8
        for log, members in self.groups:
            n = len(log)
            p = members[0][1][0]  # (every part of the group is at the same place)
            if n == p:
                continue
            if fast and n - p == 1:
                r = log[p]
                for part, pos, one in members:
                    pos[0] = n
                    cast = part.cast
                    part.vec[r] = one(r) if cast is None else cast(one(r))
                if row == -1:
                    row = r
                elif row != r:
                    rows.append(r)
                continue
            for part, _, _ in members:
                got = part.refresh(size)
                if got is None:
                    whole = True
                else:
                    rows.extend(got)
        for part in self.others:
            got = part.refresh(size)
            if got is None:
                whole = True
            else:
                rows.extend(got)
        if whole:
            self._combine_all(size)
        elif rows:
            if row >= 0:
                rows.append(row)
            for r in set(rows):
                self._combine(r)
        elif row >= 0:
            self._combine(row)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``ok``, ``idle`` and ``total`` as arrays (a plain template's board made arrays)."""
        board = self.board
        if board is None:
            return self.ok, self.idle.vec, self.total
        return np.array(board.ok, dtype=bool), np.array(board.idle, dtype=bool), np.array(board.total)


class _Kept(list):  # type: ignore[type-arg]
    """A session's templates, most recent last, and how many were built and reused."""

    built = 0
    reused = 0


def _template(ssn: Any, arrays: NodeArrays, task: TaskInfo, nodes: Sequence[NodeInfo],
              fn: Any, to_find: int) -> _Template | None:
    """The kept template ``task`` belongs to, built if new; None once templates have stopped paying."""
    kept: _Kept | None = arrays.cache.get(_KEY)  # the arrays are the session's own
    if kept is None:
        kept = arrays.cache[_KEY] = _Kept()
    for t in kept:
        if t.task is task or rowlocal.same_template(t.task, task):
            kept.reused += 1
            return t
    if kept.built >= TRIAL and kept.reused < kept.built:
        return None
    kept.built += 1
    t = _Template(task)
    t.build(ssn, arrays, nodes, fn, to_find)
    if len(kept) >= KEPT:
        del kept[0]
    kept.append(t)
    return t


def _drop(arrays: NodeArrays, t: _Template) -> None:
    kept = arrays.cache.get(_KEY)
    if kept is not None and t in kept:
        kept.remove(t)


def choose(ssn: Any, task: TaskInfo, nodes: Sequence[NodeInfo], fn: Callable[[TaskInfo, NodeInfo], None],
           start: int, to_find: int) -> tuple[NodeInfo, int] | None:
    """The node allocate's per-task path would choose for ``task`` (a search of ``nodes`` from
    ``start`` for ``to_find`` nodes, bucketed, scored, drawn) and how many nodes the search
    looked at; None (no draw made) when the kept vectors cannot answer: the caller then takes
    the per-task path from the same state."""
    arrays: NodeArrays = ssn.arrays
    if arrays.rows_of(nodes) is not arrays.all_rows:
        return None
    try:
        t = _template(ssn, arrays, task, nodes, fn, to_find)
    except Exception:  # noqa: BLE001 - a twin or declaration raised: the per-task path names the plugin
        return None
    if t is None or t.declined:
        return None
    try:
        for still in t.stills:
            if not still():
                _drop(arrays, t)
                return None
        size = len(nodes)
        t.update(size)
        board = t.board
        if board is not None and board.answers(start, to_find):
            row = board.pick(ssn.rng, start)  # (draws last: nothing after it can fail)
            if row is None or row == NAN:
                return None  # no node found (the per-task path records the fit errors), or a NaN best
            return nodes[row], size
        ok, idle, total = t.arrays()
        got = pick_window(ok, idle, total, start, to_find, ssn.rng)
    except Exception:  # noqa: BLE001 - the per-task path calls the twins again and names the plugin
        _drop(arrays, t)
        return None
    if got is None:
        return None
    return nodes[got[0]], got[1]


GENUINE_CHOOSE = choose  # `choose` itself, whatever a test patches in later (runchoice compares with it)
