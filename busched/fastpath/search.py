"""The fast half of a node search (`busched.framework.nodeselect.PredicateHelper.predicate_nodes`).

The framework's search (`Search`) holds what one search needs and its plain walk, the
reference; here the same walk is decided by masks (`select.scan`): every node's verdict at
once, then only the failing nodes' exact errors are built, by the search's own per-node
check, so both paths record the same errors.  A node's "Insufficient ..." reason for a
request is kept on the session's node arrays while the node's accounting is unchanged
(`NodeArrays.versions`); the FitError itself stays the task's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from busched.api.node import NodeInfo
from busched.api.resource import Resource
from busched.fastpath import select
from busched.fastpath.fit import NodeArrays

__all__ = ["KeptReasons", "predicate_nodes"]


class KeptReasons:
    """A node's "Insufficient ..." reason for one request, kept while the node's row is unchanged."""

    __slots__ = ("arrays", "kept", "request", "key", "explain")

    def __init__(self, arrays: NodeArrays, request: Resource,
                 explain: Callable[[NodeInfo, Resource | None], str]) -> None:
        self.arrays = arrays
        self.kept: dict[str, tuple[int, tuple, str]] = arrays.cache.setdefault("insufficient", {})
        self.request = request
        self.key: tuple | None = None  # made on the first failing node (most searches have none to explain)
        self.explain = explain

    def why(self, node: NodeInfo, fi: Resource | None) -> str:
        if self.key is None:
            r = self.request
            self.key = (r.cpu, r.memory, tuple(sorted(r.scalars.items())))
        arr = self.arrays
        i = arr.row.get(node.name)
        if i is not None and arr.nodes[i] is node:  # the session's own node, whose changes count
            got = self.kept.get(node.name)
            version = arr.versions[i]
            if got is not None and got[0] == version and got[1] == self.key:
                return got[2]
            why = self.explain(node, fi)
            self.kept[node.name] = (version, self.key, why)
            return why
        return self.explain(node, fi)


def predicate_nodes(ssn: Any, search: Any, nodes: list[NodeInfo], failures: bool, lazy: bool = False,
                    scan: select.Scan | None = None) -> tuple[Sequence[NodeInfo], int] | None:
    """The nodes found and how many were looked at, or None when the masks cannot decide (then
    the search's plain walk runs).  ``failures`` False: the failing nodes' errors are built only
    when no node passes.  ``lazy``: the nodes found as a `select.RowNodes`, fetched when read (a
    caller that reads few of them).  A plugin's vectorised twin that raises: the caller names the
    plugin.  ``scan``: this very walk, already made (allocate's one-pass search that found no node,
    `busched.fastpath.select_run`), so it is not made twice."""
    if scan is None:
        scan = select.scan(ssn, search.task, nodes, search.fn, search.resource_fit, start=search.start,
                           to_find=search.to_find, skip=search.skip, in_shard=search.in_shard, failures=failures)
    if scan is None:
        return None
    # the masks decided which nodes pass; the failing ones get their exact errors, the kernel's
    # resource fit (the same verdict as less_equal) sparing recomputing it
    failed = scan.failed  # [] when some node passed and nothing reads them
    fit = scan.fit.tolist() if scan.fit is not None and failed else None
    feasible = search.feasible
    for i in failed:
        feasible(nodes[i], fit[i] if fit is not None else None)
    if lazy:
        return select.RowNodes.found(nodes, scan.found, scan.rows), scan.processed
    found: list[NodeInfo] = select.NodeRows.take(nodes, scan.found, scan.rows)
    return found, scan.processed
