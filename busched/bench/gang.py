"""gang: whole gangs that exactly fill a small cluster, placed in one cycle.

100 nodes of 32 cpu / 256Gi; 10 jobs of 100 tasks (3 cpu / 16Gi each,
minMember 100), so ten tasks fill a node's cpu and the 1,000 tasks fill the
cluster.  Default configuration.  ``placed`` should be all 1,000 and
``cycle_ms`` is the one cycle's wall time; ``kernel_*`` the bare array loop's figures
for the same placements (`busched.bench.limit`).
"""

from __future__ import annotations

from typing import Any

from busched.bench import cluster as cl
from busched.bench.driver import bench_config, timed_cycle
from busched.bench.limit import kernel_figures
from busched.framework.config import DEFAULT_CONFIG

DEFAULTS = {"nodes": 100, "jobs": 10, "tasks": 100, "seed": 0}
SHAPE = cl.TaskShape(cpu="3", memory="16Gi")


def run(nodes: int, jobs: int, tasks: int, seed: int = 0, config: str = DEFAULT_CONFIG, **_kw: Any) -> dict[str, Any]:
    job_specs, task_specs = [], []
    for j in range(jobs):
        job, ts = cl.gang_job(f"gang{j:03d}", tasks, SHAPE)
        job_specs.append(job)
        task_specs.extend(ts)
    cache = cl.new_cache(cl.nodes(nodes), arriving=(job_specs, task_specs))
    cfg, missing_p, missing_a = bench_config(config)
    ssn, timing = timed_cycle(cache, cfg, seed=seed)
    return {
        "workload": "gang",
        "nodes": nodes,
        "jobs": jobs,
        "tasks": jobs * tasks,
        "placed": timing.binds,
        "cycle_ms": round(timing.total * 1000, 3),
        "cycle_cpu_ms": round(timing.cpu * 1000, 3),
        "phases_ms": timing.ms(),
        **kernel_figures(ssn, timing.total),
        "missing_plugins": missing_p,
        "missing_actions": missing_a,
    }
