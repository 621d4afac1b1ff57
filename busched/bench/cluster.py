"""Synthetic clusters for the benchmarks: nodes, jobs and tasks as spec objects in a `Cache`.

Every workload builds its cluster here so the shapes stay comparable: nodes are
``n00000 ...`` with cpu/memory/pods, jobs are podgroups in queue ``default``
with their tasks named ``<job>-<i>`` (the pod-index form Volcano's task order
reads).  Builders only create objects; nothing here is timed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from busched.api import objects as o
from busched.cache.cache import Cache

__all__ = ["NodeShape", "TaskShape", "nodes", "gang_job", "running_jobs", "new_cache", "QUEUE", "NAMESPACE"]

QUEUE = "default"
NAMESPACE = "bench"


@dataclass(frozen=True)
class NodeShape:
    cpu: str = "32"
    memory: str = "256Gi"
    pods: int = 110
    gpu: int = 0

    def allocatable(self) -> dict[str, str | int]:
        out: dict[str, str | int] = {"cpu": self.cpu, "memory": self.memory, "pods": self.pods}
        if self.gpu:
            out["nvidia.com/gpu"] = self.gpu
        return out


@dataclass(frozen=True)
class TaskShape:
    cpu: str = "1"
    memory: str = "4Gi"
    gpu: str | None = None

    def requests(self) -> dict[str, str]:
        out = {"cpu": self.cpu, "memory": self.memory}
        if self.gpu:
            out["nvidia.com/gpu"] = self.gpu
        return out


def nodes(n: int, shape: NodeShape = NodeShape(), prefix: str = "n") -> list[o.NodeSpec]:
    alloc = shape.allocatable()
    width = max(5, len(str(n)))
    return [o.NodeSpec(name=f"{prefix}{i:0{width}d}", allocatable=dict(alloc)) for i in range(n)]


def gang_job(name: str, size: int, shape: TaskShape = TaskShape(), *, min_member: int | None = None,
             priority_class: str = "", phase: str = "Pending",
             placed_on: Iterable[str] | None = None) -> tuple[o.JobSpec, list[o.TaskSpec]]:
    """One podgroup of ``size`` identical tasks; ``placed_on`` puts them Running on those nodes."""
    job = o.JobSpec(name=name, namespace=NAMESPACE, queue=QUEUE,
                    min_member=size if min_member is None else min_member,
                    priority_class_name=priority_class, phase=phase)
    req = shape.requests()
    where = list(placed_on) if placed_on is not None else None
    tasks = []
    for i in range(size):
        node = where[i] if where is not None else ""
        tasks.append(o.TaskSpec(name=f"{name}-{i}", namespace=NAMESPACE, job=name, requests=dict(req),
                                node=node, phase="Running" if node else "Pending",
                                priority_class_name=priority_class))
    return job, tasks


def running_jobs(node_names: list[str], per_node: int, job_size: int, shape: TaskShape = TaskShape(), *,
                 prefix: str = "run", priority_class: str = "",
                 min_member: int | None = None) -> tuple[list[o.JobSpec], list[o.TaskSpec]]:
    """``per_node`` running tasks on every node, grouped into jobs of ``job_size`` (the last may be short).

    Tasks of one job land on consecutive nodes (round-robin over the node list), as a spread
    deployment would.
    """
    total = len(node_names) * per_node
    jobs: list[o.JobSpec] = []
    tasks: list[o.TaskSpec] = []
    width = max(6, len(str(total // max(job_size, 1) + 1)))
    k = 0
    j = 0
    while k < total:
        size = min(job_size, total - k)
        where = [node_names[(k + i) % len(node_names)] for i in range(size)]
        job, ts = gang_job(f"{prefix}{j:0{width}d}", size, shape, phase="Running", placed_on=where,
                           priority_class=priority_class, min_member=min_member)
        jobs.append(job)
        tasks.extend(ts)
        k += size
        j += 1
    return jobs, tasks


def new_cache(node_specs: list[o.NodeSpec], jobs: Iterable[o.JobSpec] = (), tasks: Iterable[o.TaskSpec] = (),
              priority_classes: Iterable[o.PriorityClassSpec] = (), *, arriving: tuple[list[o.JobSpec],
              list[o.TaskSpec]] | None = None) -> Cache:
    """A cache holding one open queue and the given objects, loaded in Volcano's event order.

    ``arriving`` jobs and tasks come after one snapshot of the rest was taken, as new work reaches
    a running scheduler that already knows its nodes (and their running tasks).
    """
    cache = Cache()
    cache.load(o.ClusterSpec(nodes=node_specs, tasks=list(tasks), jobs=list(jobs),
                             queues=[o.QueueSpec(name=QUEUE)], priority_classes=list(priority_classes)))
    if arriving is not None:
        cache.snapshot().release()
        cache.load(o.ClusterSpec(tasks=arriving[1], jobs=arriving[0]))
    return cache
