"""The scheduler's in-memory view of the cluster.

Objects enter as upserts and deletes (from a scenario file, `busched apply`, or
the bus); each kind keeps its objects in arrival order, which is the base scan
order (nodes in particular).  `snapshot` builds a private, freely mutable
`ClusterSnapshot` for one session: ready nodes with their tasks accounted,
jobs that have a podgroup and whose queue exists, priorities resolved.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from busched import fastpath
from busched.api import build, members
from busched.api import objects as o
from busched.api.disruption import PdbError, parse_pdb
from busched.api.job import JobInfo
from busched.api.node import NodeInfo
from busched.api.queue import HyperNode, PriorityClass
from busched.api.snapshot import ClusterSnapshot, Shard
from busched.api.task import TaskInfo, completed_status
from busched.cache.inserts import Inserts
from busched.fastpath import unfit
from busched.fastpath.lending import SharedMemo

__all__ = ["Cache", "KINDS"]

# each kind the cache keeps, by the type it keeps an object as (a disruption budget: its plain dict)
KINDS: dict[str, type[msgspec.Struct] | type[dict[str, Any]]] = {
    "node": o.NodeSpec,
    "task": o.TaskSpec,
    "job": o.JobSpec,
    "queue": o.QueueSpec,
    "priorityClass": o.PriorityClassSpec,
    "hyperNode": o.HyperNodeSpec,
    "resourceQuota": o.ResourceQuotaSpec,
    "nodeShard": o.NodeShardSpec,
    "podDisruptionBudget": dict,
}


def object_key(kind: str, spec: Any) -> str:
    if isinstance(spec, dict):
        return f"{spec.get('namespace', 'default')}/{spec.get('name', '')}"
    ns = getattr(spec, "namespace", None)
    return f"{ns}/{spec.name}" if ns is not None else spec.name


class Changes:
    """Which jobs and nodes changed since the shared snapshot last took this record (their keys,
    in order of change), and whether any job or node came or went (which moves others)."""

    __slots__ = ("jobs", "nodes", "jobs_removed", "nodes_moved")

    def __init__(self) -> None:
        self.jobs: dict[str, None] = {}
        self.nodes: dict[str, None] = {}
        self.jobs_removed = False
        self.nodes_moved = False  # a node added, removed, or its readiness changed

    def job(self, key: str, old: Any, new: Any) -> None:
        self.jobs[key] = None
        if new is None:
            self.jobs_removed = True

    def node(self, key: str, old: Any, new: Any) -> None:
        self.nodes[key] = None
        if old is None or new is None or old.ready != new.ready:
            self.nodes_moved = True


class Cache(Inserts):
    """The objects by kind, what the shared snapshot needs to know of their changes, and `snapshot`;
    a restart's bulk inserts are `Inserts` (busched.cache.inserts)."""

    def __init__(self, fast: fastpath.FastPathSettings | None = None) -> None:
        # the fast path's settings: lending (kernels on), verification; handed to every snapshot
        self.fast = fast if fast is not None else fastpath.default_settings()
        self.objects: dict[str, dict[str, Any]] = {k: {} for k in KINDS}
        self.shard = Shard()  # what a snapshot says this scheduler owns, unless `own_shard` names a NodeShard
        # (name, mode) of the NodeShard this scheduler runs as (`busched run --shard`): the snapshot's shard is
        # that object's nodes, worked out again when it or a node changes
        self.own_shard: tuple[str, str] | None = None
        self._shard_memo: tuple[Any, int, Shard] | None = None
        self._shard_selectors: dict[str, tuple[Any, Any]] = {}  # each NodeShard's selector parsed when it arrives
        # each hypernode's members checked and compiled when it arrives, and its node members resolved
        # against the nodes as they were at a count of node changes (names, labels): a node that comes
        # later and matches a member's pattern or labels joins without the hypernode being applied again
        self._hypernode_members: dict[str, tuple[Any, members.Members]] = {}
        self._hypernode_nodes: dict[str, tuple[Any, int, list[str]]] = {}
        self._nodes_changed = 0
        self.generation = 0
        # State some plugins keep from one cycle to the next (tdm's last eviction, rescheduling's
        # last run): one dict per scheduler, handed to every snapshot.
        self.plugin_state: dict[str, Any] = {}
        self._memo = SharedMemo()
        # what the shared snapshot (busched.fastpath.lending) needs to know what changed: each task's
        # arrival order (the base scan order), each job's and node's tasks, and a version per job
        # and node bumped whenever it or one of its tasks changes
        self.task_seq: dict[str, int] = {}
        self._next_seq = 0
        self.job_tasks: dict[str, set[str]] = {}
        self.node_tasks: dict[str, set[str]] = {}
        self.job_version: dict[str, int] = {}
        self.node_version: dict[str, int] = {}
        # what changed since the last shared snapshot took it (busched.fastpath.lending)
        self.changes = Changes()
        # jobs that did not fit, kept across cycles (busched.fastpath.unfit)
        self.unfit = unfit.UnfitMemo()
        self.capacity_epoch = 0

    # -- events ------------------------------------------------------------------------
    def upsert(self, kind: str, spec: Any, key: str | None = None) -> None:
        """``key``: the object's key when the caller has it (`object_key` of the spec)."""
        if kind not in KINDS:
            raise build.SpecError(f"unknown object kind {kind!r}")
        if key is None:
            key = object_key(kind, spec)
        self._validate(kind, spec, key)
        self._changed(kind, key, self.objects[kind].get(key), spec)
        self.objects[kind][key] = spec
        self.generation += 1

    def delete(self, kind: str, key: str) -> bool:
        old = self.objects[kind].pop(key, None)
        if old is not None:
            self._changed(kind, key, old, None)
            self._memo.forget(kind, key)
            if kind == "hyperNode":
                self._hypernode_members.pop(key, None)
                self._hypernode_nodes.pop(key, None)
            elif kind == "nodeShard":
                self._shard_selectors.pop(key, None)
            self.generation += 1
        return old is not None

    def room_made(self) -> None:
        """Something outside the objects made room (e.g. a node a task was kept off is offered again): jobs
        remembered as unfit are tried again, and the next cycle is due."""
        self.capacity_epoch += 1
        self.generation += 1

    def _changed(self, kind: str, key: str, old: Any, new: Any) -> None:
        """Keep what the unfit-job memo needs: the capacity epoch and each job's last change."""
        if unfit.frees_capacity(kind, old, new):
            self.capacity_epoch += 1
        version = self.generation + 1
        if kind == "task":
            self._index_task(key, old, new, version)
        elif kind == "job":
            self.job_version[key] = version
            self.changes.job(key, old, new)
            if new is None:
                self.unfit.job_versions.pop(key, None)
                self.unfit.forget(key)
            else:
                self.unfit.job_versions[key] = version
        elif kind == "node":
            self.node_version[key] = version
            self.changes.node(key, old, new)
            if old is None or new is None or old.labels != new.labels:
                self._nodes_changed += 1

    def take_changes(self) -> Changes:
        """What changed since the last call (the shared snapshot's record), and a fresh record."""
        changes, self.changes = self.changes, Changes()
        # versions of jobs and nodes that are gone with all their tasks: nothing will ask again
        for key in changes.jobs:
            if key not in self.objects["job"] and key not in self.job_tasks:
                self.job_version.pop(key, None)
        for key in changes.nodes:
            if key not in self.objects["node"] and key not in self.node_tasks:
                self.node_version.pop(key, None)
        return changes

    def _index_task(self, key: str, old: Any, new: Any, version: int) -> None:
        """Keep the task indexes and the versions of the jobs and nodes the task leaves and joins
        (the side it leaves first; written out per side: a catch-up runs this for every task), and
        the unfit memo's version of the job it is in (or was, when deleted)."""
        job_version, node_version = self.job_version, self.node_version
        changed_jobs, changed_nodes = self.changes.jobs, self.changes.nodes
        if old is None:
            self.task_seq[key] = self._next_seq
            self._next_seq += 1
        else:
            if old.job:
                job = f"{old.namespace}/{old.job}"
                job_version[job] = version
                changed_jobs[job] = None
                self._unindex(self.job_tasks, job, key)
            if old.node:
                node_version[old.node] = version
                changed_nodes[old.node] = None
                self._unindex(self.node_tasks, old.node, key)
        if new is None:
            del self.task_seq[key]
            if old.job:
                self.unfit.job_versions[job] = version
            return
        if new.job:
            job = f"{new.namespace}/{new.job}"
            self.unfit.job_versions[job] = version
            job_version[job] = version
            changed_jobs[job] = None
            keys = self.job_tasks.get(job)
            if keys is None:
                self.job_tasks[job] = {key}
            else:
                keys.add(key)
        if new.node:
            node = new.node
            node_version[node] = version
            changed_nodes[node] = None
            keys = self.node_tasks.get(node)
            if keys is None:
                self.node_tasks[node] = {key}
            else:
                keys.add(key)

    @staticmethod
    def _unindex(index: dict[str, set[str]], name: str, key: str) -> None:
        keys = index.get(name)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del index[name]

    def _validate(self, kind: str, spec: Any, key: str) -> None:
        """Reject an object the snapshot could not convert, before it enters the cache."""
        if kind == "node":
            node = build.node_info(spec)
            if spec.ready:  # (a node not ready is not lent: its conversion would wait unused)
                self._memo.remember_node(key, spec, node)
        elif kind == "task":
            self._memo.remember_task(key, spec, build.task_info(spec, {}))
        elif kind == "job":
            self._memo.remember_job(key, spec, build.job_info(spec, {}))
        elif kind == "queue":
            build.queue_info(spec)
        elif kind == "priorityClass":
            build.priority_class(spec)
        elif kind == "hyperNode":
            self._hypernode_members[key] = (spec, build.hyper_node_members(spec))
        elif kind == "resourceQuota":
            build.resources(spec.hard, f"resourceQuota {spec.namespace}/{spec.name}: hard")
        elif kind == "nodeShard":
            self._shard_selectors[key] = (spec, build.node_shard(spec))
        elif kind == "podDisruptionBudget":
            try:
                parse_pdb(spec)
            except (PdbError, ValueError, TypeError) as e:
                raise build.SpecError(f"podDisruptionBudget {key}: {e}") from None

    def load(self, cluster: o.ClusterSpec) -> None:
        """Apply a whole cluster block, in Volcano's event order: nodes, tasks, jobs, queues, classes."""
        for n in cluster.nodes:
            self.upsert("node", n)
        for t in cluster.tasks:
            self.upsert("task", t)
        for j in cluster.jobs:
            self.upsert("job", j)
        for q in cluster.queues:
            self.upsert("queue", q)
        for pc in cluster.priority_classes:
            self.upsert("priorityClass", pc)
        for h in cluster.hyper_nodes:
            self.upsert("hyperNode", h)
        for rq in cluster.resource_quotas:
            self.upsert("resourceQuota", rq)
        for ns in cluster.node_shards:
            self.upsert("nodeShard", ns)
        for pdb in cluster.pod_disruption_budgets:  # kept as the dict its wire form is (busched.api.disruption)
            self.upsert("podDisruptionBudget", msgspec.to_builtins(pdb))

    # -- snapshot ------------------------------------------------------------------------
    def _nodes_and_tasks(self, pcs: dict[str, PriorityClass]) -> tuple[list[NodeInfo], list[TaskInfo]]:
        """Every ready node (indexed) and task converted afresh, each placed task accounted on its node."""
        out: list[NodeInfo] = []
        for i, spec in enumerate(self.objects["node"].values()):
            node = build.node_info(spec, i)
            if node.ready:
                out.append(node)
        for i, n in enumerate(out):
            n.index = i
        nodes = {n.name: n for n in out}
        tasks = []
        for spec in self.objects["task"].values():
            t = build.task_info(spec, pcs)
            # a finished task no longer holds its node (Volcano's cache skips terminated tasks)
            if t.node_name and t.node_name in nodes and not completed_status(t.status):
                nodes[t.node_name].add_task(t)
            tasks.append(t)
        return out, tasks

    def _plain(self, pcs: dict[str, PriorityClass], default_job_priority: int
               ) -> tuple[list[NodeInfo], dict[str, JobInfo]]:
        """Every object converted afresh: the reference the shared snapshot is tested against."""
        nodes, tasks = self._nodes_and_tasks(pcs)
        jobs: dict[str, JobInfo] = {}
        for spec in self.objects["job"].values():
            j = build.job_info(spec, pcs, default_job_priority)
            jobs[j.uid] = j
        for t in tasks:
            job = jobs.get(t.job)
            if job is None and t.job:
                job = jobs[t.job] = JobInfo(uid=t.job, name=t.job.split("/", 1)[1], namespace=t.namespace,
                                            has_podgroup=False)
            if job is not None:
                job.add_task(t)
        for j in jobs.values():
            j.written = False
        for n in nodes:
            n.written = False
        return nodes, jobs

    def current_shard(self) -> Shard:
        """The nodes this scheduler owns: with `own_shard` set, the members of that NodeShard among the nodes
        (none while it is not applied: as Volcano's scheduler, which then owns no node); else `shard`."""
        if self.own_shard is None:
            return self.shard
        name, mode = self.own_shard
        spec = self.objects["nodeShard"].get(name)
        memo = self._shard_memo
        if memo is not None and memo[0] is spec and memo[1] == self._nodes_changed:
            return memo[2]
        nodes: frozenset[str] = frozenset()
        if spec is not None:
            held = self._shard_selectors.get(name)
            sel = held[1] if held is not None and held[0] is spec else build.node_shard(spec)
            nodes = build.shard_members(spec, self.objects["node"].values(), sel)
        shard = Shard(mode=mode, name=name, nodes=nodes)
        self._shard_memo = (spec, self._nodes_changed, shard)
        return shard

    def _hypernode(self, key: str, spec: o.HyperNodeSpec) -> HyperNode:
        """The hypernode with its node members resolved against the cache's nodes (worked out again only
        when it or a node's name or labels changed); a fresh object each time: snapshots are private."""
        held = self._hypernode_members.get(key)
        compiled = held[1] if held is not None and held[0] is spec else build.hyper_node_members(spec)
        found: Sequence[str] = compiled.nodes  # no pattern or labels: the nodes named exactly
        if members.selects_by_node(compiled):
            memo = self._hypernode_nodes.get(key)
            if memo is None or memo[0] is not spec or memo[1] != self._nodes_changed:
                resolved = members.resolve(spec, compiled, self.objects["node"].values()).node_members
                memo = self._hypernode_nodes[key] = (spec, self._nodes_changed, resolved)
            found = memo[2]
        return HyperNode(spec.name, spec.tier, spec.tier_name, list(compiled.plain),
                         hypernode_members=list(compiled.hypernodes), node_members=list(found))

    def snapshot(self, memo: bool | None = None) -> ClusterSnapshot:
        """A private copy of the cluster for one session.  ``memo`` False converts every object
        again (the reference the shared conversion is tested against)."""
        pcs: dict[str, PriorityClass] = {
            k: build.priority_class(v) for k, v in self.objects["priorityClass"].items()}
        default_job_priority = 0
        for pc in pcs.values():
            if pc.global_default:
                default_job_priority = pc.value
        snap = ClusterSnapshot(priority_classes=pcs, shard=self.current_shard())
        if memo is None:
            memo = self.fast.kernels
        if memo and self._memo.busy():
            memo = False  # a session over the lent objects is running: convert apart, lend nothing
        for spec in self.objects["queue"].values():
            q = build.queue_info(spec)
            snap.queues[q.uid] = q
        if memo:
            # jobs and nodes lent, assembled once per version (busched.fastpath.lending)
            snap.nodes, snap.jobs, snap.unsettled, snap.lease = self._memo.lend(
                self, pcs, default_job_priority, frozenset(snap.queues), verify=self.fast.verify)
        else:
            snap.nodes, jobs = self._plain(pcs, default_job_priority)
            for uid, j in jobs.items():
                if j.has_podgroup and j.queue in snap.queues:
                    snap.jobs[uid] = j
        for key, spec in self.objects["hyperNode"].items():
            h = self._hypernode(key, spec)
            snap.hypernodes[h.name] = h
        snap.resource_quotas = [msgspec.to_builtins(v) for v in self.objects["resourceQuota"].values()]
        snap.others["podDisruptionBudgets"] = [dict(v) for v in self.objects["podDisruptionBudget"].values()]
        snap.others["plugin_state"] = self.plugin_state
        snap.others[fastpath.SETTINGS_KEY] = self.fast
        self.unfit.epoch = self.capacity_epoch
        snap.others[unfit.MEMO_KEY] = self.unfit
        return snap
