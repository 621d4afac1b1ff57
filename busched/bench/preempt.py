"""preempt: a full cluster, and high-priority work arrives.

5,000 nodes (32 cpu / 256Gi / 110 pods), each full with eight running
low-priority tasks of 4 cpu / 16Gi (jobs of 8, minMember 1, so seven of each
job's tasks are preemptable); then ``jobs`` high-priority jobs of one 4 cpu /
16Gi task arrive in the same queue.  Configuration: enqueue, allocate,
preempt, backfill with priority, gang, conformance | drf, predicates,
proportion, nodeorder, binpack (no overcommit: the jobs ask no minResources).
One cycle: ``evictions`` is what preempt evicted (one victim makes room for
one preemptor), ``cycle_ms`` the cycle's wall time.
"""

from __future__ import annotations

from typing import Any

from busched.api import objects as o
from busched.bench import NotAvailable
from busched.bench import cluster as cl
from busched.bench.driver import bench_config, timed_cycle

DEFAULTS = {"nodes": 5000, "jobs": 100, "seed": 0}
SHAPE = cl.TaskShape(cpu="4", memory="16Gi")
PER_NODE = 8

CONFIG = """
actions: "enqueue, allocate, preempt, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""


def run(nodes: int, jobs: int, seed: int = 0, config: str = CONFIG, **_kw: Any) -> dict[str, Any]:
    cfg, missing_p, missing_a = bench_config(config)
    if "preempt" in missing_a:
        raise NotAvailable("the preempt action (busched/actions/preempt.py) is not in this build")
    node_specs = cl.nodes(nodes)
    names = [n.name for n in node_specs]
    low_jobs, low_tasks = cl.running_jobs(names, PER_NODE, PER_NODE, SHAPE, prefix="low", priority_class="low",
                                          min_member=1)
    high_jobs, high_tasks = [], []
    for j in range(jobs):
        job, ts = cl.gang_job(f"high{j:05d}", 1, SHAPE, priority_class="high")
        high_jobs.append(job)
        high_tasks.extend(ts)
    classes = [o.PriorityClassSpec(name="low", value=10), o.PriorityClassSpec(name="high", value=1000)]
    cache = cl.new_cache(node_specs, low_jobs, low_tasks, classes, arriving=(high_jobs, high_tasks))
    ssn, timing = timed_cycle(cache, cfg, seed=seed)
    pipelined = sum(1 for t in high_tasks if ssn.jobs[f"{cl.NAMESPACE}/{t.job}"].tasks[f"{cl.NAMESPACE}-{t.name}"]
                    .status.name == "Pipelined")
    return {
        "workload": "preempt",
        "nodes": nodes,
        "running_tasks": len(low_tasks),
        "preemptors": jobs,
        "evictions": timing.evictions,
        "pipelined": pipelined,
        "cycle_ms": round(timing.total * 1000, 3),
        "cycle_cpu_ms": round(timing.cpu * 1000, 3),
        "phases_ms": timing.ms(),
        "missing_plugins": missing_p,
        "missing_actions": missing_a,
    }
