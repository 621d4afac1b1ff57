"""trace: the Alibaba GPU cluster trace (v2023, "openb"), fast-forwarded.

/work/shared/traces/alibaba-gpu-v2023 (see its README; Weng et al., USENIX
ATC 2023): 1,523 nodes become busched nodes (cpu, memory, ``nvidia.com/gpu``,
a ``gpu-model`` label, 110 pods); 8,152 tasks become single-task jobs in one
queue, arriving at their ``creation_time``.  A GPU-sharing task (one GPU,
``gpu_milli`` < 1000) asks for that share of a GPU (``nvidia.com/gpu:
460m``): the node's GPUs count as one pool, a simplification of the per-device
sharing the paper studies.  A bound task runs for ``deletion_time -
scheduled_time`` simulated seconds (a task the trace never scheduled runs to
the end), then its job is deleted.

Simulated time jumps from event to event: a cycle runs when tasks arrived or
finished since the last one, at most one per ``PERIOD`` simulated seconds
(arrivals within a period are batched); nothing runs in between.  Default
configuration.  ``placed`` counts tasks ever bound, ``cycle_ms_p99`` is the
99th percentile of the cycles' wall time.
"""

from __future__ import annotations

import csv
import heapq
import statistics
from pathlib import Path
from typing import Any

import msgspec

from busched.api import objects as o
from busched.bench import NotAvailable
from busched.bench import cluster as cl
from busched.bench.driver import bench_config, percentile, rss_mb, timed_cycle
from busched.cache.cache import Cache
from busched.framework.config import DEFAULT_CONFIG

TRACE_DIR = Path("/work/shared/traces/alibaba-gpu-v2023")
NODES_CSV = "openb_node_list_all_node.csv"
PODS_CSV = "openb_pod_list_default.csv"
DEFAULTS = {"nodes": 1523, "tasks": 8152, "seed": 0}
PERIOD = 300  # simulated seconds
FOREVER = float("inf")


def load(nodes: int, tasks: int, where: Path = TRACE_DIR) -> tuple[list[o.NodeSpec], list[dict[str, Any]]]:
    try:
        with open(where / NODES_CSV, newline="") as f:
            node_rows = list(csv.DictReader(f))
        with open(where / PODS_CSV, newline="") as f:
            pod_rows = list(csv.DictReader(f))
    except OSError as e:
        raise NotAvailable(f"trace not readable: {e}") from None
    node_specs = []
    for r in node_rows[:nodes]:
        alloc: dict[str, Any] = {"cpu": f"{r['cpu_milli']}m", "memory": f"{r['memory_mib']}Mi", "pods": 110}
        if int(r["gpu"]):
            alloc["nvidia.com/gpu"] = int(r["gpu"])
        labels = {"gpu-model": r["model"]} if r["model"] else {}
        node_specs.append(o.NodeSpec(name=r["sn"], allocatable=alloc, labels=labels))
    pods = []
    for r in pod_rows[:tasks]:
        req: dict[str, Any] = {"cpu": f"{r['cpu_milli']}m", "memory": f"{r['memory_mib']}Mi"}
        n_gpu, milli = int(r["num_gpu"]), int(r["gpu_milli"])
        if n_gpu:
            req["nvidia.com/gpu"] = f"{n_gpu * milli}m"
        start = r["scheduled_time"] or r["creation_time"]
        runs = float(int(r["deletion_time"]) - int(start)) if r["deletion_time"] and r["scheduled_time"] else FOREVER
        pods.append({"name": r["name"], "requests": req, "arrive": int(r["creation_time"]), "runs": max(runs, 0.0)})
    pods.sort(key=lambda p: (p["arrive"], p["name"]))
    return node_specs, pods


def run(nodes: int, tasks: int, seed: int = 0, config: str = DEFAULT_CONFIG, **_kw: Any) -> dict[str, Any]:
    node_specs, pods = load(nodes, tasks)
    cfg, missing_p, missing_a = bench_config(config)
    cache = Cache()
    cache.load(o.ClusterSpec(nodes=node_specs, queues=[o.QueueSpec(name=cl.QUEUE)]))
    runs = {p["name"]: p["runs"] for p in pods}
    ends: list[tuple[float, str]] = []  # (simulated end, pod) of bound pods
    i = 0
    now = 0.0
    cycle_ms: list[float] = []
    cpu_ms: list[float] = []
    gc_ms: list[float] = []
    placed = 0
    pending_before = 0
    while i < len(pods) or (ends and ends[0][0] < FOREVER and pending_before):
        # the next moment something happens
        nxt = min(pods[i]["arrive"] if i < len(pods) else FOREVER, ends[0][0] if ends else FOREVER)
        if nxt == FOREVER:
            break
        now = max(now + PERIOD, float(nxt)) if cycle_ms else float(nxt)
        while i < len(pods) and pods[i]["arrive"] <= now:
            p = pods[i]
            cache.upsert("job", o.JobSpec(name=p["name"], namespace=cl.NAMESPACE, queue=cl.QUEUE, min_member=1))
            cache.upsert("task", o.TaskSpec(name=p["name"], namespace=cl.NAMESPACE, job=p["name"],
                                            requests=p["requests"]))
            i += 1
        while ends and ends[0][0] <= now:
            _, name = heapq.heappop(ends)
            cache.delete("task", f"{cl.NAMESPACE}/{name}")
            cache.delete("job", f"{cl.NAMESPACE}/{name}")
        ssn, timing = timed_cycle(cache, cfg, seed=seed, uid=f"t{len(cycle_ms)}")
        cycle_ms.append(timing.total * 1000)
        cpu_ms.append(timing.cpu * 1000)
        gc_ms.append(timing.gc * 1000)
        tasks_ = cache.objects["task"]
        for d in ssn.decisions:
            if d.kind != "bind":
                continue
            spec = tasks_.get(d.task)
            if spec is None:
                continue
            cache.upsert("task", msgspec.structs.replace(spec, node=d.node, phase="Running"))
            placed += 1
            heapq.heappush(ends, (now + runs[spec.name], spec.name))
        jobs_ = cache.objects["job"]
        for uid, job in ssn.jobs.items():
            spec = jobs_.get(uid)
            if spec is not None and spec.phase != job.phase:
                cache.upsert("job", msgspec.structs.replace(spec, phase=job.phase))
        pending_before = sum(1 for t in tasks_.values() if not t.node)
        ssn.release()  # as the scheduler's loop does: freed by reference counting, not left for the collector
        del ssn
    return {
        "workload": "trace",
        "nodes": len(node_specs),
        "tasks": len(pods),
        "placed": placed,
        "never_placed": pending_before,
        "cycles": len(cycle_ms),
        "simulated_days": round(now / 86400, 1),
        "cycle_ms_p50": round(statistics.median(cycle_ms), 3) if cycle_ms else 0.0,
        "cycle_ms_p99": round(percentile(cycle_ms, 99), 3),
        "cycle_ms_max": round(max(cycle_ms), 3) if cycle_ms else 0.0,
        "cycle_cpu_ms_p99": round(percentile(cpu_ms, 99), 3),
        "gc_ms_p99": round(percentile(gc_ms, 99), 3),
        "unfit_turns_skipped": cache.unfit.skipped,
        "rss_mb": round(rss_mb(), 1),
        "missing_plugins": missing_p,
        "missing_actions": missing_a,
    }
