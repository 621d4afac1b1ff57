"""Node selection over all candidate nodes at once: feasibility scan, scores, best node.

These replace per-node loops in `busched.framework.nodeselect` and
`busched.actions.allocate` with a few numpy passes, and give the same answers:

* `scan` replaces the node-by-node walk of `PredicateHelper.predicate_nodes`
  (error cache, hard shard, resource fit on future idle, then the session's
  predicates, in rotated scan order until enough feasible nodes are found).
  It answers only when every predicate plugin has a batch twin
  (registered with the callback, `Session.add_fn`); the per-node walk still records each failing
  node's exact `FitError`.
* `scores` replaces the per-node sum in `prioritize_nodes` (plain node-order
  and batch node-order scores, added in the same order so the floats are
  identical).
* `pick` replaces building the ``{score: [nodes]}`` map and `select_best_node`:
  the highest score, ties broken by the session's seeded random source over
  the tied nodes in node order.
* `gradients` replaces the idle / future-idle bucketing loop of allocate's
  ``best_node``.

A session opened with ``FastPathSettings(kernels=False)`` (busched.fastpath) runs
the reference loops instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from operator import itemgetter
from typing import Any, NamedTuple

import numpy as np

from busched.api.node import NodeInfo
from busched.api.resource import Resource
from busched.api.task import TaskInfo
from busched.fastpath.fit import FUTURE_IDLE, IDLE, NodeArrays, fits

__all__ = ["NodeRows", "RowNodes", "Scan", "scan", "feasible_scan", "feasible_scan_array", "predicate_mask",
           "scores", "summed", "pick", "pick_unless_nan", "gradients"]


class NodeRows(list[NodeInfo]):
    """A list of nodes that also knows their rows in the session's `NodeArrays`."""

    rows: np.ndarray

    @classmethod
    def take(cls, nodes: Sequence[NodeInfo], positions: list[int] | np.ndarray, rows: np.ndarray) -> NodeRows:
        """``nodes[p]`` for each position (a list or an integer array), carrying ``rows[p]``.

        Positions come ascending, or as a wrapped scan gives them (an ascending run from the
        scan's start, then an ascending run of smaller positions): then the last minus the first
        is ``k - 1`` exactly when the positions are one consecutive run.
        """
        if isinstance(positions, np.ndarray):
            k = len(positions)
            if k > 1 and isinstance(nodes, list):
                a = int(positions[0])
                if int(positions[-1]) - a == k - 1:
                    # one run of consecutive positions (most scans): a slice
                    out = cls(nodes[a:a + k])
                    out.rows = rows[a:a + k].copy()
                    return out
            at = positions.tolist()
            # an index array: numpy takes the rows without converting a list first
            out = cls(itemgetter(*at)(nodes)) if len(at) > 1 else cls([nodes[p] for p in at])
            out.rows = rows[positions]
            return out
        out = cls(itemgetter(*positions)(nodes)) if len(positions) > 1 else cls([nodes[p] for p in positions])
        out.rows = rows[positions] if positions else rows[:0]
        return out


class RowNodes(Sequence[NodeInfo]):
    """``[base[p] for p in positions]`` with their rows, the nodes fetched only when read.

    A sampled search on a large cluster finds thousands of nodes, of which allocate reads one
    (the best): a list of them costs a touch of every node object, scattered in memory, which
    on 50,000 nodes is most of a task's time.  The kernels read the rows; ``nodes[i]`` and
    iteration give the nodes themselves, as the list would."""

    __slots__ = ("base", "positions", "rows")

    def __init__(self, base: Sequence[NodeInfo], positions: np.ndarray, rows: np.ndarray) -> None:
        self.base, self.positions, self.rows = base, positions, rows

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self.base[p] for p in self.positions[i].tolist()]
        return self.base[int(self.positions[i])]

    def __iter__(self) -> Any:
        base = self.base
        return iter([base[p] for p in self.positions.tolist()])

    def __repr__(self) -> str:
        return f"RowNodes({list(self)!r})"

    @classmethod
    def found(cls, nodes: Sequence[NodeInfo], positions: np.ndarray, rows: np.ndarray) -> RowNodes:
        """What `NodeRows.take` gives for ``positions`` (an integer array), unread."""
        return cls(nodes, positions, rows[positions])

    def take(self, at: np.ndarray) -> RowNodes:
        """The nodes at positions ``at`` (an integer array) of this sequence, unread."""
        return RowNodes(self.base, self.positions[at], self.rows[at])


