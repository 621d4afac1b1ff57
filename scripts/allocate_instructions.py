"""Instructions of allocate alone on `busched bench throughput`'s cluster, for A/B runs under callgrind.

Wall and CPU times of one cycle move by a tenth and more on a shared machine; an instruction count
does not.  This builds the throughput workload's cluster (N nodes, J single-task jobs; env N, J),
opens a session, runs enqueue and builds the node arrays natively, and switches callgrind's
instrumentation on around allocate's ``execute`` only (``callgrind_control -i``).  It prints the
binds and a digest of every (task, node), so two trees' counts are compared only for the same
decisions.  Run it as

    PYTHONHASHSEED=0 PYTHONPATH=TREE valgrind --tool=callgrind --instr-atstart=no \\
        --callgrind-out-file=/tmp/cg.%p python scripts/allocate_instructions.py

and read "Collected" (docs/benchmarks.md, "Throughput at 5,000 nodes, a stream's sampled choices").
"""

from __future__ import annotations

import hashlib
import os
import subprocess

from busched.actions import ACTIONS
from busched.bench import cluster as cl
from busched.bench.driver import bench_config
from busched.builtin import open_session, paused_gc
from busched.framework.config import DEFAULT_CONFIG


def main() -> None:
    nodes, jobs = int(os.environ.get("N", 5000)), int(os.environ.get("J", 10000))
    specs, task_specs = [], []
    for j in range(jobs):
        job, ts = cl.gang_job(f"job{j:06d}", 1)
        specs.append(job)
        task_specs.extend(ts)
    cache = cl.new_cache(cl.nodes(nodes), arriving=(specs, task_specs))
    cfg, _, _ = bench_config(DEFAULT_CONFIG)
    pid = str(os.getpid())
    with paused_gc():
        ssn = open_session(cache.snapshot(), cfg, seed=0, uid="session")
        ACTIONS["enqueue"]().execute(ssn)
        allocate = ACTIONS["allocate"]()
        ssn.arrays  # noqa: B018 - built natively, before the count (the first task would build them)
        subprocess.run(["callgrind_control", "-i", "on", pid], check=True, stdout=subprocess.DEVNULL)
        allocate.execute(ssn)
        subprocess.run(["callgrind_control", "-i", "off", pid], check=True, stdout=subprocess.DEVNULL)
    binds = [(d.task, d.node) for d in ssn.decisions if d.kind == "bind"]
    print("binds", len(binds), hashlib.sha1(repr(binds).encode()).hexdigest()[:12])


if __name__ == "__main__":
    main()
