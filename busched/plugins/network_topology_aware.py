"""network-topology-aware: keep a job's tasks close on the network (Volcano's plugin of that name).

It answers four questions, over the session's hypernode tree
(`busched.framework.hypernodes`):

- *hypernode gradients* (job and sub-job): for a job or sub-job in hard mode,
  which hypernodes to try, grouped by tier, lowest tier first.  The search
  starts at the hypernode the caller offers, narrowed to the subtree the
  job may still use given where its tasks already run (the highest ancestor
  of its allocated hypernode within ``highestTierAllowed``); a hypernode is
  eligible when its tier is allowed and, for a job with nothing placed yet,
  its idle or future-idle resources (at session open) cover the job's
  minimum.  Other jobs get the offered hypernode alone.
- *hypernode order*: a sub-job prefers the hypernode it would fill most
  (binpacking of the sub-job's whole request over the hypernode's
  allocatable and used); among equal best, the one already holding more of
  its tasks.  Scores scale to 0..100 x ``weight``.
- *node order* (batch): a task of a sub-job with a network topology prefers
  nodes whose lowest-tier hypernode shares a low common ancestor with the
  hypernode its sub-job already uses; other tasks get hypernode-level
  binpacking, tier by tier, each tier's weight fading by
  ``hypernode.binpack.normal-pod.fading``.

Arguments::

    weight: 1
    hypernode.binpack.cpu: 1
    hypernode.binpack.memory: 1
    hypernode.binpack.resources: nvidia.com/gpu, example.com/foo
    hypernode.binpack.resources.nvidia.com/gpu: 2
    hypernode.binpack.normal-pod.enable: true
    hypernode.binpack.normal-pod.fading: 0.8
    hypernode.gradient.evict.max-hypernodes: 8
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from busched.api.job import JobInfo
from busched.api.node import NodeInfo
from busched.api.resource import CPU, MEMORY, Resource
from busched.api.subjob import JOB_ALLOCATED_HYPERNODE, SubJobInfo, hard_topology
from busched.api.task import TaskInfo
from busched.framework import points
from busched.framework.arguments import Arguments
from busched.framework.hypernodes import HyperNodeInfo, Topology
from busched.framework.session import EventHandler, Session

__all__ = ["NetworkTopologyAwarePlugin", "JOB_ALLOCATED_HYPERNODE", "PURPOSE_ALLOCATE", "PURPOSE_EVICT",
           "search_root"]

MAX_NODE_SCORE = 100.0
FULL_SCORE = 1.0
ZERO_SCORE = 0.0
PURPOSE_ALLOCATE = "allocate"
PURPOSE_EVICT = "evict"

WEIGHT_KEY = "weight"
CPU_KEY = "hypernode.binpack.cpu"
MEMORY_KEY = "hypernode.binpack.memory"
RESOURCES_KEY = "hypernode.binpack.resources"
NORMAL_POD_ENABLE_KEY = "hypernode.binpack.normal-pod.enable"
NORMAL_POD_FADING_KEY = "hypernode.binpack.normal-pod.fading"
EVICT_MAX_KEY = "hypernode.gradient.evict.max-hypernodes"


def _pow(base: float, exp: float) -> float:
    try:
        return math.pow(base, exp)
    except (ZeroDivisionError, ValueError):
        return math.inf  # Go's math.Pow(0, negative)


@dataclass
class _Usage:
    allocatable: Resource
    used: Resource
    idle: Resource
    future_idle: Resource


class NetworkTopologyAwarePlugin:
    name = "network-topology-aware"
    reads_arguments = (WEIGHT_KEY, CPU_KEY, MEMORY_KEY, RESOURCES_KEY, RESOURCES_KEY + ".*",
                       NORMAL_POD_ENABLE_KEY, NORMAL_POD_FADING_KEY, EVICT_MAX_KEY)
    reads_clock = False

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        args = Arguments.of(arguments)
        self.weight = args.get_int(WEIGHT_KEY, 1)
        if self.weight < 0:
            self.weight = 1
        self.resource_weights: dict[str, int] = {CPU: args.get_int(CPU_KEY, 1), MEMORY: args.get_int(MEMORY_KEY, 1)}
        for k in (CPU, MEMORY):
            if self.resource_weights[k] < 0:
                self.resource_weights[k] = 1
        for r in args.get_str(RESOURCES_KEY, "").split(","):
            r = r.strip()
            if r:
                w = args.get_int(f"{RESOURCES_KEY}.{r}", 1)
                self.resource_weights[r] = w if w >= 0 else 1
        self.normal_pod_enable = args.get_bool(NORMAL_POD_ENABLE_KEY, True)
        self.fading = args.get_float(NORMAL_POD_FADING_KEY, 0.8)
        if self.fading < 0:
            self.fading = 0.8
        self.evict_max = args.get_int(EVICT_MAX_KEY, 8)
        if self.evict_max <= 0:
            self.evict_max = 8
        self.min_tier = 0
        self.max_tier = 0
        self.usage: dict[str, _Usage] = {}

    # -- session ------------------------------------------------------------------------
    def on_session_open(self, ssn: Session) -> None:
        topo = ssn.topology
        if topo.tiers:
            self.min_tier, self.max_tier = topo.tiers[0], topo.tiers[-1]
        self.usage = {}
        node_hypernodes: dict[str, list[str]] = {}
        for hn in topo.hypernodes:
            u = self.usage[hn] = _Usage(Resource(), Resource(), Resource(), Resource())
            for node in topo.real_nodes_list.get(hn, ()):
                u.allocatable.add(node.allocatable)
                u.used.add(node.used)
                u.idle.add(node.idle)
                u.future_idle.add(node.future_idle())
                node_hypernodes.setdefault(node.name, []).append(hn)
        # per node, the hypernode holding it in each tier (the first declared, as a set would give one)
        self.node_tier_hypernode: dict[str, dict[int, str]] = {}
        for tier in topo.tiers:
            for hn in topo.set_by_tier.get(tier, ()):
                for name in topo.real_nodes_set.get(hn, ()):
                    self.node_tier_hypernode.setdefault(name, {}).setdefault(tier, hn)

        def on_allocate(task: TaskInfo) -> None:
            for hn in node_hypernodes.get(task.node_name, ()):
                self.usage[hn].used.add(task.resreq)

        def on_deallocate(task: TaskInfo) -> None:
            for hn in node_hypernodes.get(task.node_name, ()):
                self.usage[hn].used.sub(task.resreq)

        ssn.add_event_handler(EventHandler(allocate=on_allocate, deallocate=on_deallocate))
        ssn.add_fn(points.HYPER_NODE_ORDER, self.name, lambda sj, hns: self.hyper_node_order(ssn, sj, hns))
        ssn.add_fn(points.BATCH_NODE_ORDER, self.name, lambda task, nodes: self.batch_node_order(ssn, task, nodes))

        def job_gradient(job: JobInfo, hn: HyperNodeInfo, purpose: str) -> list[list[HyperNodeInfo]]:
            hard, tier = job.is_hard_topology_mode()
            if not hard:
                return [[hn]]
            return self._gradients(topo, hn, tier, job.allocated_hypernode, job.get_min_resources(), purpose)

        def sub_job_gradient(sj: SubJobInfo, hn: HyperNodeInfo, purpose: str) -> list[list[HyperNodeInfo]]:
            hard, tier = hard_topology(sj.network_topology)
            if not hard:
                return [[hn]]
            return self._gradients(topo, hn, tier, sj.allocated_hypernode, sj.get_min_resources(), purpose)

        ssn.add_fn(points.HYPER_NODE_GRADIENT_FOR_JOB, self.name, job_gradient)
        ssn.add_fn(points.HYPER_NODE_GRADIENT_FOR_SUB_JOB, self.name, sub_job_gradient)

    # -- gradients --------------------------------------------------------------------------
    def _gradients(self, topo: Topology, hn: HyperNodeInfo, highest_tier: int, allocated: str,
                   min_resource: Resource, purpose: str) -> list[list[HyperNodeInfo]]:
        root = search_root(topo, hn, highest_tier, allocated)
        if root is None:
            return []
        by_tier: dict[int, list[HyperNodeInfo]] = {}
        queue = [root]
        seen = {root.name}
        while queue:
            cur = queue.pop(0)
            if self._eligible(cur, highest_tier, allocated, min_resource, purpose):
                by_tier.setdefault(cur.tier, []).append(cur)
            for c in cur.children:
                if c not in seen and c in topo.hypernodes:
                    seen.add(c)
                    queue.append(topo.hypernodes[c])
        out = [by_tier[t] for t in sorted(by_tier)]
        if purpose != PURPOSE_EVICT:
            return out
        return self._reverse_and_cap(out)

    def _eligible(self, hn: HyperNodeInfo, highest_tier: int, allocated: str, min_resource: Resource,
                  purpose: str) -> bool:
        if hn.tier > highest_tier:
            return False
        if allocated:
            return True  # partly running: where it may go was settled by the search root
        u = self.usage.get(hn.name)
        if u is None:
            return True
        if purpose == PURPOSE_EVICT:
            return min_resource.less_equal(u.allocatable)
        return min_resource.less_equal(u.idle) or min_resource.less_equal(u.future_idle)

    def _reverse_and_cap(self, gradients: list[list[HyperNodeInfo]]) -> list[list[HyperNodeInfo]]:
        """For eviction: widest domains first, at most ``evict_max`` hypernodes in all."""
        remaining = self.evict_max
        out = []
        for g in reversed(gradients):
            if remaining == 0:
                break
            if len(g) <= remaining:
                out.append(g)
                remaining -= len(g)
            else:
                out.append(g[len(g) - remaining:])
                remaining = 0
        return out

    # -- hypernode order ----------------------------------------------------------------------
    def hyper_node_order(self, ssn: Session, sj: SubJobInfo,
                         hypernodes: Mapping[str, list[NodeInfo]]) -> dict[str, float]:
        scores = self._sub_job_binpack_scores(sj, hypernodes)
        if scores:
            best = max(scores.values())
            tied = [hn for hn, s in scores.items() if s == best]
            if len(tied) > 1:
                for hn in tied:
                    scores[hn] += self._task_num_score(ssn.topology, hn, sj)
        return self._scale(scores)

    def _sub_job_binpack_scores(self, sj: SubJobInfo, hypernodes: Mapping[str, list[NodeInfo]]) -> dict[str, float]:
        request: dict[str, float] = {}
        for t in sj.tasks.values():
            for r in t.resreq.names():
                if r in self.resource_weights:
                    request[r] = request.get(r, 0.0) + t.resreq.get(r)
        out: dict[str, float] = {}
        for hn in hypernodes:
            total, weights, overused = 0.0, 0, False
            u = self.usage.get(hn)
            for r, req in request.items():
                if u is None:
                    continue
                w = self.resource_weights[r]
                alloc, used = u.allocatable.get(r), u.used.get(r)
                if used + req > alloc:
                    overused = True
                    break
                total += w * (used + req) / alloc
                weights += w
            out[hn] = ZERO_SCORE if overused or weights <= 0 else total / weights
        return out

    def _task_num_score(self, topo: Topology, hn: str, sj: SubJobInfo) -> float:
        if not sj.tasks:
            return ZERO_SCORE
        return topo.task_num(hn, sj.tasks.values()) / len(sj.tasks)

    def _scale(self, scores: dict[str, float]) -> dict[str, float]:
        return {k: MAX_NODE_SCORE * self.weight * v for k, v in scores.items()}

    # -- node order -------------------------------------------------------------------------------
    def batch_node_order(self, ssn: Session, task: TaskInfo, nodes: list[NodeInfo]) -> dict[str, float]:
        job = ssn.jobs.get(task.job)
        if job is None:
            return {}
        sj = job.sub_jobs.get(job.task_to_sub_job.get(task.uid, ""))
        if sj is None:
            return self._normal_pod_scores(ssn.topology, task, nodes)
        if sj.with_network_topology():
            scores = self._network_aware_scores(ssn.topology, task, sj, nodes)
        else:
            scores = self._normal_pod_scores(ssn.topology, task, nodes)
        return self._scale(scores)

    def _normal_pod_scores(self, topo: Topology, task: TaskInfo, nodes: list[NodeInfo]) -> dict[str, float]:
        if not self.normal_pod_enable:
            return {}
        tier_weights = {t: _pow(self.fading, t - 1) for t in range(self.min_tier, self.max_tier + 1)}
        total_weight = sum(tier_weights.values())
        if total_weight <= 0:
            return {}
        out: dict[str, float] = {}
        for node in nodes:
            held = self.node_tier_hypernode.get(node.name, {})
            total = 0.0
            for tier, w in tier_weights.items():
                hn = held.get(tier)
                # a node under no hypernode of this tier scores full: such nodes are preferred
                total += w * (self._pod_binpack_score(task, hn) if hn is not None else FULL_SCORE)
            out[node.name] = total / total_weight
        return out

    def _pod_binpack_score(self, task: TaskInfo, hn: str) -> float:
        total, weights = 0.0, 0
        u = self.usage.get(hn)
        for r in task.resreq.names():
            w = self.resource_weights.get(r)
            if w is None or u is None:
                continue
            alloc, used, req = u.allocatable.get(r), u.used.get(r), task.resreq.get(r)
            if used + req > alloc:
                return ZERO_SCORE
            total += w * (used + req) / alloc
            weights += w
        return total / weights if weights > 0 else ZERO_SCORE

    def _network_aware_scores(self, topo: Topology, task: TaskInfo, sj: SubJobInfo,
                              nodes: list[NodeInfo]) -> dict[str, float]:
        allocated = task.extra.get(JOB_ALLOCATED_HYPERNODE, "")
        if not allocated:
            return {}
        out: dict[str, float] = {}
        for node in nodes:
            out[node.name] = self._lca_score(topo, topo.lowest_tier_hypernode(node.name), allocated)
        if out:
            best = max(out.values())
            tied = [n for n, s in out.items() if s == best]
            if len(tied) > 1:
                for n in tied:
                    out[n] += self._task_num_score(topo, topo.lowest_tier_hypernode(n), sj)
        return out

    def _lca_score(self, topo: Topology, hn: str, allocated: str) -> float:
        """The lower the common ancestor of the node's hypernode and the job's, the higher."""
        if not hn or not allocated:
            return ZERO_SCORE
        if hn == allocated:
            return FULL_SCORE
        lca = topo.hypernodes.get(topo.lca(hn, allocated))
        if lca is None:
            return ZERO_SCORE
        if self.min_tier == self.max_tier:
            return FULL_SCORE
        if self.min_tier <= lca.tier <= self.max_tier:
            return (self.max_tier - lca.tier) / (self.max_tier - self.min_tier)
        return ZERO_SCORE


def search_root(topo: Topology, available: HyperNodeInfo, highest_tier: int, allocated: str) -> HyperNodeInfo | None:
    """Where a search may start: the offered hypernode, narrowed to the subtree a partly placed job
    may still use (the highest ancestor of its allocated hypernode within its tier limit); None when
    the two do not overlap."""
    if not allocated:
        return available
    highest = ""
    for a in topo.ancestors(allocated):
        hn = topo.hypernodes.get(a)
        if hn is None:
            return None
        if hn.tier > highest_tier:
            break
        highest = a
    if not highest:
        return None
    lca = topo.lca(available.name, highest)
    if lca == highest:
        return available
    if lca == available.name:
        return topo.hypernodes.get(highest)
    return None
