"""Allocate's search and bucketing for one task in one pass, for its common case.

For every task it places, allocate runs a node search (`PredicateHelper.predicate_nodes`:
a `Search`, its kept reasons and fit errors, `select.scan`) and then buckets the nodes found
by idle and future idle (`select.gradients`), each step a layer of calls around a few masks.
When nothing of the search is read but the nodes found (the task has no error-cache group,
no hard or soft shard, no nominated node: the common case), the same masks give the same
answer directly: the scan of the search's fast half (`select.scan`: the predicates' batch
twins, the fit on future idle, the walk from the rotating start), then the fit on idle of the
nodes found, with none of the search's objects made.

`gradients_found` answers with the gradients when some node passes.  When none does, it hands
its walk over (the very walk the full search would make: same start, request, masks), and the
full search records the fit errors from it instead of walking again; whenever a twin declines
the task or fails it answers None and the caller takes the full search, which names the
failing plugin, from the same start.  The plain search
followed by `select.gradients` is the reference (tests/fastpath/test_select_run.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from busched.api.node import NodeInfo
from busched.api.task import TaskInfo
from busched.fastpath import select
from busched.fastpath.fit import IDLE, NodeArrays, fits

__all__ = ["gradients_found"]


def gradients_found(ssn: object, task: TaskInfo, nodes: Sequence[NodeInfo], fn: Callable[[TaskInfo, NodeInfo], None],
                    start: int, to_find: int) -> tuple[list[Sequence[NodeInfo]], int] | select.Scan | None:
    """Allocate's four gradients of the nodes a search from ``start`` for ``to_find`` nodes finds
    (fits idle, none elsewhere, fits only future idle, none elsewhere), and how many nodes the
    walk looked at; the walk itself (a `select.Scan` with no node found) when no node passes;
    None when ``nodes`` are not all the session's nodes, or a predicate twin declines the task
    or raises (the full search then decides)."""
    arrays: NodeArrays = ssn.arrays  # type: ignore[attr-defined]
    if arrays.rows_of(nodes) is not arrays.all_rows:
        return None
    req = task.init_resreq
    try:
        got = select.scan(ssn, task, nodes, fn, req, start=start, to_find=to_find, skip=None, in_shard=None,
                          failures=False)
    except Exception:  # noqa: BLE001 - the full search calls the twin again and names the plugin
        return None
    if got is None:
        return None
    if not len(got.found):
        return got  # what the full search's walk would be: it records the fit errors from it
    found = got.found  # positions, which are the rows (all_rows is 0..n-1)
    on_idle = fits(arrays, req, IDLE)[found]
    whole = select.RowNodes(nodes, found, found)
    if np.count_nonzero(on_idle) == len(on_idle):
        return [whole, select.NodeRows(), select.NodeRows(), select.NodeRows()], got.processed
    # every node found fits future idle: those that do not fit idle make the third gradient
    return ([whole.take(on_idle.nonzero()[0]), select.NodeRows(), whole.take((~on_idle).nonzero()[0]),
             select.NodeRows()], got.processed)