class Scan(NamedTuple):
    found: np.ndarray  # positions (into the scanned list) of the feasible nodes, in scan order
    processed: int  # how many nodes the scan looked at, from its start
    failed: list[int]  # positions of the nodes looked at that are not feasible, in scan order
    rows: np.ndarray  # array rows of the scanned list
    fit: np.ndarray | None = None  # resource fit on future idle per scanned position (None: not asked)


def _where(mask: np.ndarray) -> np.ndarray:
    """``np.flatnonzero`` for a 1-D mask: the same positions, without its Python wrapper layers
    (ravel, then nonzero through dispatch), which cost more than the work on a few hundred nodes."""
    return mask.nonzero()[0]


def _top(values: np.ndarray) -> float:
    """``values.max()`` of a non-empty float array (NaN when it holds one: argmax points at the first
    NaN), through argmax, which skips the reduction machinery ``max`` goes through."""
    return values[values.argmax()]


def predicate_mask(ssn: Any, task: TaskInfo, arrays: NodeArrays, rows: np.ndarray,
                   fn: Callable[[TaskInfo, NodeInfo], None]) -> np.ndarray | None:
    """Where ``fn`` (the session's ``predicate_for_allocate``) raises nothing, from the plugins' batch twins.

    None when ``fn`` is something else or a predicate plugin has no twin (or declines this task).
    """
    twins = ssn.predicate_twins(fn)
    if twins is None:
        return None
    mask: np.ndarray | None = None
    for batch in twins:
        m = batch(task, arrays, rows)
        if m is None:
            return None
        mask = m if mask is None else (mask & m)
    if mask is None:
        return np.ones(len(rows), dtype=bool)
    return mask


def _head(ok: np.ndarray, start: int, to_find: int) -> np.ndarray:
    """The passing positions of ``ok[start:]``, or only a prefix of them holding at least ``to_find``
    (every caller keeps the first ``to_find`` and reads nothing past them).  A sampled search wants
    a few hundred of tens of thousands of nodes: it looks at a window twice that wide first, and
    at the rest only when the window holds too few."""
    window = 2 * to_find + 64
    if to_find > 0 and len(ok) - start > 2 * window:
        got = _where(ok[start:start + window])
        if len(got) >= to_find:
            return got
    return _where(ok[start:])


def feasible_scan(ok: np.ndarray, start: int, to_find: int) -> tuple[list[int], int, list[int]]:
    """Walk positions ``start, start+1, ...`` (wrapping) until ``to_find`` pass ``ok``.

    Returns the passing positions, how many positions were walked and the failing ones among
    them, as the per-node loop of `PredicateHelper.predicate_nodes` would see them.
    """
    found, processed, bad = feasible_scan_array(ok, start, to_find)
    return found.tolist(), processed, bad


def feasible_scan_array(ok: np.ndarray, start: int, to_find: int,
                        failures: bool = True) -> tuple[np.ndarray, int, list[int]]:
    """`feasible_scan` with the passing positions as an integer array (no list round trip).

    ``failures`` False: a caller that reads the failing positions only when none passes; then,
    when some pass, they are not looked for (given as ``[]``)."""
    total = len(ok)
    if not start and not failures and to_find > 0:
        # a walk from the first node (every unsampled search) that reports no failures: the
        # passing positions as they are, no shifting or joining
        found = _head(ok, 0, to_find)
        if len(found) > to_find:
            found = found[:to_find]
        elif len(found) < to_find:
            return found, total, [] if len(found) else _where(~ok).tolist()
        return found, int(found[-1]) + 1, []
    # the walk is ok[start:] then ok[:start]; slices are views, no reordered copy is made
    head = _head(ok, start, to_find)
    if len(head) >= to_find:
        found = head[:to_find] + start
        processed = int(head[to_find - 1]) + 1
        if processed == to_find or (not failures and to_find):
            return found, processed, []  # every node walked passed, or no one asks which did not
        bad = _where(~ok[start:start + processed]) + start
        return found, processed, bad.tolist()
    tail = _where(ok[:start]) if start else head[:0]
    need = to_find - len(head)
    if not failures and (len(head) or len(tail)):
        if len(tail) >= need:
            return np.concatenate((head + start, tail[:need])), total - start + int(tail[need - 1]) + 1, []
        return np.concatenate((head + start, tail)), total, []
    bad_head = (_where(~ok[start:]) + start).tolist()
    if len(tail) >= need:
        last = int(tail[need - 1]) + 1
        processed = total - start + last
        return (np.concatenate((head + start, tail[:need])), processed,
                bad_head + _where(~ok[:last]).tolist())
    return (np.concatenate((head + start, tail)), total,
            bad_head + (_where(~ok[:start]).tolist() if start else []))


