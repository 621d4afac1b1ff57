"""Choosing nodes for a task: filter (predicates), score, pick the best.

`predicate_nodes` runs the session's per-node predicates on the nodes whose
future idle holds the request, with Volcano's predicate error cache (keyed by
job and task role) and feasible-node sampling: the session's fast path decides
with masks (`busched.fastpath.search`), the plain walk (`Search.walk`) is the
reference.  `prioritize_nodes` sums the plain and batch
node-order scores; `select_best_node` takes the highest, ties broken by the
session's seeded random source.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from busched.api.fit import Code, FitError, FitErrors, Status
from busched.api.node import NodeInfo
from busched.api.resource import Resource
from busched.api.task import TaskInfo
from busched.fastpath.fit import FUTURE_IDLE, NodeArrays, fit_mask
from busched.fastpath.select import Scan
from busched.framework import plugin_errors
from busched.framework.config import SearchOptions
from busched.framework.session import Session

__all__ = ["PredicateHelper", "SearchOptions", "num_feasible_nodes_to_find", "prioritize_nodes",
           "select_best_node", "choose_node", "gradients", "best_node", "Gradients", "insufficient_reason",
           "unresolvable_filtered_nodes"]

SHARD_ERROR = "node isn't in scheduler node shard"


def num_feasible_nodes_to_find(n: int, opts: SearchOptions) -> int:
    if n <= opts.min_nodes_to_find or opts.percentage_of_nodes_to_find >= 100:
        return n
    pct = opts.percentage_of_nodes_to_find
    if pct <= 0:
        pct = max(50 - n // 125, opts.min_percentage_of_nodes_to_find)
    return max(n * pct // 100, opts.min_nodes_to_find)


def _sample_start(ssn: Session, total: int, opts: SearchOptions) -> tuple[int, int]:
    """How many feasible nodes a search among ``total`` looks for, and the position it starts at.
    Like Volcano, a sampled search resumes where the previous one stopped, so successive tasks
    spread over the cluster; the position lives on the session (deterministic)."""
    to_find = num_feasible_nodes_to_find(total, opts)
    return to_find, (ssn.last_node_index % total if to_find < total else 0)


def _sample_resume(ssn: Session, total: int, to_find: int, start: int, processed: int) -> None:
    """After a sampled search from ``start`` looked at ``processed`` nodes, the next one starts after them."""
    if to_find < total:
        ssn.last_node_index = (start + processed) % total


def insufficient_reason(names: list[str]) -> str:
    return "Insufficient " + ", ".join(names) if names else "Insufficient resources"


def unresolvable_filtered_nodes(ssn: Session, task: TaskInfo) -> list[NodeInfo]:
    """The session's nodes less those where the task's last fit error was unresolvable
    (preempt and reclaim look for victims only on the others)."""
    job = ssn.jobs.get(task.job)
    fe = job.nodes_fit_errors.get(task.uid) if job else None
    if fe is None:
        return ssn.node_list
    skip = fe.unresolvable_nodes()
    if not skip:
        return ssn.node_list
    return [n for n in ssn.node_list if n.name not in skip]


class PredicateHelper:
    """One per action run: it owns the predicate error cache."""

    def __init__(self, ssn: Session, enable_error_cache: bool = True,
                 opts: SearchOptions | None = None) -> None:
        self.ssn = ssn
        self.enable_error_cache = enable_error_cache
        self.opts = opts or ssn.config.node_search
        self.cache: dict[str, dict[str, FitError]] = {}

    def arrays(self) -> NodeArrays:
        return self.ssn.arrays

    def predicate_nodes(self, task: TaskInfo, nodes: list[NodeInfo],
                        fn: Callable[[TaskInfo, NodeInfo], None],
                        resource_fit: Resource | None = None,
                        errors_if_found: bool = True, lazy: bool = False) -> tuple[list[NodeInfo], FitErrors]:
        """Nodes (in scan order, up to the sampling limit) on which ``fn`` raises no FitError.

        With ``resource_fit`` given, nodes whose future idle cannot hold it fail first with
        Volcano's "Insufficient <resource>" status.  ``errors_if_found`` False: a caller that
        reads the fit errors only when no node is found (allocate); then, when the fast path
        found nodes and the error cache is off for the task, the failing nodes' errors (which
        nothing would read) are not built.  The session's fast path (busched.fastpath.search)
        decides with masks; the plain walk (`Search.walk`) is the reference.  ``lazy``: the fast
        path may give the nodes as a sequence that fetches them when read (`busched.fastpath.select.RowNodes`),
        for a caller that reads only the best of them.
        """
        if not nodes:
            return [], FitErrors()
        return self._search(Search(self, task, fn, resource_fit, len(nodes)), nodes, errors_if_found, lazy)

    def _search(self, search: Search, nodes: list[NodeInfo], errors_if_found: bool, lazy: bool,
                scan: Scan | None = None) -> tuple[list[NodeInfo], FitErrors]:
        """`predicate_nodes` for ``search``; ``scan``: its fast walk, already made (`gradients_found`)."""
        ssn, task, resource_fit = self.ssn, search.task, search.resource_fit
        got = None
        fast = ssn.fast
        if fast is not None:
            if resource_fit is not None and ssn._arrays is not None:
                # (the request's explainer, not the bound search.explain: that would tie the search in a
                # reference cycle with what it holds, the session's plugins among them)
                search.reasons = fast.kept_reasons(ssn._arrays, resource_fit, partial(_explain, resource_fit))
            try:
                # the failing nodes matter when no node passes, or for the error cache, or to the caller
                got = fast.predicate_nodes(ssn, search, nodes, errors_if_found or search.use_cache, lazy, scan)
            except FitError:
                raise
            except Exception as e:  # noqa: BLE001 - a plugin's fast twin failed (logged): the plain path names it
                plugin_errors.kernel_failed("predicate", task, e)
                got = None
        found, processed = got if got is not None else search.walk(nodes)
        _sample_resume(ssn, search.total, search.to_find, search.start, processed)
        return found, search.fe  # type: ignore[return-value]  # a RowNodes only when asked (lazy)

    def gradients_found(self, task: TaskInfo, nodes: list[NodeInfo],
                        fn: Callable[[TaskInfo, NodeInfo], None]) -> Gradients | FitErrors | None:
        """Allocate's search and bucketing in one pass (`busched.fastpath.select_run`): the four
        gradients `gradients` would make of the nodes `predicate_nodes` would find (resource
        fit on future idle, then ``fn``), when nothing else of the search is read: the task
        has no error-cache group, the session no hard or soft shard.  When no node passes, the
        fit errors `predicate_nodes` would give (recorded from the same walk, not walked
        again).  None when that does not hold (then the full search runs, from the same start)."""
        ssn = self.ssn
        fast = ssn.fast
        if (fast is None or not nodes or (self.enable_error_cache and task.role)
                or ssn.shard.mode in ("hard", "soft")):
            return None
        total = len(nodes)
        to_find, start = _sample_start(ssn, total, self.opts)
        got = fast.gradients_found(ssn, task, nodes, fn, start, to_find)
        if got is None:
            return None
        if isinstance(got, Scan):  # no node passes: the full search, from this walk
            return self._search(Search(self, task, fn, task.init_resreq, total), nodes, False, True, got)[1]
        _sample_resume(ssn, total, to_find, start, got[1])
        return Gradients(got[0])

    def chosen_found(self, task: TaskInfo, nodes: list[NodeInfo],
                     fn: Callable[[TaskInfo, NodeInfo], None]) -> Gradients | FitErrors | None:
        """`gradients_found`, or (when the fast path's vectors kept for the task's template answer:
        `busched.fastpath.batch`) gradients holding only the node `best_node` would choose from
        them, its random draw made.  Allocate's own turn."""
        ssn = self.ssn
        fast = ssn.fast
        if (fast is not None and nodes and not (self.enable_error_cache and task.role)
                and ssn.shard.mode not in ("hard", "soft")):
            total = len(nodes)
            to_find, start = _sample_start(ssn, total, self.opts)
            got = fast.batch_choose(ssn, task, nodes, fn, start, to_find)
            if got is not None:
                _sample_resume(ssn, total, to_find, start, got[1])
                return Gradients([[got[0]], [], [], []])
        return self.gradients_found(task, nodes, fn)


