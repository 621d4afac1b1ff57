"""Each vectorised twin answers exactly as the per-node code it replaces, on random clusters.

binpack's scores, nodeorder's node-order and batch scores, the predicates
filter, the pod view's per-node sums, the request-fit vectors kept across
tasks (refreshed as tasks land), and the job-order sort keys.
"""

from __future__ import annotations

import functools
import random

import numpy as np
import pytest

from busched.api.fit import FitError
from busched.api.task import TaskStatus
from busched.framework.config import DEFAULT_CONFIG, load_config
from busched.framework.cycle import open_session
from busched.kernels import select
from busched.kernels.batch import batch_of
from busched.kernels.fit import FUTURE_IDLE, IDLE, fit_mask_reference, fits
from busched.kernels.order import job_order_key
from busched.kernels.podview import pod_view_arrays

from tests.kernel_cases import cache_of, random_cluster

WEIGHTED = DEFAULT_CONFIG.replace("  - name: binpack\n", """  - name: binpack
    arguments: {binpack.weight: 3, binpack.memory: 0, binpack.resources: nvidia.com/gpu}
""").replace("  - name: nodeorder\n", """  - name: nodeorder
    arguments: {mostrequested.weight: 1, tainttoleration.weight: 2}
""")


def session(seed: int, config: str = DEFAULT_CONFIG):
    rng = random.Random(seed)
    ssn = open_session(cache_of(random_cluster(rng, nodes=rng.choice([5, 40, 120]))).snapshot(),
                       load_config(config), seed=seed)
    return rng, ssn


def pending(ssn):
    return [t for j in ssn.jobs.values() for t in j.tasks.values() if t.status == TaskStatus.Pending]


def land_some(rng, ssn, k: int = 5) -> None:
    """Place a few pending tasks where they fit, as allocate would (nodes, pod view and arrays follow)."""
    for task in rng.sample(pending(ssn), min(k, len(pending(ssn)))):
        fitting = [n for n in ssn.node_list if task.init_resreq.less_equal(n.idle)]
        if fitting:
            stmt = ssn.statement()
            stmt.allocate(task, rng.choice(fitting).name)


def twins(ssn, point: str):
    return [(name, fn) for row in ssn._tiers(point) for name, fn in row]


@pytest.mark.parametrize("config", [DEFAULT_CONFIG, WEIGHTED], ids=["default", "weighted"])
@pytest.mark.parametrize("seed", range(12))
def test_node_order_twins(seed, config):
    rng, ssn = session(seed, config)
    arrays = ssn.arrays
    for _ in range(3):
        for task in rng.sample(pending(ssn), min(6, len(pending(ssn)))):
            rows = np.array(sorted(rng.sample(range(len(ssn.node_list)), rng.randint(1, len(ssn.node_list)))))
            nodes = [ssn.node_list[i] for i in rows]
            for name, fn in twins(ssn, "node_order"):
                got = batch_of(fn)(task, arrays, rows)
                assert got.tolist() == [float(fn(task, n)) for n in nodes], name
            for name, fn in twins(ssn, "batch_node_order"):
                want = fn(task, nodes)
                got = batch_of(fn)(task, arrays, rows, nodes)
                assert got.tolist() == [want.get(n.name, 0.0) for n in nodes], name
        land_some(rng, ssn)


@pytest.mark.parametrize("seed", range(12))
def test_predicate_twin(seed):
    rng, ssn = session(seed)
    arrays = ssn.arrays
    for _ in range(3):
        for task in pending(ssn)[:10]:
            for name, fn in twins(ssn, "predicate"):
                mask = batch_of(fn)(task, arrays, arrays.all_rows)
                if mask is None:
                    continue
                want = []
                for n in ssn.node_list:
                    try:
                        fn(task, n)
                        want.append(True)
                    except FitError:
                        want.append(False)
                assert mask.tolist() == want, name
        land_some(rng, ssn)


@pytest.mark.parametrize("seed", range(8))
def test_pod_view_sums_follow_the_view(seed):
    from busched.plugins.predicates import non_zero_requests, pod_requests, session_pods

    rng, ssn = session(seed)
    view = session_pods(ssn)
    pv = pod_view_arrays(view, ssn.arrays, pod_requests, non_zero_requests)
    for _ in range(4):
        land_some(rng, ssn, 8)
        for i, n in enumerate(ssn.node_list):
            cpu, mem, nz_cpu, nz_mem, scalars = view.requested(n.name)
            assert (pv.cpu[i], pv.mem[i], pv.nz_cpu[i], pv.nz_mem[i]) == (cpu, mem, nz_cpu, nz_mem)
            assert pv.count[i] == len(view.on(n.name))
            for k, v in scalars.items():
                assert pv.scalar(k)[i] == v


@pytest.mark.parametrize("seed", range(8))
def test_kept_fit_vectors_follow_changes(seed):
    rng, ssn = session(seed)
    arrays = ssn.arrays
    for _ in range(5):
        for task in pending(ssn)[:6]:
            for which in (IDLE, FUTURE_IDLE):
                got = fits(arrays, task.init_resreq, which)
                assert got.tolist() == fit_mask_reference(ssn.node_list, task.init_resreq, which).tolist()
        land_some(rng, ssn, 4)


@pytest.mark.parametrize("seed", range(30))
def test_feasible_scan_walks_like_the_loop(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 40)
    ok = np.array([rng.random() < 0.6 for _ in range(n)])
    start, to_find = rng.randrange(n), rng.randint(1, n)
    found, processed, failed = [], 0, []
    for k in range(n):
        i = (start + k) % n
        processed += 1
        if ok[i]:
            found.append(i)
            if len(found) >= to_find:
                break
        else:
            failed.append(i)
    assert select.feasible_scan(ok, start, to_find) == (found, processed, failed)


@pytest.mark.parametrize("seed", range(10))
def test_job_order_key_sorts_as_the_comparator(seed):
    rng, ssn = session(seed)
    land_some(rng, ssn, 10)  # some jobs ready, drf shares apart
    key = job_order_key(ssn)
    assert key is not None
    jobs = list(ssn.jobs.values())
    rng.shuffle(jobs)
    by_fn = sorted(jobs, key=functools.cmp_to_key(
        lambda a, b: -1 if ssn.job_order_fn(a, b) else (1 if ssn.job_order_fn(b, a) else 0)))
    assert [j.uid for j in sorted(jobs, key=key)] == [j.uid for j in by_fn]
