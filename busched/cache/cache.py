"""The scheduler's in-memory view of the cluster.

Objects enter as upserts and deletes (from a scenario file, `busched apply`, or
the bus); each kind keeps its objects in arrival order, which is the base scan
order (nodes in particular).  `snapshot` builds a private, freely mutable
`ClusterSnapshot` for one session: ready nodes with their tasks accounted,
jobs that have a podgroup and whose queue exists, priorities resolved.
"""

from __future__ import annotations

from typing import Any

import msgspec

from busched.api import objects as o
from busched.api.disruption import PdbError, parse_pdb
from busched.api.job import JobInfo
from busched.api.queue import PriorityClass
from busched import kernels
from busched.api.node import NodeInfo
from busched.api.task import TaskInfo, completed_status
from busched.cache import build
from busched.kernels import unfit
from busched.kernels.snapshot import SnapshotMemo
from busched.framework.snapshot import ClusterSnapshot, Shard

__all__ = ["Cache", "KINDS"]

KINDS: dict[str, type[msgspec.Struct]] = {
    "node": o.NodeSpec,
    "task": o.TaskSpec,
    "job": o.JobSpec,
    "queue": o.QueueSpec,
    "priorityClass": o.PriorityClassSpec,
    "hyperNode": o.HyperNodeSpec,
    "resourceQuota": o.ResourceQuotaSpec,
    "podDisruptionBudget": dict,
}


def object_key(kind: str, spec: Any) -> str:
    if isinstance(spec, dict):
        return f"{spec.get('namespace', 'default')}/{spec.get('name', '')}"
    ns = getattr(spec, "namespace", None)
    return f"{ns}/{spec.name}" if ns is not None else spec.name


class Cache:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {k: {} for k in KINDS}
        self.shard = Shard()
        self.generation = 0
        # State some plugins keep from one cycle to the next (tdm's last eviction, rescheduling's
        # last run): one dict per scheduler, handed to every snapshot.
        self.plugin_state: dict[str, Any] = {}
        self._memo = SnapshotMemo()
        # jobs that did not fit, kept across cycles (busched.kernels.unfit)
        self.unfit = unfit.UnfitMemo()
        self.capacity_epoch = 0

    # -- events ------------------------------------------------------------------------
    def upsert(self, kind: str, spec: Any) -> None:
        if kind not in KINDS:
            raise build.SpecError(f"unknown object kind {kind!r}")
        self._validate(kind, spec)
        key = object_key(kind, spec)
        self._changed(kind, key, self.objects[kind].get(key), spec)
        self.objects[kind][key] = spec
        self.generation += 1

    def delete(self, kind: str, key: str) -> bool:
        old = self.objects[kind].pop(key, None)
        if old is not None:
            self._changed(kind, key, old, None)
            self.generation += 1
        return old is not None

    def _changed(self, kind: str, key: str, old: Any, new: Any) -> None:
        """Keep what the unfit-job memo needs: the capacity epoch and each job's last change."""
        if unfit.frees_capacity(kind, old, new):
            self.capacity_epoch += 1
        if kind == "task":
            spec = new if new is not None else old
            if spec.job:
                self.unfit.job_versions[f"{spec.namespace}/{spec.job}"] = self.generation + 1
        elif kind == "job":
            if new is None:
                self.unfit.job_versions.pop(key, None)
                self.unfit.forget(key)
            else:
                self.unfit.job_versions[key] = self.generation + 1

    def _validate(self, kind: str, spec: Any) -> None:
        """Reject an object the snapshot could not convert, before it enters the cache."""
        if kind == "node":
            build.node_info(spec)
        elif kind == "task":
            self._memo.remember_task(object_key(kind, spec), spec, build.task_info(spec, {}))
        elif kind == "job":
            self._memo.remember_job(object_key(kind, spec), spec, build.job_info(spec, {}))
        elif kind == "queue":
            build.queue_info(spec)
        elif kind == "priorityClass":
            build.priority_class(spec)
        elif kind == "hyperNode":
            build.hyper_node(spec)
        elif kind == "resourceQuota":
            build.resources(spec.hard, f"resourceQuota {spec.namespace}/{spec.name}: hard")
        elif kind == "podDisruptionBudget":
            try:
                parse_pdb(spec)
            except (PdbError, ValueError, TypeError) as e:
                raise build.SpecError(f"podDisruptionBudget {object_key(kind, spec)}: {e}") from None

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
        for pdb in cluster.pod_disruption_budgets:
            self.upsert("podDisruptionBudget", pdb)

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

    def snapshot(self, memo: bool | None = None) -> ClusterSnapshot:
        """A private copy of the cluster for one session.  ``memo`` False converts every object
        again (the reference the shared conversion is tested against)."""
        pcs: dict[str, PriorityClass] = {
            k: build.priority_class(v) for k, v in self.objects["priorityClass"].items()}
        default_job_priority = 0
        for pc in pcs.values():
            if pc.global_default:
                default_job_priority = pc.value
        snap = ClusterSnapshot(priority_classes=pcs, shard=self.shard)
        if memo is None:
            memo = kernels.USE_KERNELS
        if memo:
            # nodes and tasks converted once per spec version (busched.kernels.snapshot)
            snap.nodes, tasks = self._memo.nodes_and_tasks(self.objects, pcs)
        else:
            snap.nodes, tasks = self._nodes_and_tasks(pcs)
        for spec in self.objects["queue"].values():
            q = build.queue_info(spec)
            snap.queues[q.uid] = q
        jobs: dict[str, JobInfo] = {}
        for key, spec in self.objects["job"].items():
            j = (self._memo.job(key, spec, pcs, default_job_priority) if memo
                 else build.job_info(spec, pcs, default_job_priority))
            jobs[j.uid] = j
        if memo:
            self._memo.forget_jobs(self.objects["job"])
        for t in tasks:
            job = jobs.get(t.job)
            if job is None and t.job:
                job = jobs[t.job] = JobInfo(uid=t.job, name=t.job.split("/", 1)[1], namespace=t.namespace,
                                            has_podgroup=False)
            if job is not None:
                job.add_task(t)
        for uid, j in jobs.items():
            if j.has_podgroup and j.queue in snap.queues:
                snap.jobs[uid] = j
        for spec in self.objects["hyperNode"].values():
            h = build.hyper_node(spec)
            snap.hypernodes[h.name] = h
        snap.resource_quotas = [msgspec.to_builtins(v) for v in self.objects["resourceQuota"].values()]
        snap.others["podDisruptionBudgets"] = [dict(v) for v in self.objects["podDisruptionBudget"].values()]
        snap.others["plugin_state"] = self.plugin_state
        self.unfit.epoch = self.capacity_epoch
        snap.others[unfit.MEMO_KEY] = self.unfit
        return snap