class Gradients(list):  # type: ignore[type-arg]
    """A task's four gradients of candidate nodes (`gradients`), already made (`best_node` takes
    them in place of the nodes)."""


def _explain(resource_fit: Resource, node: NodeInfo, fi: Resource | None) -> str:
    """Why ``resource_fit`` does not fit the node's future idle (``fi``, when already known)."""
    _, names = resource_fit.less_equal_with_names(fi if fi is not None else node.future_idle())
    return insufficient_reason(names)


class Search:
    """One node search: the sampling limit and start, the task's cached errors, the fit errors
    found, and the per-node check both paths record failures with."""

    __slots__ = ("helper", "task", "fn", "resource_fit", "fe", "use_cache", "group", "errs", "skip",
                 "to_find", "total", "start", "in_shard", "reasons")

    def __init__(self, helper: PredicateHelper, task: TaskInfo, fn: Callable[[TaskInfo, NodeInfo], None],
                 resource_fit: Resource | None, total: int) -> None:
        ssn = helper.ssn
        self.helper, self.task, self.fn, self.resource_fit = helper, task, fn, resource_fit
        self.fe = FitErrors()
        self.use_cache = helper.enable_error_cache and bool(task.role)
        self.group = f"{task.job}/{task.role}"
        errs = helper.cache.get(self.group)
        self.skip = errs if self.use_cache and errs is not None else None
        self.errs: dict[str, FitError] = errs if errs is not None else {}
        self.total = total
        self.to_find, self.start = _sample_start(ssn, total, helper.opts)
        self.in_shard = ssn.nodes_in_shard if ssn.shard.mode == "hard" else None
        self.reasons: Any = None  # the fast path's kept reasons (busched.fastpath.search.KeptReasons)

    def explain(self, node: NodeInfo, fi: Resource | None) -> str:
        """Why the request does not fit the node's future idle."""
        assert self.resource_fit is not None
        return _explain(self.resource_fit, node, fi)

    def feasible(self, node: NodeInfo, fits: bool | None = None) -> bool:
        """One node's verdict; a failure is recorded in the fit errors and the error cache."""
        skip, task = self.skip, self.task
        if skip is not None and node.name in skip:
            self.fe.set_node_error(node.name, skip[node.name])
            return False
        resource_fit = self.resource_fit
        try:
            if self.in_shard is not None and node.name not in self.in_shard:
                raise FitError(task.key, node.name, [Status(Code.Error, SHARD_ERROR)])
            if resource_fit is not None:
                fi = None
                if fits is None:
                    fi = node.future_idle()
                    fits = resource_fit.less_equal(fi)
                if not fits:
                    why = self.reasons.why(node, fi) if self.reasons is not None else self.explain(node, fi)
                    e = FitError(task.key, node.name, [Status(Code.Unschedulable, why)])
                    self.errs[node.name] = e  # as the except clause below, without raising
                    self.helper.cache[self.group] = self.errs
                    self.fe.nodes[node.name] = e
                    return False
            self.fn(task, node)
        except FitError as e:
            self.errs[node.name] = e  # (set_node_error below drops its traceback, in place: `kept`)
            self.helper.cache[self.group] = self.errs
            self.fe.set_node_error(node.name, e)
            return False
        return True

    def walk(self, nodes: list[NodeInfo]) -> tuple[list[NodeInfo], int]:
        """The plain walk from the start, node by node, until enough are found: the reference."""
        fits_all = None
        if self.resource_fit is not None:
            arr = self.helper.arrays()
            rows = arr.rows_of(nodes)
            if rows is not None:
                fits_all = fit_mask(arr, self.resource_fit, FUTURE_IDLE, rows).tolist()
        found: list[NodeInfo] = []
        processed = 0
        total, start, to_find, feasible = self.total, self.start, self.to_find, self.feasible
        for k in range(total):
            i = (start + k) % total
            processed += 1
            if feasible(nodes[i], fits_all[i] if fits_all is not None else None):
                found.append(nodes[i])
                if len(found) >= to_find:
                    break
        return found, processed