def _shard_mask(arrays: NodeArrays, in_shard: Collection[str]) -> np.ndarray:
    key = ("shard", id(in_shard))
    m = arrays.cache.get(key)
    if m is None:
        m = np.fromiter((n.name in in_shard for n in arrays.nodes), dtype=bool, count=len(arrays.nodes))
        arrays.cache[key] = m
    return m


def scan(ssn: Any, task: TaskInfo, nodes: Sequence[NodeInfo], fn: Callable[[TaskInfo, NodeInfo], None],
         resource_fit: Resource | None, *, start: int, to_find: int, skip: Mapping[str, Any] | None,
         in_shard: Collection[str] | None, failures: bool = True) -> Scan | None:
    """The feasibility walk of `PredicateHelper.predicate_nodes` as masks; None when it cannot vectorise.
    ``failures`` False: the failing positions are wanted only when no node passes (`feasible_scan_array`)."""
    arrays: NodeArrays = ssn.arrays
    rows = arrays.rows_of(nodes)
    if rows is None:
        return None
    ok = predicate_mask(ssn, task, arrays, rows, fn)
    if ok is None:
        return None
    full = rows is arrays.all_rows
    fit = None
    if resource_fit is not None:
        f = fits(arrays, resource_fit, FUTURE_IDLE)
        fit = f if full else f[rows]
        ok = ok & fit
    if in_shard is not None:
        ok = ok & _shard_mask(arrays, in_shard)[rows]
    if skip:
        ok = ok.copy()
        where = arrays.row if rows is arrays.all_rows else {n.name: i for i, n in enumerate(nodes)}
        for name in skip:
            i = where.get(name)
            if i is not None:
                ok[i] = False
    found, processed, failed = feasible_scan_array(ok, start, to_find, failures)
    return Scan(found, processed, failed, rows, fit)


def _score_plan(ssn: Any, arrays: NodeArrays) -> tuple[list[Callable[..., Any]], list[tuple[str, Any, Any]]] | None:
    """The session's node-order twins in the order `scores` calls them and its batch node-order
    callbacks with their twins; None when a node-order callback has no twin.  Callbacks are
    registered at session open: kept per session."""
    key = ("score-plan", id(ssn))
    got = arrays.cache.get(key)
    if got is not None:
        return got[0]
    steps: list[Callable[..., Any]] = []
    plan: tuple[list[Callable[..., Any]], list[tuple[str, Any, Any]]] | None = None
    for _, _, twin in ssn.node_order_twins():
        if twin is None:
            break
        steps.append(twin)
    else:
        plan = (steps, ssn.batch_node_order_twins())
    arrays.cache[key] = (plan, ssn)  # the session is kept with it: its id stays its own
    return plan


def scores(ssn: Any, task: TaskInfo, nodes: Sequence[NodeInfo]) -> np.ndarray | None:
    """Each node's total score, as `prioritize_nodes` sums it; None when a plugin has no batch twin.
    Do not modify the result: with one scorer it may be that scorer's kept vector."""
    arrays: NodeArrays = ssn.arrays
    rows = arrays.rows_of(nodes)
    if rows is None:
        return None
    k = len(rows)
    plan = _score_plan(ssn, arrays)
    if plan is None:
        return None
    # twins may hand back vectors they keep: `summed` makes new arrays
    orders = [batch(task, arrays, rows) for batch in plan[0]]
    batches: list[np.ndarray] = []
    for _, fn, twin in plan[1]:
        vec = twin(task, arrays, rows, nodes) if twin is not None else None
        if vec is None:
            got = fn(task, list(nodes))
            vec = np.array([got.get(n.name, 0.0) for n in nodes], dtype=float)
        batches.append(vec)
    return summed(orders, batches, k)


