"""The decisions of the throughput, gang and mixed benchmarks, on smaller instances of the same
workloads, are identical with the array kernels (and whatever batching they do) and with the
plain one-by-one reference path (``FastPathSettings(kernels=False)``): every bind, in order, on
the same node, and every podgroup's phase."""

from __future__ import annotations

import pytest

from busched import fastpath
from busched.bench import cluster as cl
from busched.bench import gang, mixed
from busched.bench.driver import bench_config, timed_cycle
from busched.fastpath import FastPathSettings
from busched.framework.config import DEFAULT_CONFIG


def _workload(nodes: int, jobs: int, size: int, shape: cl.TaskShape) -> tuple[list, list, list]:
    specs, tasks = [], []
    for j in range(jobs):
        job, ts = cl.gang_job(f"job{j:05d}", size, shape)
        specs.append(job)
        tasks.extend(ts)
    return cl.nodes(nodes), specs, tasks


def _decide(nodes, specs, tasks, kernels: bool, seed: int):
    was = fastpath.use_by_default(FastPathSettings(kernels=kernels))
    try:
        cache = cl.new_cache(nodes, arriving=(specs, tasks))
        cfg, _, _ = bench_config(DEFAULT_CONFIG)
        ssn, _ = timed_cycle(cache, cfg, seed=seed)
        return ([(d.kind, d.task, d.node) for d in ssn.decisions],
                sorted((uid, str(job.phase)) for uid, job in ssn.jobs.items()))
    finally:
        fastpath.use_by_default(was)


CASES = {
    # throughput: single-task jobs of one template; 300 nodes so the search samples (100 of 300)
    "throughput": [(300, 450, 1, cl.TaskShape())],
    # gang: gangs that exactly fill the cluster (ten 3-cpu tasks a node)
    "gang": [(6, 3, 20, gang.SHAPE)],
    # mixed: the same tasks cut into jobs of 1, 20, 500 and all (scaled down)
    "mixed": [(200, jobs, size, cl.TaskShape()) for jobs, size in mixed.shapes(400)],
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("seed", [0, 7])
def test_kernels_decide_as_the_reference(name, seed):
    for nodes, jobs, size, shape in CASES[name]:
        workload = _workload(nodes, jobs, size, shape)
        fast = _decide(*workload, kernels=True, seed=seed)
        plain = _decide(*workload, kernels=False, seed=seed)
        assert fast[0], "nothing placed: the comparison would be empty"
        assert fast == plain
