"""The predicates plugin's node filter for many nodes at once.

Replaces `PredicatesPlugin.predicate` called node by node, for the tasks it
can answer: the pod-count check reads `PodViewArrays`; NodeUnschedulable,
NodeAffinity and TaintToleration (the filters whose verdict depends only on
the task's spec and the node) run once per node per task *shape* (node
selector, required node affinity, tolerations) and are kept for the session.
A task with host ports, inter-pod (anti-)affinity or hard topology spread in
play, or with the plugin's template cache on, gets None: the per-node
predicate runs for it.
"""

from __future__ import annotations

import itertools
import operator
from typing import Any

import numpy as np

from busched.api.task import TaskInfo
from busched.fastpath import rowcache
from busched.fastpath.fit import NodeArrays
from busched.fastpath.nodeorder import view_arrays
from busched.fastpath.podview import PodViewArrays
from busched.fastpath.rowlocal import Local

__all__ = ["predicate_mask", "stable_mask", "passing", "predicate_local", "refused_mask"]

TEMPLATE_UID_KEY = "volcano.sh/template-uid"
_PLAIN = ("stable", "")  # `_stable_key` of a task with nothing that tells nodes apart
_taints, _unschedulable = operator.attrgetter("taints"), operator.attrgetter("unschedulable")
KEEP_FROM = 2048  # nodes from which `passing` keeps the filter per template (below, afresh is cheaper)


def _stable_key(task: TaskInfo) -> Any:
    """What the cache-stable filters read of the task (its template, as far as they can tell)."""
    if not task.node_selector and not task.affinity and not task.tolerations:
        return _PLAIN  # most tasks: nothing that tells nodes apart but the nodes themselves
    aff = (task.affinity or {}).get("nodeAffinity") or {}
    return ("stable", repr((sorted(task.node_selector.items()),
                            aff.get("requiredDuringSchedulingIgnoredDuringExecution"), task.tolerations)))


def stable_mask(plugin: Any, task: TaskInfo, arrays: NodeArrays, key: Any = None) -> np.ndarray:
    """Where the cache-stable filters (``PredicatesPlugin._stable``) leave no status, over every node."""
    if key is None:
        key = _stable_key(task)
    if plugin.cache_enable:
        m = arrays.cache.get(key)
        if m is None:
            m = np.fromiter((not plugin._stable(task, n)[1] for n in arrays.nodes), dtype=bool,
                            count=len(arrays.nodes))
            arrays.cache[key] = m
        return m
    # the verdict depends on the task's shape, the node's spec and the plugin's switches only: kept
    # from session to session for the nodes that did not change (NodeArrays.carried)
    switches = (plugin.node_affinity, plugin.taint_toleration)

    def row(n: Any) -> bool:
        return not plugin._stable(task, n)[1]

    def plain(nodes: list[Any]) -> np.ndarray:
        """For a task with no node selector, node affinity or tolerations, a node that is neither
        cordoned nor tainted leaves no status (NodeUnschedulable and TaintToleration find nothing,
        NodeAffinity has nothing to match): only the others are asked (in C up to them)."""
        out = np.ones(len(nodes), dtype=bool)
        marked = map(operator.or_, map(bool, map(_taints, nodes)), map(bool, map(_unschedulable, nodes)))
        for i in itertools.compress(range(len(nodes)), marked):
            out[i] = row(nodes[i])
        return out

    return arrays.carried((key, switches), row, build=plain if key == _PLAIN else None)


def predicate_mask(plugin: Any, task: TaskInfo, arrays: NodeArrays, rows: np.ndarray) -> np.ndarray | None:
    if plugin.view is None:
        return None
    if plugin.cache_enable and task.annotations.get(TEMPLATE_UID_KEY):
        return None
    if plugin.node_ports and task.host_ports:
        return None
    view = plugin.view
    if task.affinity or task.topology_spread_constraints or view.anti_affinity_nodes:
        # only then can the inter-pod affinity or topology spread pre-filter state be non-empty
        aff, spread = plugin._filter_states(task)
        if aff is not None or spread is not None:
            return None
    pv = view_arrays(plugin.view, arrays)
    if pv is None:
        return None
    key = _stable_key(task)
    stable = stable_mask(plugin, task, arrays, key)
    if rows is not arrays.all_rows:
        return (pv.max_tasks[rows] > pv.count[rows]) & stable[rows]
    return passing(plugin, pv, arrays, key, stable)


def passing(plugin: Any, pv: PodViewArrays, arrays: NodeArrays, key: Any, stable: np.ndarray) -> np.ndarray:
    """``(pv.max_tasks > pv.count) & stable`` over every node, kept per task template (Volcano's
    predicate cache, for the whole filter): a placed pod changes one node's count, and only that
    row is computed again (`rowcache`).  Do not modify the result."""
    max_tasks, count = pv.max_tasks, pv.count
    if len(count) < KEEP_FROM:
        return (max_tasks > count) & stable  # a small cluster: afresh costs less than keeping it
    # the stable mask is fixed for the session under its key and the plugin's switches
    ck = ("passing", key, plugin.cache_enable, plugin.node_affinity, plugin.taint_toleration, id(pv))

    def one(r: int) -> bool:
        return bool(max_tasks[r] > count[r] and stable[r])

    return rowcache.cached(arrays.cache, ck, (pv.log,), len(arrays.nodes), lambda: (max_tasks > count) & stable, one)


def predicate_local(plugin: Any, task: TaskInfo, arrays: NodeArrays) -> Local | None:
    """`predicate_mask`'s answer for the task's template row by row (`busched.fastpath.batch`): where
    it is `passing`, a node's verdict changes only when its pods do.  None where `predicate_mask`
    would not answer with `passing`."""
    view = plugin.view
    if view is None or (plugin.cache_enable and task.annotations.get(TEMPLATE_UID_KEY)):
        return None
    if (plugin.node_ports and task.host_ports) or task.affinity or task.topology_spread_constraints:
        return None
    if view.anti_affinity_nodes:
        return None
    pv = view_arrays(view, arrays)
    if pv is None:
        return None
    stable = stable_mask(plugin, task, arrays)
    # the elements read as Python values (`ndarray.item`: the same integers and booleans, compared
    # without numpy scalars; every placement refreshes a row)
    max_tasks, count, is_stable = pv.max_tasks.item, pv.count.item, stable.item

    def one(r: int) -> bool:
        return bool(max_tasks(r) > count(r) and is_stable(r))

    # a pod with anti-affinity placed anywhere brings the inter-pod filter into play
    return Local((pv.log,), one, lambda: not view.anti_affinity_nodes)


def refused_mask(refusing: frozenset[str] | None, arrays: NodeArrays, rows: np.ndarray) -> np.ndarray:
    """The busched-agent-feedback predicate for ``rows``: True where the node is not one of ``refusing``
    (the nodes that refused the task recently; names the session does not hold are ignored)."""
    mask = np.ones(len(rows), dtype=bool)
    for name in refusing or ():
        row = arrays.row.get(name)
        if row is not None:
            mask &= rows != row
    return mask
