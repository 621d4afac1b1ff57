"""The kernel-only limit loop (busched.fastpath.limit) does the work the scheduler does: on
clusters with uneven usage, sampled and exhaustive searches, the node each bind went to is
among the loop's best, and a node the loop would never pick is noticed."""

from __future__ import annotations

import numpy as np
import pytest

from busched.bench import cluster as cl
from busched.bench.driver import bench_config, timed_cycle
from busched.bench.limit import kernel_input
from busched.fastpath.limit import place_all
from busched.framework.config import DEFAULT_CONFIG


def _session(nodes: int, jobs: int, size: int, shape: cl.TaskShape, running: int = 0):
    node_specs = cl.nodes(nodes)
    rjobs, rtasks = cl.running_jobs([n.name for n in node_specs][: max(1, nodes // 3)], running, 3) \
        if running else ([], [])
    specs, tasks = [], []
    for j in range(jobs):
        job, ts = cl.gang_job(f"job{j:04d}", size, shape)
        specs.append(job)
        tasks.extend(ts)
    cache = cl.new_cache(node_specs, rjobs, rtasks, arriving=(specs, tasks))
    cfg, _, _ = bench_config(DEFAULT_CONFIG)
    ssn, timing = timed_cycle(cache, cfg)
    return ssn, timing


@pytest.mark.parametrize("nodes,jobs,size,shape,running", [
    (300, 400, 1, cl.TaskShape(), 0),  # sampled search (to_find 100 of 300), wraps around
    (300, 200, 1, cl.TaskShape(cpu="2", memory="3Gi"), 2),  # uneven usage before the cycle
    (8, 3, 20, cl.TaskShape(cpu="3", memory="16Gi"), 0),  # gangs, exhaustive search, ties
])
def test_every_bind_is_among_the_loops_best(nodes, jobs, size, shape, running):
    ssn, timing = _session(nodes, jobs, size, shape, running)
    inp = kernel_input(ssn)
    assert len(inp.chosen) == timing.binds > 0
    assert place_all(inp) == timing.binds


def test_a_node_the_loop_would_not_pick_is_noticed():
    ssn, timing = _session(300, 50, 1, cl.TaskShape(), 0)
    inp = kernel_input(ssn)
    inp.chosen = np.full_like(inp.chosen, len(inp.alloc) - 1)  # all on the last node: never the best
    assert place_all(inp) < timing.binds
