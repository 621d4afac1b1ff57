"""throughput: how many single-task jobs one cycle places on a large, empty cluster.

5,000 nodes of 32 cpu / 256Gi / 110 pods; 10,000 pending jobs of one task
(1 cpu / 4Gi) in one queue; the default configuration (enqueue, allocate,
backfill with priority, gang, conformance | overcommit, drf, predicates,
proportion, nodeorder, binpack).  One cycle from snapshot to close;
``tasks_per_second`` is binds over that cycle's wall time, and ``phases_ms``
gives the snapshot, session open, each action and close.  ``kernel_tasks_per_second``
is what the bare array loop takes for the same placements, ``kernel_ratio`` ours over it
(`busched.bench.limit`).
"""

from __future__ import annotations

from typing import Any

from busched.bench import cluster as cl
from busched.bench.driver import bench_config, timed_cycle
from busched.bench.limit import kernel_figures
from busched.framework.config import DEFAULT_CONFIG

DEFAULTS = {"nodes": 5000, "jobs": 10000, "seed": 0}


def run(nodes: int, jobs: int, seed: int = 0, config: str = DEFAULT_CONFIG, **_kw: Any) -> dict[str, Any]:
    specs = []
    task_specs = []
    for j in range(jobs):
        job, ts = cl.gang_job(f"job{j:06d}", 1)
        specs.append(job)
        task_specs.extend(ts)
    cache = cl.new_cache(cl.nodes(nodes), arriving=(specs, task_specs))
    cfg, missing_p, missing_a = bench_config(config)
    ssn, timing = timed_cycle(cache, cfg, seed=seed)
    total = timing.total
    return {
        "workload": "throughput",
        "nodes": nodes,
        "jobs": jobs,
        "tasks": jobs,
        "placed": timing.binds,
        "cycle_ms": round(total * 1000, 3),
        "cycle_cpu_ms": round(timing.cpu * 1000, 3),
        "tasks_per_second": round(timing.binds / total, 1) if total > 0 else 0.0,
        "phases_ms": timing.ms(),
        **kernel_figures(ssn, total),
        "missing_plugins": missing_p,
        "missing_actions": missing_a,
    }
