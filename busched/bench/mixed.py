"""mixed: the same 10,000 tasks cut into jobs of different sizes.

On 5,000 nodes (32 cpu / 256Gi / 110 pods), four separate runs of 10,000
pending tasks (1 cpu / 4Gi): 10,000 jobs of 1, 500 of 20, 20 of 500 and one
of 10,000, each job a gang (minMember = its size).  Default configuration,
one cycle each.  ``tasks_per_second`` is all binds over all four cycles' wall
time; ``shapes`` gives each run's own figures; ``kernel_*`` the bare
array loop's for the same placements (`busched.bench.limit`).  The 20 x 500 run is the shape
users report multi-second stalls for in Volcano.
"""

from __future__ import annotations

from typing import Any

from busched.bench import cluster as cl
from busched.bench.driver import bench_config, timed_cycle
from busched.bench.limit import kernel_figures
from busched.framework.config import DEFAULT_CONFIG

DEFAULTS = {"nodes": 5000, "tasks": 10000, "seed": 0}


def shapes(tasks: int) -> list[tuple[int, int]]:
    """(jobs, tasks per job) for the four runs, scaled to ``tasks`` in all."""
    out: list[tuple[int, int]] = []
    for per_job in (1, 20, 500, tasks):
        per_job = max(1, min(per_job, tasks))
        shape = (max(1, tasks // per_job), per_job)
        if shape not in out:  # at small scales the big shapes coincide
            out.append(shape)
    return out


def run(nodes: int, tasks: int, seed: int = 0, config: str = DEFAULT_CONFIG, **_kw: Any) -> dict[str, Any]:
    cfg, missing_p, missing_a = bench_config(config)
    node_specs = cl.nodes(nodes)
    per_shape = {}
    binds = 0
    total = 0.0
    kernel_s = 0.0
    for jobs, size in shapes(tasks):
        job_specs, task_specs = [], []
        for j in range(jobs):
            job, ts = cl.gang_job(f"job{j:05d}", size)
            job_specs.append(job)
            task_specs.extend(ts)
        cache = cl.new_cache(node_specs, arriving=(job_specs, task_specs))
        ssn, timing = timed_cycle(cache, cfg, seed=seed)
        kernel = kernel_figures(ssn, timing.total)
        kernel_s += kernel["kernel_ms"] / 1000
        binds += timing.binds
        total += timing.total
        per_shape[f"{jobs}x{size}"] = {
            "placed": timing.binds,
            "cycle_ms": round(timing.total * 1000, 3),
            "cycle_cpu_ms": round(timing.cpu * 1000, 3),
            "tasks_per_second": round(timing.binds / timing.total, 1) if timing.total > 0 else 0.0,
            "phases_ms": timing.ms(),
            **kernel,
        }
    return {
        "workload": "mixed",
        "nodes": nodes,
        "tasks": tasks,
        "placed": binds,
        "tasks_per_second": round(binds / total, 1) if total > 0 else 0.0,
        "kernel_tasks_per_second": round(binds / kernel_s, 1) if kernel_s > 0 else 0.0,
        "kernel_ratio": round(kernel_s / total, 3) if total > 0 else 0.0,
        "shapes": per_shape,
        "missing_plugins": missing_p,
        "missing_actions": missing_a,
    }
