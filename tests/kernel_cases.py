"""Random clusters for the kernel-vs-reference tests: varied nodes, tasks and jobs as spec objects."""

from __future__ import annotations

import random
from typing import Any

from busched.api import objects as o
from busched.cache.cache import Cache
from busched.fastpath import FastPathSettings

GPU = "nvidia.com/gpu"


def random_cluster(rng: random.Random, *, nodes: int | None = None, jobs: int | None = None,
                   fancy: bool = True) -> o.ClusterSpec:
    """Nodes of a few shapes (some GPU, labelled, tainted, cordoned), running tasks on some of them,
    and pending gang jobs of several shapes (roles, selectors, tolerations, priorities)."""
    n_nodes = nodes if nodes is not None else rng.choice([3, 8, 40, 150, 260])
    node_specs = []
    for i in range(n_nodes):
        alloc: dict[str, Any] = {"cpu": rng.choice(["4", "8", "16", "32"]),
                                 "memory": rng.choice(["8Gi", "32Gi", "64Gi"]),
                                 "pods": rng.choice([4, 20, 110])}
        if rng.random() < 0.25:
            alloc[GPU] = rng.choice([1, 2, 4, 8])
        labels = {"zone": rng.choice(["a", "b", "c"])} if rng.random() < 0.7 else {}
        taints = []
        if fancy and rng.random() < 0.1:
            taints.append({"key": "dedicated", "value": "x", "effect": rng.choice(["NoSchedule", "PreferNoSchedule"])})
        images = {"busybox:latest": 5 * 2**20, "train:v1": 900 * 2**20} if fancy and rng.random() < 0.2 else {}
        node_specs.append(o.NodeSpec(name=f"node-{i:03d}", allocatable=alloc, labels=labels, taints=taints,
                                     unschedulable=fancy and rng.random() < 0.05, images=images))
    tasks: list[o.TaskSpec] = []
    job_specs: list[o.JobSpec] = []
    pcs = [o.PriorityClassSpec(name="high", value=1000), o.PriorityClassSpec(name="low", value=10)]
    # running work on some nodes
    for k in range(rng.randint(0, n_nodes)):
        node = rng.choice(node_specs).name
        name = f"run{k}"
        phase = rng.choice(["Running", "Running", "Running", "Pending"])
        job_specs.append(o.JobSpec(name=name, namespace="ns", queue="q1", min_member=1, phase="Running"))
        tasks.append(o.TaskSpec(name=f"{name}-0", namespace="ns", job=name, node=node, phase=phase,
                                deleting=rng.random() < 0.1,
                                requests={"cpu": rng.choice(["500m", "1", "2"]), "memory": rng.choice(["1Gi", "2Gi"])}))
    n_jobs = jobs if jobs is not None else rng.randint(1, 30)
    for j in range(n_jobs):
        size = rng.choice([1, 1, 2, 3, 5, 8])
        name = f"job{j}"
        req: dict[str, Any] = {"cpu": rng.choice(["100m", "500m", "1", "2", "3"]),
                               "memory": rng.choice(["128Mi", "1Gi", "4Gi"])}
        if rng.random() < 0.15:
            req[GPU] = rng.choice([1, 2, "500m"])
        if rng.random() < 0.05:
            req = {}
        annotations = {"volcano.sh/task-spec": rng.choice(["worker", "ps"])} if rng.random() < 0.5 else {}
        selector = {"zone": rng.choice(["a", "b"])} if fancy and rng.random() < 0.15 else {}
        tolerations = [{"key": "dedicated", "operator": "Exists"}] if fancy and rng.random() < 0.15 else []
        images = [rng.choice(["busybox:latest", "train:v1"])] if fancy and rng.random() < 0.2 else []
        pc = rng.choice(["", "", "high", "low"])
        job_specs.append(o.JobSpec(name=name, namespace="ns", queue=rng.choice(["q1", "q2"]),
                                   min_member=rng.randint(1, size), priority_class_name=pc,
                                   phase=rng.choice(["Pending", "Inqueue"])))
        for t in range(size):
            tasks.append(o.TaskSpec(name=f"{name}-{t}", namespace="ns", job=name, requests=dict(req),
                                    annotations=dict(annotations), node_selector=dict(selector),
                                    tolerations=list(tolerations), images=list(images), priority_class_name=pc))
    return o.ClusterSpec(nodes=node_specs, tasks=tasks, jobs=job_specs,
                         queues=[o.QueueSpec(name="q1", weight=2), o.QueueSpec(name="q2")], priority_classes=pcs)


def cache_of(spec: o.ClusterSpec, fast: FastPathSettings | None = None) -> Cache:
    c = Cache(fast)
    c.load(spec)
    return c


def passes(fn: Any, task: Any, nodes: list[Any]) -> list[bool]:
    """The plain per-node predicate ``fn``'s answer for ``task`` on each node: True where it raises no
    FitError (what a predicate twin's mask must equal)."""
    from busched.api.fit import FitError

    out = []
    for n in nodes:
        try:
            fn(task, n)
            out.append(True)
        except FitError:
            out.append(False)
    return out
