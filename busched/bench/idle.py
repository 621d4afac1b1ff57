"""idle: a big, busy cluster with nothing to schedule; what does a cycle cost?

5,000 nodes (32 cpu / 256Gi / 110 pods), 100,000 running tasks (1 cpu / 4Gi,
20 per node) in 10,000 jobs of 10, nothing pending.  After one warm-up cycle,
``cycles`` full cycles run back to back through the cache (decisions and
podgroup phases written back: here, none).  ``cycle_ms`` is their median wall
time: a whole session (snapshot, open, actions, close) over the cluster.
``gc_ms`` is what the scheduler's collector policy (`CollectorPolicy`,
busched.scheduler.memory, shared) spends after each: nothing after a cycle that
made fewer new objects than its threshold, a young collection otherwise, a full
one once the frozen generation doubled (the bench runs it as `Scheduler.run_forever`
does, so ``rss_mb`` is what a running scheduler holds).  Then the same number of
loop turns as a scheduler runs them with `QuietCycles`: a cycle only when one
could decide something, which on an unchanged cluster is none;
``gated_cycle_ms`` is such a turn's cost.
Then churn, as a busy cluster sees it: before each of ``cycles`` more cycles,
``churn`` running tasks finish (deleted) and ``churn`` new single-task jobs
arrive; the cycle places them (the binds are applied, so the next cycle finds
them running).  ``churn_cycle_ms`` is such a cycle's median wall time (a full
session that snapshots, opens, allocates the newcomers and closes), with its
CPU time and phases beside it.  ``rss_mb`` is the process's peak resident
memory.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from busched.bench import cluster as cl
from busched.bench.driver import CycleTiming, apply_decisions, bench_config, collect_garbage, rss_mb, timed_cycle
from busched.builtin import quiet_cycles
from busched.cache.cache import Cache
from busched.framework.config import DEFAULT_CONFIG
from busched.scheduler.memory import CollectorPolicy

DEFAULTS = {"nodes": 5000, "tasks": 100000, "jobs": 10000, "cycles": 5, "seed": 0, "churn": 5}


def build(nodes: int, tasks: int, jobs: int) -> tuple[Cache, int, int]:
    node_specs = cl.nodes(nodes)
    names = [n.name for n in node_specs]
    per_node = max(1, -(-tasks // max(nodes, 1)))
    job_size = max(1, tasks // max(jobs, 1))
    job_specs, task_specs = cl.running_jobs(names, per_node, job_size, min_member=1)
    del task_specs[tasks:]
    keep = {t.job for t in task_specs}
    job_specs = [j for j in job_specs if j.name in keep]
    return cl.new_cache(node_specs, job_specs, task_specs), len(job_specs), len(task_specs)


def churn_round(cache: Any, rnd: int, k: int) -> None:
    """``k`` running tasks finish (deleted, their jobs shrink) and ``k`` single-task jobs arrive."""
    running = [key for key, t in cache.objects["task"].items() if t.phase == "Running" and t.node]
    step = max(1, len(running) // max(k, 1))
    for key in running[rnd % step::step][:k]:
        cache.delete("task", key)
    for i in range(k):
        job, ts = cl.gang_job(f"churn{rnd:04d}x{i:03d}", 1)
        cache.upsert("job", job)
        for t in ts:
            cache.upsert("task", t)


def _cycle(cache: Cache, cfg: Any, seed: int, uid: str, gate: Any = None) -> CycleTiming:
    """One timed cycle, its binds applied (the next cycle finds them running), the gate told, and the
    session released as the scheduler releases it once read: freed by reference counting as it goes."""
    before = cache.generation
    ssn, t = timed_cycle(cache, cfg, seed=seed, uid=uid)
    apply_decisions(cache, ssn)
    if gate is not None:
        gate.done(ssn, before, cache.generation)
    ssn.release()
    return t


def run(nodes: int, tasks: int, jobs: int, cycles: int = 5, seed: int = 0, config: str = DEFAULT_CONFIG,
        churn: int = 5, **_kw: Any) -> dict[str, Any]:
    cache, n_jobs, n_tasks = build(nodes, tasks, jobs)
    cfg, missing_p, missing_a = bench_config(config)
    policy = CollectorPolicy()  # the scheduler's: between cycles, as `Scheduler.run_forever` collects
    policy.enter()
    try:
        first = _cycle(cache, cfg, seed, "cycle-0")
        collect_garbage(policy)
        times, cpus, phases, gcs = [], [], [], []
        gate = quiet_cycles(cfg)
        for i in range(max(1, cycles)):
            t = _cycle(cache, cfg, seed, f"cycle-{i + 1}", gate)
            gcs.append(collect_garbage(policy))
            times.append(t.total)
            cpus.append(t.cpu)
            phases.append(t.ms())
        mid = sorted(range(len(times)), key=lambda i: times[i])[len(times) // 2]
        # the loop as a scheduler runs it: a cycle only when the gate says one could decide something
        gated = []
        for i in range(max(1, cycles)):
            t0 = time.perf_counter()
            if gate.due(cache.generation):
                _cycle(cache, cfg, seed, f"gated-{i}", gate)
            gated.append(time.perf_counter() - t0)
            collect_garbage(policy)  # (the scheduler's loop offers one after every turn: usually too few new objects)
        # churn: a few tasks gone and a few jobs new before every cycle
        churned, churn_cpus, churn_phases, churn_binds = [], [], [], []
        for i in range(max(1, cycles)):
            churn_round(cache, i, churn)
            t = _cycle(cache, cfg, seed, f"churn-{i}")
            collect_garbage(policy, defer=bool(t.binds))
            churned.append(t.total)
            churn_cpus.append(t.cpu)
            churn_phases.append(t.ms())
            churn_binds.append(t.binds)
    finally:
        policy.exit()
    cmid = sorted(range(len(churned)), key=lambda i: churned[i])[len(churned) // 2]
    return {
        "workload": "idle",
        "nodes": nodes,
        "jobs": n_jobs,
        "tasks": n_tasks,
        "cycles": len(times),
        "cycle_ms": round(statistics.median(times) * 1000, 3),
        "cycle_cpu_ms": round(statistics.median(cpus) * 1000, 3),
        "first_cycle_ms": round(first.total * 1000, 3),
        "gated_cycle_ms": round(statistics.median(gated) * 1000, 4),
        "gated_cycles_skipped": gate.skipped,
        "gc_ms": round(statistics.median(gcs) * 1000, 3),
        "phases_ms": phases[mid],
        "churn": churn,
        "churn_cycle_ms": round(statistics.median(churned) * 1000, 3),
        "churn_cycle_cpu_ms": round(statistics.median(churn_cpus) * 1000, 3),
        "churn_phases_ms": churn_phases[cmid],
        "churn_binds": churn_binds[cmid],
        "rss_mb": round(rss_mb(), 1),
        "missing_plugins": missing_p,
        "missing_actions": missing_a,
    }