def summed(orders: Sequence[np.ndarray], batches: Sequence[np.ndarray], k: int) -> np.ndarray:
    """The total score of ``k`` nodes from the node-order vectors and the batch node-order vectors,
    added as `prioritize_nodes` adds them.  With one vector given it may be that vector."""
    # The reference sums from 0.0 (order, then batch, each added in turn); starting from the first
    # vector instead gives the same floats (0.0 + x is x, up to the sign of a zero, which no
    # comparison sees) with fewer passes over the nodes.
    total: np.ndarray | None = None
    for vec in orders:
        total = vec if total is None else total + vec
    # the batch scores are summed apart and then added, as the reference does: o + (b1 + b2)
    # is not always (o + b1) + b2 in floating point
    batch_total: np.ndarray | None = None
    for vec in batches:
        batch_total = vec if batch_total is None else batch_total + vec
    if batch_total is not None:
        total = batch_total if total is None else total + batch_total
    if total is None:
        return np.zeros(k)
    if total.dtype != np.float64:
        total = total.astype(float)
    return total


def pick(ssn: Any, nodes: Sequence[NodeInfo], node_scores: np.ndarray) -> NodeInfo | None:
    """The highest-scoring node; ties broken by ``ssn.rng`` over the tied nodes in node order."""
    if not len(node_scores):
        return None
    best = _top(node_scores)
    if math.isnan(best):
        return None
    tied = _where(node_scores == best)
    if len(tied) == 1:
        return nodes[int(tied[0])]
    return nodes[int(tied[ssn.rng.randrange(len(tied))])]


def pick_unless_nan(ssn: Any, nodes: Sequence[NodeInfo], node_scores: np.ndarray) -> tuple[bool, NodeInfo | None]:
    """``(True, pick(...))`` when no score is NaN, else ``(False, None)`` (no random draw made).

    One pass stands for ``np.isnan(node_scores).any()`` then `pick`: a float array's max is NaN
    exactly when it holds a NaN.
    """
    if not len(node_scores):
        return True, None
    best = _top(node_scores)
    if math.isnan(best):
        return False, None
    tied = _where(node_scores == best)
    if len(tied) == 1:
        return True, nodes[int(tied[0])]
    return True, nodes[int(tied[ssn.rng.randrange(len(tied))])]


def gradients(ssn: Any, task: TaskInfo, nodes: Sequence[NodeInfo], other_shard: bool) -> list[list[NodeInfo]] | None:
    """Allocate's four buckets: fits idle (in shard, elsewhere), fits only future idle (same split)."""
    arrays: NodeArrays = ssn.arrays
    rows = arrays.rows_of(nodes)
    if rows is None:
        return None
    req = task.init_resreq
    idle = fits(arrays, req, IDLE)[rows]
    if not other_shard and np.count_nonzero(idle) == len(idle):
        # the usual case: every node fits on idle, the first gradient is the list itself
        # (a NodeRows carrying these very rows is handed back as it is)
        whole: Sequence[NodeInfo] = (nodes if isinstance(nodes, (NodeRows, RowNodes))
                                     and getattr(nodes, "rows", None) is rows
                                     else NodeRows.take(nodes, list(range(len(nodes))), rows))
        return [whole, NodeRows(), NodeRows(), NodeRows()]  # type: ignore[list-item]
    future = fits(arrays, req, FUTURE_IDLE)[rows] & ~idle
    if other_shard:
        out_of = ~_shard_mask(arrays, ssn.nodes_in_shard)[rows]
        masks = (idle & ~out_of, idle & out_of, future & ~out_of, future & out_of)
    else:
        empty = np.zeros(len(rows), dtype=bool)
        masks = (idle, empty, future, empty)
    if isinstance(nodes, RowNodes):
        return [nodes.take(_where(m)) for m in masks]  # type: ignore[misc]
    return [NodeRows.take(nodes, _where(m), rows) for m in masks]
