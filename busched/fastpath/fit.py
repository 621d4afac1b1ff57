"""Node resource state as arrays, and the resource-fit kernel over all nodes at once.

`NodeArrays` keeps a node x resource matrix for allocatable, idle, used and
future idle resources, updated row by row as the session allocates, pipelines
and evicts (it listens to `NodeInfo`).  (Releasing and pipelined have no
matrix: no kernel reads them, future idle already sums them.)  The values are
copied from the nodes' own `Resource` objects, never re-derived, so a kernel
reading them does exactly the float arithmetic the per-node code does.

`fit_mask` answers "does this request fit" for every node in one numpy
expression; `fit_mask_reference` is the plain loop over `Resource.less_equal`
it replaces.  `fits` keeps that answer per request shape across tasks.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from busched.api.node import NodeInfo
from busched.api.resource import CPU, MEMORY, MIN_RESOURCE, Resource
from busched.fastpath import rowcache

__all__ = ["NodeArrays", "fit_mask", "fits", "fit_mask_reference", "IDLE", "FUTURE_IDLE"]

IDLE = "idle"
FUTURE_IDLE = "future_idle"


class NodeArrays:
    """Rows follow the node list order; columns are resource names (cpu, memory, then scalars)."""

    columns: dict[str, int]  # resource name -> column
    row_names: list[tuple[str, ...]]  # each row's scalar names as first filled
    row: dict[str, int]  # node name -> row
    first: tuple[np.ndarray, ...]  # allocatable, idle, used, future idle as filled, before any change

    def __init__(self, nodes: Sequence[NodeInfo], like: NodeArrays | None = None) -> None:
        # ``like``: the arrays of an earlier session over mostly the same node objects (lent, so
        # unchanged: busched.fastpath.lending); their rows as first filled are copied, changed rows filled
        changed = _changed_rows(like, nodes)
        if changed is not None and like is not None:
            names = dict(like.columns)
            self.row_names = list(like.row_names)
            for i in changed:
                self.row_names[i] = _scalar_names(nodes[i])
        else:
            names = {CPU: 0, MEMORY: 1}
            self.row_names = list(map(_scalar_names, nodes))  # each row's names as first filled
            for row_names in dict.fromkeys(self.row_names):  # each distinct tuple, first seen first (in C)
                for s in row_names:
                    names.setdefault(s, len(names))
        self.columns = names
        self.source = nodes  # the list the rows follow (the session's node list)
        self.nodes = list(nodes)
        # the same names in the same rows as ``like``'s when seeded from it
        # (never changed after: shared with ``like`` when the names are its names)
        self.row = like.row if changed is not None and like is not None else dict(
            zip(map(_name, self.nodes), range(len(self.nodes))))  # (in C: a later duplicate wins, as before)
        shape = (len(self.nodes), len(names))
        # Column-major: a kernel reads a few resources over many nodes, so each resource's
        # column is contiguous (reductions across a row run several times faster).
        self.allocatable = np.zeros(shape, order="F")
        self.idle = np.zeros(shape, order="F")
        self.used = np.zeros(shape, order="F")
        self.future = np.zeros(shape, order="F")  # future idle, from NodeInfo.future_idle() itself
        self.all_rows = np.arange(len(self.nodes), dtype=np.int64)
        self.cache: dict[object, Any] = {}  # per-session kernel state (masks from fixed node facts ...)
        # per-row values that depend only on each node's spec, kept into the next session's arrays
        # (changed rows computed again): see `carried`
        self.carry: dict[object, tuple[np.ndarray, Any]] = {}
        self._changed = changed
        self._old_carry = like.carry if like is not None and changed is not None else None  # not like: no chain
        self.log: list[int] = []  # rows whose accounting changed, in order (busched.fastpath.rowcache)
        self.versions: list[int] = [0] * len(self.nodes)  # per row, how many times its accounting changed
        # the scalar columns with their names, for writing a row value by value (`_put`)
        self._scalar_columns = [(s, j) for s, j in names.items() if j > 1]
        matrices = (self.allocatable, self.idle, self.used, self.future)
        if changed is not None and like is not None:
            for matrix, first in zip(matrices, like.first):
                matrix[:] = first
            for i in changed:
                n = self.nodes[i]
                self._put(self.allocatable, i, n.allocatable)
                self._fill(i, n)
        else:
            for matrix, resources in ((self.allocatable, list(map(_allocatable, self.nodes))),
                                      (self.idle, list(map(_idle, self.nodes))),
                                      (self.used, list(map(_used, self.nodes)))):
                self._fill_column_wise(matrix, resources)
            self._fill_future()
        self.first = tuple(m.copy(order="F") for m in matrices)  # as filled, before any change
        # registered once with each distinct listener list: lent nodes share one (busched.fastpath.lending)
        lists = list(map(_listeners, self.nodes))  # (in C)
        for ls in dict(zip(map(id, lists), lists)).values():
            ls.append(self)

    @classmethod
    def kept(cls, nodes: Sequence[NodeInfo], state: dict[str, Any] | None) -> NodeArrays:
        """Arrays over ``nodes`` seeded from the last session's, kept in the plugin state ``state``
        (rows copied where the nodes are the same lent objects); these are kept there in turn."""
        arrays = cls(nodes, like=state.get("node_arrays") if state is not None else None)
        if state is not None:
            state["node_arrays"] = arrays
        return arrays

    def carried(self, key: object, row: Any, dtype: Any = bool, build: Any = None) -> np.ndarray:
        """``[row(node) for node in nodes]`` as an array, for a value that depends only on the node's
        spec (and what ``key`` names): taken over from the arrays this one was seeded from, with the
        rows of changed nodes computed again.  ``build(nodes)``, when given, is that array built
        another way (column-wise; its oracle test compares the two).  Do not modify the result."""
        got = self.carry.get(key)
        if got is not None:
            return got[0]
        old = self._old_carry.get(key) if self._old_carry is not None else None
        if old is not None:
            values = old[0].copy()
            for i in self._changed or ():
                values[i] = row(self.nodes[i])
        elif build is not None:
            values = build(self.nodes)
        else:
            values = np.fromiter(map(row, self.nodes), dtype=dtype, count=len(self.nodes))
        self.carry[key] = (values, None)
        return values

    def _fill_column_wise(self, matrix: np.ndarray, resources: list[Resource]) -> None:
        """What `_put` does row by row, a column at a time (one pass per resource name)."""
        k = len(resources)
        matrix[:, 0] = np.fromiter(map(_cpu, resources), dtype=float, count=k)  # (in C)
        matrix[:, 1] = np.fromiter(map(_memory, resources), dtype=float, count=k)
        scalars = list(map(_scalars, resources)) if len(self.columns) > 2 else []
        for s, j in self.columns.items():
            if j > 1:
                matrix[:, j] = np.fromiter(map(operator.methodcaller("get", s, 0.0), scalars), dtype=float, count=k)

    def _put(self, matrix: np.ndarray, i: int, r: Resource) -> None:
        """Row ``i`` of ``matrix`` from ``r`` (a scalar it lacks is 0.0; one without a column is left
        out).  Element writes: for the few columns a cluster has they cost less than building a list
        and assigning a row, and every task placed writes three rows."""
        matrix[i, 0] = r.cpu
        matrix[i, 1] = r.memory
        if self._scalar_columns:
            get = r.scalars.get
            for s, j in self._scalar_columns:
                matrix[i, j] = get(s, 0.0)

    def _fill_future(self) -> None:
        """The future idle matrix of a first build (after the idle matrix's): as `_fill` writes each row,
        without a future idle Resource built per node where `_plain_future` gives its cpu and memory
        (its scalar columns are idle's)."""
        releasing, pipelined = list(map(_releasing, self.nodes)), list(map(_pipelined, self.nodes))
        if any(map(_scalars, releasing)) or any(map(_scalars, pipelined)):  # (in C)
            self._fill_column_wise(self.future, [n.future_idle() for n in self.nodes])
            return
        # `_plain_future` for every node: (float(idle) + releasing) - pipelined, the same IEEE
        # operations in the same order, a column at a time (the idle matrix holds float(idle))
        k = len(self.nodes)
        self.future[:] = self.idle  # (its scalar columns; cpu and memory below)
        for j, get in ((0, _cpu), (1, _memory)):
            rel = np.fromiter(map(get, releasing), dtype=np.float64, count=k)
            pip = np.fromiter(map(get, pipelined), dtype=np.float64, count=k)
            with np.errstate(over="ignore", invalid="ignore"):  # (silent on inf, as Python's floats)
                self.future[:, j] = (self.idle[:, j] + rel) - pip

    def _fill(self, i: int, n: NodeInfo) -> None:
        # `_put` of idle and used written out (every task placed refills its node's row)
        idle, used = n.idle, n.used
        m = self.idle
        m[i, 0] = idle.cpu
        m[i, 1] = idle.memory
        scalar_columns = self._scalar_columns
        if scalar_columns:
            get = idle.scalars.get
            for s, j in scalar_columns:
                m[i, j] = get(s, 0.0)
        m = self.used
        m[i, 0] = used.cpu
        m[i, 1] = used.memory
        if scalar_columns:
            get = used.scalars.get
            for s, j in scalar_columns:
                m[i, j] = get(s, 0.0)
        plain = _plain_future(n)
        if plain is None:
            self._put(self.future, i, n.future_idle())
            return
        # no future idle Resource built for most nodes
        future = self.future
        future[i, 0], future[i, 1] = plain
        if scalar_columns:
            get = idle.scalars.get
            for s, j in scalar_columns:
                future[i, j] = get(s, 0.0)

    def column(self, matrix: np.ndarray, name: str, rows: np.ndarray | None = None) -> np.ndarray:
        """One resource's values (zeros when no node has it), over all nodes or ``rows``."""
        j = self.columns.get(name)
        n = len(self.nodes) if rows is None else len(rows)
        if j is None:
            return np.zeros(n)
        col = matrix[:, j]
        return col if rows is None else col[rows]

    def rows_of(self, nodes: Sequence[NodeInfo]) -> np.ndarray | None:
        """The array rows of ``nodes`` (in their order), or None when one of them has no row."""
        if (nodes is self.source or nodes is self.nodes) and len(nodes) == len(self.nodes):
            return self.all_rows
        rows = getattr(nodes, "rows", None)
        if rows is not None:
            return rows
        get = self.row.get
        out = np.fromiter((get(n.name, -1) for n in nodes), dtype=np.int64, count=len(nodes))
        if len(out) and out.min() < 0:
            return None
        return out

    def node_changed(self, n: NodeInfo) -> None:
        i = self.row.get(n.name)
        # only the node this row was filled from: lent nodes share one listener list, and a node the
        # lending has let go of (its kept jobs and nodes started over) must not overwrite its successor's row
        if i is not None and self.nodes[i] is n:
            self._fill(i, n)
            self.log.append(i)
            self.versions[i] += 1

    def request(self, req: Resource) -> tuple[np.ndarray, bool]:
        """The request as a row vector, and whether it asks for a resource no node has."""
        v = np.zeros(len(self.columns))
        v[0] = req.cpu
        v[1] = req.memory
        unknown = False
        for s, q in req.scalars.items():
            j = self.columns.get(s)
            if j is None:
                unknown = unknown or q >= MIN_RESOURCE
            else:
                v[j] = q
        return v, unknown

    def available(self, which: str) -> np.ndarray:
        return self.idle if which == IDLE else self.future


_listeners = operator.attrgetter("listeners")
_name = operator.attrgetter("name")
_allocatable, _idle, _used = (operator.attrgetter(a) for a in ("allocatable", "idle", "used"))
_releasing, _pipelined = operator.attrgetter("releasing"), operator.attrgetter("pipelined")
_cpu, _memory, _scalars = operator.attrgetter("cpu"), operator.attrgetter("memory"), operator.attrgetter("scalars")


def _changed_rows(like: NodeArrays | None, nodes: Sequence[NodeInfo]) -> list[int] | None:
    """The rows whose node object is not ``like``'s (None: ``like`` cannot seed these nodes: other
    length, a changed row with another node or other resource names, or most rows changed)."""
    if like is None or len(like.nodes) != len(nodes):
        return None
    old = like.nodes
    changed = list(itertools.compress(range(len(old)), map(operator.is_not, old, nodes)))  # in C
    if len(changed) > len(nodes) // 4:
        return None
    for i in changed:
        # the same names in the same order: the columns are what scanning every node gives
        if nodes[i].name != old[i].name or _scalar_names(nodes[i]) != like.row_names[i]:
            return None
    return changed


def _plain_future(n: NodeInfo) -> tuple[float, float] | None:
    """Future idle's cpu and memory exactly as `NodeInfo.future_idle` computes them (float(idle) +
    releasing - pipelined, in that order) when nothing releasing or pipelined on ``n`` names a
    scalar (most nodes): then its scalars are idle's.  None otherwise (build ``n.future_idle()``).
    Saves building a Resource: the fit refresh and the row refill run for every task placed."""
    idle, rel, pip = n.idle, n.releasing, n.pipelined
    if rel.scalars or pip.scalars:
        return None
    return float(idle.cpu) + rel.cpu - pip.cpu, float(idle.memory) + rel.memory - pip.memory


def _scalar_names(n: NodeInfo) -> tuple[str, ...]:
    # every name of allocatable, idle, used, releasing and pipelined, in that order (one per node: unpacked)
    return (*n.allocatable.scalars, *n.idle.scalars, *n.used.scalars, *n.releasing.scalars, *n.pipelined.scalars)


def fit_mask(arrays: NodeArrays, req: Resource, which: str = FUTURE_IDLE,
             rows: np.ndarray | None = None) -> np.ndarray:
    """Boolean mask over nodes (or over ``rows``): ``req.less_equal(node.<which>)`` for each.

    Only the dimensions the request names are compared, as `Resource.less_equal`
    with the ZERO default does (a dimension the request lacks is 0 <= anything).
    """
    v, unknown = arrays.request(req)
    avail = arrays.available(which)
    if rows is not None and rows is not arrays.all_rows:
        avail = avail[rows]
    if unknown:
        return np.zeros(avail.shape[0], dtype=bool)
    # cpu and memory always compare (a negative idle fails even a zero request); scalars the
    # request names compare too.
    cols = [0, 1] + [arrays.columns[s] for s in req.scalars if s in arrays.columns]
    a = avail if len(cols) == avail.shape[1] and cols == list(range(len(cols))) else avail[:, cols]
    # Resource's r <= a is ``r < a or |r - a| < MIN_RESOURCE``, which is ``r - a < MIN_RESOURCE``
    # for IEEE floats (r - a is negative exactly when r < a; NaN fails both).
    return ((v[cols] - a) < MIN_RESOURCE).all(axis=1)


def fits(arrays: NodeArrays, req: Resource, which: str = FUTURE_IDLE) -> np.ndarray:
    """`fit_mask` over every node, kept for the request's shape and refreshed where nodes changed.

    Do not modify the result: it is shared until the next change.
    """
    sc = req.scalars
    key = ("fit", which, req.cpu, req.memory, tuple(sorted(sc.items())) if len(sc) > 1 else tuple(sc.items()))
    nodes = arrays.nodes
    if which == IDLE:
        def one(r: int) -> bool:
            return req.less_equal(nodes[r].idle)
    else:
        cpu, memory, wanted = req.cpu, req.memory, list(sc.items())
        plain_future = _plain_future

        def one(r: int) -> bool:
            # req.less_equal(nodes[r].future_idle()), compared as less_equal does, without building
            # the future idle for most nodes (every task placed refreshes its node's entry)
            n = nodes[r]
            plain = plain_future(n)
            if plain is None:
                return req.less_equal(n.future_idle())
            b = plain[0]
            if not (cpu < b or abs(cpu - b) < MIN_RESOURCE):
                return False
            b = plain[1]
            if not (memory < b or abs(memory - b) < MIN_RESOURCE):
                return False
            get = n.idle.scalars.get
            for name, a in wanted:
                b = get(name, 0.0)
                if not (a < b or abs(a - b) < MIN_RESOURCE):
                    return False
            return True
    return rowcache.cached(arrays.cache, key, (arrays.log,), len(nodes), lambda: fit_mask(arrays, req, which), one)


def fit_mask_reference(nodes: Sequence[NodeInfo], req: Resource, which: str = FUTURE_IDLE) -> np.ndarray:
    """The plain per-node loop that `fit_mask` replaces."""
    out = np.zeros(len(nodes), dtype=bool)
    for i, n in enumerate(nodes):
        avail = n.idle if which == IDLE else n.future_idle()
        out[i] = req.less_equal(avail)
    return out