def prioritize_nodes(ssn: Session, task: TaskInfo, nodes: list[NodeInfo]) -> dict[float, list[NodeInfo]]:
    """Score each node: plain node-order scores + batch scores.  A node-order
    plugin that fails on the task: no node (the failure is the task's fit error)."""
    try:
        return _prioritize_nodes(ssn, task, nodes)
    except plugin_errors.PluginFailed as e:
        _task_failed(ssn, task, e)
        return {}


def _task_failed(ssn: Session, task: TaskInfo, e: FitError) -> None:
    """A plugin failed on ``task`` as a whole: that is its fit error."""
    job = ssn.jobs.get(task.job)
    if job is not None:
        fe = FitErrors()
        fe.set_error(e.statuses[0].reason if e.statuses else str(e))
        job.nodes_fit_errors[task.uid] = fe


def _fast_scores(ssn: Session, task: TaskInfo, nodes: list[NodeInfo]) -> np.ndarray | None:
    fast = ssn.fast
    assert fast is not None  # (called only on the fast path)
    try:
        return fast.scores(ssn, task, nodes)
    except Exception as e:  # noqa: BLE001 - a plugin's fast twin failed (logged): the plain path names the plugin
        plugin_errors.kernel_failed("node order", task, e)
        return None


def _prioritize_nodes(ssn: Session, task: TaskInfo, nodes: list[NodeInfo]) -> dict[float, list[NodeInfo]]:
    if ssn.fast is not None:
        fast = _fast_scores(ssn, task, nodes)
        if fast is not None:
            by_score: dict[float, list[NodeInfo]] = {}
            for node, s in zip(nodes, fast.tolist()):
                by_score.setdefault(s, []).append(node)
            return by_score
    order_scores: dict[str, float] = {}
    for node in nodes:
        order_scores[node.name] = ssn.node_order_fn(task, node)
    batch = ssn.batch_node_order_fn(task, nodes)
    out: dict[float, list[NodeInfo]] = {}
    for node in nodes:
        s = 0.0 + order_scores.get(node.name, 0.0) + batch.get(node.name, 0.0)
        out.setdefault(s, []).append(node)
    return out


