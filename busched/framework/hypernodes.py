"""The network topology a session schedules over: hypernodes, their tree, and the nodes under each.

A hypernode groups nodes (or lower-tier hypernodes) that are close on the
network; tier 1 (or 0) is closest to the nodes.  When a session opens,
`open_topology` builds from the snapshot's hypernode objects:

- the tree: a member of type HyperNode, or an untyped member named like another
  hypernode, is its child; node members come resolved (`busched.api.members`: a
  pattern or labels matched against the cache's nodes); a hypernode claimed by
  two parents, or a cycle, makes the topology *not ready*, and jobs with a
  network topology then wait, as in Volcano;
- ``real_nodes_list`` / ``real_nodes_set``: every session node under each
  hypernode, in node scan order;
- a virtual ``CLUSTER_TOP`` hypernode one tier above the highest, parent of
  every parentless hypernode and holding every node, so a search can always
  start from one root;
- ``tiers`` (ascending, including the top's) and ``set_by_tier``.

It then rewrites each job's (and sub-job's) network topology the way
Volcano's openSession does: ``highestTierName`` becomes ``highestTierAllowed``
and soft mode becomes hard mode up to the top tier (sub-jobs up to their
job's tier), so allocation only knows hard constraints, ordered from the
lowest tier up.  Finally each job's and sub-job's ``allocated_hypernode`` is
recovered from the nodes its allocated tasks run on.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from busched.api.job import JobInfo
from busched.api.node import NodeInfo
from busched.api.queue import HyperNode
from busched.api.task import TaskInfo, allocated_status

__all__ = ["CLUSTER_TOP", "HyperNodeInfo", "Topology", "build_topology", "open_topology"]

CLUSTER_TOP = "<cluster-top-hypernode>"


@dataclass(eq=False)
class HyperNodeInfo:
    name: str
    tier: int
    tier_name: str = ""
    parent: str = ""
    children: list[str] = field(default_factory=list)  # in declaration order

    def __repr__(self) -> str:
        return f"HyperNode({self.name} tier={self.tier} parent={self.parent!r})"


@dataclass
class Topology:
    hypernodes: dict[str, HyperNodeInfo] = field(default_factory=dict)
    set_by_tier: dict[int, list[str]] = field(default_factory=dict)
    tiers: list[int] = field(default_factory=list)  # ascending, the cluster top's tier last
    real_nodes_list: dict[str, list[NodeInfo]] = field(default_factory=dict)
    real_nodes_set: dict[str, frozenset[str]] = field(default_factory=dict)
    tier_name_map: dict[str, int] = field(default_factory=dict)
    ready: bool = True
    error: str = ""
    node_lowest: dict[str, str] = field(default_factory=dict)  # node -> its hypernode of the lowest tier
    _ancestors: dict[str, list[str]] = field(default_factory=dict, repr=False)  # the tree is fixed per session

    @property
    def top(self) -> HyperNodeInfo:
        return self.hypernodes[CLUSTER_TOP]

    # -- tree queries ----------------------------------------------------------------
    def ancestors(self, name: str) -> list[str]:
        """``name`` itself, then its parent, grandparent ... up to the top."""
        cached = self._ancestors.get(name)
        if cached is not None:
            return cached
        out = [name]
        seen = {name}
        hn = self.hypernodes.get(name)
        while hn is not None and hn.parent and hn.parent not in seen:
            out.append(hn.parent)
            seen.add(hn.parent)
            hn = self.hypernodes.get(hn.parent)
        self._ancestors[name] = out
        return out

    def lca(self, a: str, b: str) -> str:
        """The lowest common ancestor of two hypernodes; either empty means the other."""
        if not a:
            return b
        if not b:
            return a
        mine = set(self.ancestors(a))
        for x in self.ancestors(b):
            if x in mine:
                return x
        return ""

    def lowest_tier_hypernode(self, node: str) -> str:
        """The hypernode of the lowest tier that holds the node, "" when none of that tier does
        (Volcano's FindHyperNodeForNode)."""
        return self.node_lowest.get(node, "")

    def holding(self, node: str) -> str:
        """The lowest-tier real hypernode (not the cluster top) whose nodes include ``node``; ""
        when none does.  Ties between overlapping hypernodes go to the first name."""
        best: HyperNodeInfo | None = None
        for name in sorted(self.real_nodes_set):
            if name == CLUSTER_TOP or node not in self.real_nodes_set[name]:
                continue
            hn = self.hypernodes[name]
            if best is None or hn.tier < best.tier:
                best = hn
        return best.name if best is not None else ""

    def task_num(self, hypernode: str, tasks: Iterable[TaskInfo]) -> int:
        """How many of the tasks sit on a node of the hypernode."""
        nodes = self.real_nodes_set.get(hypernode, frozenset())
        return sum(1 for t in tasks if t.node_name in nodes)


_NAME = operator.attrgetter("name")


def _collect_under(name: str, chain: set[str], under: dict[str, set[str]], direct: dict[str, set[str]],
                   hns: dict[str, HyperNodeInfo], topo: Topology) -> set[str]:
    """Every node under hypernode ``name`` (memoised in ``under``); a cycle leaves ``topo`` not ready.
    (A module function, not a closure naming itself: that would be a reference cycle keeping the
    topology, and through it the session's node maps, for the collector.)"""
    if name in under:
        return under[name]
    if name in chain:
        topo.ready = False
        topo.error = f"cyclic dependency at hypernode {name}"
        return set()
    chain.add(name)
    out = set(direct.get(name, ()))
    for c in hns[name].children:
        out |= _collect_under(c, chain, under, direct, hns, topo)
    chain.discard(name)
    under[name] = out
    return out


def build_topology(specs: Iterable[HyperNode], nodes: list[NodeInfo], memo: dict[str, Any] | None = None,
                   names: list[str] | None = None) -> Topology:
    """The tree, node sets and cluster top for one session.  ``memo`` (the cache's cross-cycle state):
    what depends only on the nodes' names in order (the index, the cluster top's set, the lowest
    tier's map without hypernodes) is kept there while the names are the same.  ``names``: the nodes'
    names in order when the caller has them (reading them off 20,000 nodes costs their memory)."""
    topo = Topology()
    specs = list(specs)
    hns = topo.hypernodes
    for s in specs:
        hns[s.name] = HyperNodeInfo(s.name, s.tier, s.tier_name)
        topo.set_by_tier.setdefault(s.tier, []).append(s.name)
        if s.tier_name:
            topo.tier_name_map[s.tier_name] = s.tier
    direct: dict[str, set[str]] = {}
    for s in specs:
        direct[s.name] = set(s.node_members)
        # an untyped member is a child when a hypernode has its name, else a node; a typed hypernode
        # member is a child or nothing (one not applied yet holds no node)
        for m, typed in [(m, False) for m in s.members] + [(m, True) for m in s.hypernode_members]:
            if m in hns and m != s.name:
                child = hns[m]
                if child.parent and child.parent != s.name:
                    topo.ready = False
                    topo.error = f"hypernode {m} already has a parent {child.parent}, cannot add {s.name}"
                    continue
                child.parent = s.name
                if m not in hns[s.name].children:
                    hns[s.name].children.append(m)
            elif not typed:
                direct[s.name].add(m)
    # every node under each hypernode (a cycle leaves the topology not ready)
    under: dict[str, set[str]] = {}

    for s in specs:
        _collect_under(s.name, set(), under, direct, hns, topo)
    # the virtual cluster top
    top_tier = 1
    for tier in topo.set_by_tier:
        if tier >= top_tier:
            top_tier = tier + 1
    top = HyperNodeInfo(CLUSTER_TOP, top_tier)
    for s in specs:
        if not hns[s.name].parent:
            hns[s.name].parent = CLUSTER_TOP
            top.children.append(s.name)
    hns[CLUSTER_TOP] = top
    topo.set_by_tier[top_tier] = [CLUSTER_TOP]
    topo.tiers = sorted(topo.set_by_tier)
    # keep only session nodes, in scan order
    if names is None:
        names = list(map(_NAME, nodes))
    kept = memo.get("topology.names") if memo is not None else None
    if kept is None or kept[0] != names:
        lowest_of: dict[str, str] = {}
        kept = (names, dict(zip(names, range(len(names)))), frozenset(names), lowest_of)  # (the index in C)
        if memo is not None:
            memo["topology.names"] = kept
    index: dict[str, int] = kept[1]
    for name, members in under.items():
        rows = sorted(index[m] for m in members if m in index)
        topo.real_nodes_list[name] = [nodes[i] for i in rows]
        topo.real_nodes_set[name] = frozenset(nodes[i].name for i in rows)
    for s in specs:
        topo.real_nodes_list.setdefault(s.name, [])
        topo.real_nodes_set.setdefault(s.name, frozenset())
    topo.real_nodes_list[CLUSTER_TOP] = list(nodes)
    topo.real_nodes_set[CLUSTER_TOP] = kept[2]
    if not specs:  # the cluster top alone: every node's lowest (read only, so shared while the names are)
        lowest: dict[str, str] = kept[3]
        if not lowest and names:
            lowest.update(dict.fromkeys(names, CLUSTER_TOP))
        topo.node_lowest = lowest
        return topo
    for hn in topo.set_by_tier[topo.tiers[0]]:
        for node in topo.real_nodes_list[hn]:
            topo.node_lowest.setdefault(node.name, hn)
    return topo


# -- session open ------------------------------------------------------------------------------
def _translate_tier_name(nt: dict[str, Any] | None, names: dict[str, int]) -> None:
    if nt is not None and nt.get("highestTierAllowed") is None and nt.get("highestTierName"):
        tier = names.get(nt["highestTierName"])
        if tier is not None:  # an unknown name leaves the spec without a tier: not hard
            nt["highestTierAllowed"] = tier
            nt["highestTierName"] = ""


def adjust_network_topology(job: JobInfo, topo: Topology) -> None:
    """Tier names to tiers; soft to hard (the job up to the top tier, sub-jobs up to the job's tier)."""
    if not job.contains_network_topology():
        return
    _translate_tier_name(job.network_topology, topo.tier_name_map)
    for sj in job.sub_jobs.values():
        _translate_tier_name(sj.network_topology, topo.tier_name_map)
    if not job.has_podgroup:
        return
    max_tier = topo.top.tier
    nt = job.network_topology
    if nt is not None and nt.get("mode") == "soft":
        nt["mode"] = "hard"
        nt["highestTierAllowed"] = max_tier
        nt["highestTierName"] = ""
    sub_max = max_tier
    if nt is not None and nt.get("highestTierAllowed") is not None:
        sub_max = int(nt["highestTierAllowed"])
    for sj in job.sub_jobs.values():
        sj.convert_to_hard_topology(sub_max)


def _lowest_tier(names: Iterable[str], topo: Topology) -> str:
    best: HyperNodeInfo | None = None
    for n in sorted(names):
        hn = topo.hypernodes.get(n)
        if hn is not None and (best is None or hn.tier < best.tier):
            best = hn
    return best.name if best is not None else ""


def recover_allocated_hypernode(job: JobInfo, topo: Topology) -> None:
    """Forget allocated hypernodes that no longer hold anything, then find them again from the nodes
    the allocated tasks run on: a sub-job's is the lowest-tier hypernode holding all of them, the
    job's the common ancestor of its sub-jobs'."""
    if job.allocated_hypernode and (job.allocated_hypernode not in topo.hypernodes
                                    or job.allocated_task_num() == 0):
        job.allocated_hypernode = ""
    for sj in job.sub_jobs.values():
        if sj.allocated_hypernode and (sj.allocated_hypernode not in topo.hypernodes
                                       or sj.allocated_task_num() == 0):
            sj.allocated_hypernode = ""
    if not job.contains_network_topology():
        return
    updated = False
    for sj in job.sub_jobs.values():
        if not sj.with_network_topology() or sj.allocated_hypernode:
            continue
        found: set[str] | None = None
        for status, ts in sj.status_index.items():
            if not allocated_status(status):
                continue
            for t in ts.values():
                if not t.node_name:
                    continue
                search = topo.real_nodes_set if found is None else found
                found = {hn for hn in search if t.node_name in topo.real_nodes_set.get(hn, ())}
                if not found:
                    break
            if found is not None and not found:
                break
        lowest = _lowest_tier(found or (), topo)
        if sj.allocated_hypernode != lowest:
            sj.allocated_hypernode = lowest
            updated = True
    if not job.allocated_hypernode or updated:
        lca = ""
        for sj in job.sub_jobs.values():
            if not sj.allocated_hypernode:
                continue
            lca = topo.lca(lca, sj.allocated_hypernode)
            if not lca:
                break
        job.allocated_hypernode = lca


def open_topology(ssn: Any) -> Topology:
    """Build the session's topology and bring every job's network topology in line with it."""
    # (the session's node map holds the names in the node list's order, one per node)
    names = list(ssn.nodes) if len(ssn.nodes) == len(ssn.node_list) else None
    topo = build_topology(ssn.hypernodes.values(), ssn.node_list, ssn.others.get("plugin_state"), names)
    # a settled job has neither network topology nor sub-groups (busched.api.job.unsettled), and no
    # allocated hypernode to forget: nothing to adjust or recover
    jobs = ssn.unsettled_jobs if PLAIN_OPEN else _touched(ssn.unsettled_jobs)
    for job in jobs:
        adjust_network_topology(job, topo)
    if topo.ready:
        for job in jobs:
            recover_allocated_hypernode(job, topo)
    return topo


# True: the reference, every unsettled job handed to both passes (tests/framework/test_topology_open.py)
PLAIN_OPEN = False


def _touched(jobs: list[JobInfo]) -> list[JobInfo]:
    """The jobs `adjust_network_topology` or `recover_allocated_hypernode` may change, in order: those
    with a network topology or an allocated hypernode, the job's or a sub-job's.  Both return at once
    for any other job (neither has a topology to adjust; recover has no hypernode to forget, and stops
    where the job contains no network topology), and one job's passes touch no other job: the passes
    over these alone do what the passes over every job do.  10,000 arriving jobs have none."""
    out = []
    for job in jobs:
        if job.network_topology is not None or job.allocated_hypernode:
            out.append(job)
            continue
        for sj in job.sub_jobs.values():
            if sj.network_topology is not None or sj.allocated_hypernode:
                out.append(job)
                break
    return out
