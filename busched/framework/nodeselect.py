"""Choosing nodes for a task: filter (predicates), score, pick the best.

`predicate_nodes` first runs the resource-fit kernel over every node at once
(`busched.kernels.fit`), then the session's per-node predicates on the nodes
that fit, with Volcano's predicate error cache (keyed by job and task role) and
feasible-node sampling.  `prioritize_nodes` sums the plain and batch
node-order scores; `select_best_node` takes the highest, ties broken by the
session's seeded random source.
"""

from __future__ import annotations

from collections.abc import Callable


from busched.api.fit import Code, FitError, FitErrors, Status
from busched.api.node import NodeInfo
from busched.api.resource import Resource
from busched.api.task import TaskInfo
from busched import kernels
from busched.framework import plugin_errors
from busched.framework.config import SearchOptions
from busched.framework.session import Session
from busched.kernels import select
from busched.kernels.fit import FUTURE_IDLE, NodeArrays, fit_mask

__all__ = ["PredicateHelper", "SearchOptions", "num_feasible_nodes_to_find", "prioritize_nodes",
           "select_best_node", "choose_node", "gradients", "insufficient_reason"]

SHARD_ERROR = "node isn't in scheduler node shard"


def num_feasible_nodes_to_find(n: int, opts: SearchOptions) -> int:
    if n <= opts.min_nodes_to_find or opts.percentage_of_nodes_to_find >= 100:
        return n
    pct = opts.percentage_of_nodes_to_find
    if pct <= 0:
        pct = max(50 - n // 125, opts.min_percentage_of_nodes_to_find)
    return max(n * pct // 100, opts.min_nodes_to_find)


def insufficient_reason(names: list[str]) -> str:
    return "Insufficient " + ", ".join(names) if names else "Insufficient resources"


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
                        errors_if_found: bool = True) -> tuple[list[NodeInfo], FitErrors]:
        """Nodes (in scan order, up to the sampling limit) on which ``fn`` raises no FitError.

        With ``resource_fit`` given, nodes whose future idle cannot hold it fail first, in one
        vectorised pass, with Volcano's "Insufficient <resource>" status.  ``errors_if_found``
        False: a caller that reads the fit errors only when no node is found (allocate); then,
        when the kernels found nodes and the error cache is off for the task, the failing nodes'
        errors (which nothing would read) are not built.
        """
        fe = FitErrors()
        if not nodes:
            return [], fe
        use_cache = self.enable_error_cache and bool(task.role)
        group = f"{task.job}/{task.role}"
        errs = self.cache.get(group)
        failed_before = errs is not None
        if errs is None:
            errs = {}
        to_find = num_feasible_nodes_to_find(len(nodes), self.opts)
        in_shard = self.ssn.nodes_in_shard if self.ssn.shard.mode == "hard" else None
        skip = errs if use_cache and failed_before else None
        # Like Volcano, a sampled search resumes where the previous one stopped, so successive
        # tasks spread over the cluster; the position lives on the session (deterministic).
        total = len(nodes)
        start = self.ssn.last_node_index % total if to_find < total else 0

        # kernels: a node's "Insufficient ..." reason for this request, kept while the node's
        # accounting is unchanged (NodeArrays.versions); the FitError itself is the task's own
        reasons: dict[str, tuple[int, tuple, str]] | None = None
        if kernels.USE_KERNELS and resource_fit is not None and self.ssn._arrays is not None:
            arr_ = self.ssn._arrays
            reasons = arr_.cache.setdefault("insufficient", {})
            versions, row_of = arr_.versions, arr_.row
        req_key: tuple | None = None  # made on the first failing node (most searches have none to explain)

        def insufficient(node: NodeInfo, fi: Resource | None) -> str:
            nonlocal req_key
            if reasons is not None:
                if req_key is None:
                    req_key = (resource_fit.cpu, resource_fit.memory, tuple(sorted(resource_fit.scalars.items())))
                i = row_of.get(node.name)
                if i is not None and arr_.nodes[i] is node:  # the session's own node, whose changes count
                    got = reasons.get(node.name)
                    if got is not None and got[0] == versions[i] and got[1] == req_key:
                        return got[2]
                    _, names = resource_fit.less_equal_with_names(fi if fi is not None else node.future_idle())
                    why = insufficient_reason(names)
                    reasons[node.name] = (versions[i], req_key, why)
                    return why
            _, names = resource_fit.less_equal_with_names(fi if fi is not None else node.future_idle())
            return insufficient_reason(names)

        def feasible(node: NodeInfo, fits: bool | None = None) -> bool:
            """One node's verdict; a failure is recorded in the fit errors and the error cache."""
            if skip is not None and node.name in skip:
                fe.set_node_error(node.name, skip[node.name])
                return False
            try:
                if in_shard is not None and node.name not in in_shard:
                    raise FitError(task.key, node.name, [Status(Code.Error, SHARD_ERROR)])
                if resource_fit is not None:
                    fi = None
                    if fits is None:
                        fi = node.future_idle()
                        fits = resource_fit.less_equal(fi)
                    if not fits:
                        e = FitError(task.key, node.name, [Status(Code.Unschedulable, insufficient(node, fi))])
                        errs[node.name] = e  # as the except clause below, without raising
                        self.cache[group] = errs
                        fe.nodes[node.name] = e
                        return False
                fn(task, node)
            except FitError as e:
                errs[node.name] = e
                self.cache[group] = errs
                fe.set_node_error(node.name, e)
                return False
            return True

        scan = None
        if kernels.USE_KERNELS:
            # the failing nodes matter when no node passes, or for the error cache, or to the caller
            try:
                scan = select.scan(self.ssn, task, nodes, fn, resource_fit, start=start, to_find=to_find,
                                   skip=skip, in_shard=in_shard, failures=errors_if_found or use_cache)
            except FitError:
                raise
            except Exception as e:  # a plugin's fast twin failed: the plain path names the plugin
                plugin_errors.kernel_failed("predicate", task, e)
                scan = None
        if scan is not None:
            # the masks decided which nodes pass; the failing ones get their exact errors
            # the kernel's resource fit (the same verdict as less_equal) spares recomputing it
            failed = scan.failed  # [] when some node passed and nothing reads them (see above)
            fit = scan.fit.tolist() if scan.fit is not None and failed else None
            for i in failed:
                feasible(nodes[i], fit[i] if fit is not None else None)
            found: list[NodeInfo] = select.NodeRows.take(nodes, scan.found, scan.rows)
            processed = scan.processed
        else:
            fits_all = None
            if resource_fit is not None:
                arr = self.arrays()
                rows = arr.rows_of(nodes)
                if rows is not None:
                    fits_all = fit_mask(arr, resource_fit, FUTURE_IDLE, rows).tolist()
            found = []
            processed = 0
            for k in range(total):
                i = (start + k) % total
                processed += 1
                if feasible(nodes[i], fits_all[i] if fits_all is not None else None):
                    found.append(nodes[i])
                    if len(found) >= to_find:
                        break
        if to_find < total:
            self.ssn.last_node_index = (start + processed) % total
        return found, fe


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


def _fast_scores(ssn: Session, task: TaskInfo, nodes: list[NodeInfo]):  # noqa: ANN202
    try:
        return select.scores(ssn, task, nodes)
    except Exception as e:  # a plugin's fast twin failed: the plain path names the plugin
        plugin_errors.kernel_failed("node order", task, e)
        return None


def _prioritize_nodes(ssn: Session, task: TaskInfo, nodes: list[NodeInfo]) -> dict[float, list[NodeInfo]]:
    if kernels.USE_KERNELS:
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
    if kernels.USE_KERNELS:
        fast = _fast_scores(ssn, task, nodes)
        if fast is not None:
            done, best = select.pick_unless_nan(ssn, nodes, fast)
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
    if kernels.USE_KERNELS:
        fast = select.gradients(ssn, task, nodes, soft)
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


def select_best_node(ssn: Session, node_scores_: dict[float, list[NodeInfo]]) -> tuple[NodeInfo | None, float]:
    if not node_scores_:
        return None, 0.0
    best = max(node_scores_)
    nodes = node_scores_[best]
    if len(nodes) == 1:
        return nodes[0], best
    return nodes[ssn.rng.randrange(len(nodes))], best