def node_scores(ssn: Session, task: TaskInfo, nodes: list[NodeInfo]) -> dict[str, float]:
    """Each node's total score (for reports)."""
    out = {}
    for s, ns in prioritize_nodes(ssn, task, nodes).items():
        for n in ns:
            out[n.name] = s
    return out


def choose_node(ssn: Session, task: TaskInfo, nodes: list[NodeInfo]) -> NodeInfo | None:
    """The node for ``task`` among ``nodes``: the highest score (ties drawn from the session's seeded
    random source).  None when a node-order plugin fails on the task (then that is the task's fit
    error).  (Volcano's BestNodeFn point is not offered: no plugin here has one.)"""
    if ssn.fast is not None:
        fast = _fast_scores(ssn, task, nodes)
        if fast is not None:
            done, best = ssn.fast.pick_unless_nan(ssn, nodes, fast)
            if done:  # no NaN score (a NaN takes the per-node path below, as before)
                return best
    try:
        scores = _prioritize_nodes(ssn, task, nodes)
    except plugin_errors.PluginFailed as e:
        _task_failed(ssn, task, e)
        return None
    best, _ = select_best_node(ssn, scores)
    return best


def gradients(ssn: Session, task: TaskInfo, nodes: list[NodeInfo]) -> list[list[NodeInfo]]:
    """Allocate's node gradients: fits idle (in shard, then elsewhere), fits future idle (same split)."""
    soft = ssn.shard.mode == "soft"
    if ssn.fast is not None:
        fast = ssn.fast.gradients(ssn, task, nodes, soft)
        if fast is not None:
            return fast
    buckets: list[list[NodeInfo]] = [[], [], [], []]
    for n in nodes:
        other = 1 if soft and n.name not in ssn.nodes_in_shard else 0
        if task.init_resreq.less_equal(n.idle):
            buckets[other].append(n)
        elif task.init_resreq.less_equal(n.future_idle()):
            buckets[2 + other].append(n)
    return buckets


def best_node(ssn: Session, task: TaskInfo, nodes: list[NodeInfo] | Gradients) -> NodeInfo | None:
    """Allocate's choice: the first non-empty gradient (idle, then future idle; this shard first)
    and the best-scored node in it.  ``nodes`` may be the gradients already made."""
    for bucket in nodes if isinstance(nodes, Gradients) else gradients(ssn, task, nodes):
        if not bucket:
            continue
        if len(bucket) == 1:
            return bucket[0]
        best = choose_node(ssn, task, bucket)
        if best is not None:
            return best
    return None


def select_best_node(ssn: Session, node_scores_: dict[float, list[NodeInfo]]) -> tuple[NodeInfo | None, float]:
    if not node_scores_:
        return None, 0.0
    best = max(node_scores_)
    nodes = node_scores_[best]
    if len(nodes) == 1:
        return nodes[0], best
    return nodes[ssn.rng.randrange(len(nodes))], best
