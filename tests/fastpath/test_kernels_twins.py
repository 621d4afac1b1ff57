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

from busched.api.task import TaskStatus
from busched.builtin import open_session
from busched.fastpath import select
from busched.fastpath.fit import FUTURE_IDLE, IDLE, fit_mask_reference, fits
from busched.fastpath.order import job_order_key
from busched.fastpath.podview import pod_view_arrays
from busched.framework import points
from busched.framework.config import DEFAULT_CONFIG, load_config
from busched.framework.statement import Statement
from tests.fastpath.test_kernels_batch import walk
from tests.kernel_cases import cache_of, passes, random_cluster

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
            stmt = Statement(ssn)
            stmt.allocate(task, rng.choice(fitting).name)


def twins(ssn, point):
    return ssn.hooks.with_twins(point)


@pytest.mark.parametrize("config", [DEFAULT_CONFIG, WEIGHTED], ids=["default", "weighted"])
@pytest.mark.parametrize("seed", range(12))
def test_node_order_twins(seed, config):
    rng, ssn = session(seed, config)
    arrays = ssn.arrays
    for _ in range(3):
        for task in rng.sample(pending(ssn), min(6, len(pending(ssn)))):
            rows = np.array(sorted(rng.sample(range(len(ssn.node_list)), rng.randint(1, len(ssn.node_list)))))
            nodes = [ssn.node_list[i] for i in rows]
            for name, fn, twin in twins(ssn, points.NODE_ORDER):
                got = twin(task, arrays, rows)
                assert got.tolist() == [float(fn(task, n)) for n in nodes], name
            for name, fn, twin in twins(ssn, points.BATCH_NODE_ORDER):
                want = fn(task, nodes)
                got = twin(task, arrays, rows, nodes)
                assert got.tolist() == [want.get(n.name, 0.0) for n in nodes], name
        land_some(rng, ssn)


@pytest.mark.parametrize("seed", range(12))
def test_predicate_twin(seed):
    rng, ssn = session(seed)
    arrays = ssn.arrays
    for _ in range(3):
        for task in pending(ssn)[:10]:
            for name, fn, twin in twins(ssn, points.PREDICATE):
                mask = twin(task, arrays, arrays.all_rows)
                if mask is None:
                    continue
                assert mask.tolist() == passes(fn, task, ssn.node_list), name
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
    assert select.feasible_scan(ok, start, to_find) == walk(ok, start, to_find)


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


def _fresh_sums(view, node: str):
    """SessionPods.requested's sums computed afresh over the node's pods (the reference)."""
    from busched.framework.podsums import sum_pods_plain

    return sum_pods_plain(view.on(node))


@pytest.mark.parametrize("seed", range(8))
def test_pod_view_kept_sums_equal_fresh_sums(seed):
    """The per-node sums grown pod by pod equal the sums taken afresh, as tasks land and leave."""
    from busched.plugins.predicates import session_pods

    rng, ssn = session(seed)
    view = session_pods(ssn)
    for n in ssn.node_list:
        view.requested(n.name)  # kept from here on
    for _ in range(4):
        stmts = []
        for task in rng.sample(pending(ssn), min(8, len(pending(ssn)))):
            fitting = [n for n in ssn.node_list if task.init_resreq.less_equal(n.idle)]
            if fitting:
                stmt = Statement(ssn)
                stmt.allocate(task, rng.choice(fitting).name)
                stmts.append(stmt)
        if stmts and rng.random() < 0.5:
            rng.choice(stmts).discard()
        for n in ssn.node_list:
            cpu, mem, nz_cpu, nz_mem, scalars = view.requested(n.name)
            fc, fm, fnc, fnm, fsc = _fresh_sums(view, n.name)
            assert (cpu, mem, nz_cpu, nz_mem) == (fc, fm, fnc, fnm)
            assert {k: v for k, v in scalars.items() if v} == {k: v for k, v in fsc.items() if v}


@pytest.mark.parametrize("seed", range(8))
def test_pod_requests_shortcut_matches_the_general_form(seed):
    from busched.api.resource import PODS
    from busched.plugins.predicates import pod_requests

    _, ssn = session(seed)
    for job in ssn.jobs.values():
        for t in job.tasks.values():
            r = t.resreq
            general = (int(r.cpu), int(r.memory),
                       {n: -(-int(v) // 1000) for n, v in r.scalars.items() if n != PODS and v > 0})
            assert pod_requests(t) == general


@pytest.mark.parametrize("seed", range(30))
def test_feasible_scan_array_equals_the_list_form(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 60)
    ok = np.array([rng.random() < rng.choice([0.1, 0.6, 1.0]) for _ in range(n)])
    start, to_find = rng.randrange(n), rng.randint(1, n)
    found, processed, failed = select.feasible_scan_array(ok, start, to_find)
    assert isinstance(found, np.ndarray)
    assert (found.tolist(), processed, failed) == select.feasible_scan(ok, start, to_find)
    # without failures asked for: the same walk; the failing positions only when none passed
    for s in (start, 0):
        found1, processed1, failed1 = select.feasible_scan_array(ok, s, to_find)
        found2, processed2, failed2 = select.feasible_scan_array(ok, s, to_find, failures=False)
        assert (found2.tolist(), processed2) == (found1.tolist(), processed1)
        assert failed2 == ([] if len(found1) else failed1)
    nodes = [f"n{i}" for i in range(n)]
    rows = np.arange(n)[::-1].copy()
    by_array = select.NodeRows.take(nodes, found, rows)
    by_list = select.NodeRows.take(nodes, found.tolist(), rows)
    assert list(by_array) == list(by_list) and by_array.rows.tolist() == by_list.rows.tolist()


@pytest.mark.parametrize("seed", range(20))
def test_pick_unless_nan_is_isnan_then_pick(seed):
    class S:
        pass

    rng = random.Random(seed)
    n = rng.randint(0, 30)
    vals = [float(rng.choice([1, 2, 3, 7.5])) for _ in range(n)]
    if n and rng.random() < 0.3:
        vals[rng.randrange(n)] = float("nan")
    scores_ = np.array(vals, dtype=float)
    nodes = [f"n{i}" for i in range(n)]
    a, b = S(), S()
    a.rng, b.rng = random.Random(seed), random.Random(seed)
    done, got = select.pick_unless_nan(a, nodes, scores_)
    if np.isnan(scores_).any():
        assert (done, got) == (False, None)
    else:
        assert done and got == select.pick(b, nodes, scores_)
    assert a.rng.random() == b.rng.random() if done else True


def test_resource_clone_equals_the_constructor():
    from busched.api.resource import Resource

    for r in (Resource(), Resource(1500, 2 ** 33, {"pods": 3.0, "nvidia.com/gpu": 2000.0}, 7),
              Resource(1, 2), Resource.infinite()):
        c, ref = r.clone(), Resource(r.cpu, r.memory, r.scalars, r.max_task_num)
        assert (c.cpu, c.memory, c.scalars, c.max_task_num) == (ref.cpu, ref.memory, ref.scalars, ref.max_task_num)
        assert type(c.cpu) is float and type(c.memory) is float
        assert c.scalars is not r.scalars


@pytest.mark.parametrize("seed", range(12))
def test_task_order_key_pops_as_the_comparator(seed):
    """allocate's task heap with the key pops the same tasks in the same order as with the comparator."""
    import dataclasses

    from busched.fastpath.order import task_order_key
    from busched.framework.pqueue import PriorityQueue

    rng, ssn = session(seed)
    tasks = [t for job in ssn.jobs.values() for t in job.tasks.values()]
    rng.shuffle(tasks)
    tasks = tasks[:60]
    # names with a pod index, without one, and a mix; equal indexes, priorities and creation times
    style = seed % 3
    made = []
    for i, t in enumerate(tasks):
        idx = rng.randrange(6)
        named = style == 0 or (style == 2 and rng.random() < 0.5)
        made.append(dataclasses.replace(t, name=f"job-x-{idx}" if named else f"t{i}",
                                        uid=f"u{i:03d}", priority=rng.choice([1, 1, 5]),
                                        created=float(rng.randrange(3))))
    key = task_order_key(ssn, made)
    if style == 2 and any(t.name.startswith("t") for t in made) and any(t.name.startswith("job") for t in made):
        assert key is None
        return
    assert key is not None
    with_fn, with_key = PriorityQueue(ssn.task_order_fn), PriorityQueue(ssn.task_order_fn, key=key)
    for t in made:
        with_fn.push(t)
        with_key.push(t)
    assert [with_key.pop().uid for _ in made] == [with_fn.pop().uid for _ in made]


@pytest.mark.parametrize("seed", range(10))
def test_predicate_nodes_errors_match_the_plain_walk(seed, monkeypatch):
    """The kernels' feasible nodes and fit errors (with the kept "Insufficient" reasons, and without
    building errors nothing reads) are the plain walk's, as tasks land and nodes fill."""
    from busched.fastpath import FastPath, FastPathSettings
    from busched.framework.nodeselect import PredicateHelper

    rng, ssn = session(seed)
    for _ in range(4):
        for task in pending(ssn)[:8]:
            at = ssn.last_node_index
            got = {}
            for mode, errors_if_found in (("plain", True), ("kernels", True), ("kernels-lazy", False)):
                ssn.fast = FastPath(FastPathSettings()) if mode != "plain" else None
                ssn.last_node_index = at
                found, fe = PredicateHelper(ssn).predicate_nodes(
                    task, ssn.node_list, ssn.predicate_for_allocate, resource_fit=task.init_resreq,
                    errors_if_found=errors_if_found)
                got[mode] = ([n.name for n in found], ssn.last_node_index,
                             {name: e.reasons() for name, e in fe.nodes.items()})
            assert got["kernels"] == got["plain"]
            assert got["kernels-lazy"][:2] == got["plain"][:2]
            if not got["plain"][0] or task.role:
                assert got["kernels-lazy"] == got["plain"]
        ssn.fast = FastPath(FastPathSettings())
        land_some(rng, ssn, 10)


@pytest.mark.parametrize("seed", range(20))
def test_node_rows_take_equals_indexing(seed):
    """Whatever positions a scan or a mask gives (ascending, one run, or a wrapped scan), the
    taken nodes and rows are ``nodes[p]`` and ``rows[p]``."""
    rng = random.Random(seed)
    n = rng.randint(1, 60)
    nodes = [object() for _ in range(n)]
    rows = np.array(rng.sample(range(1000), n), dtype=np.int64)
    ok = np.array([rng.random() < rng.choice([0.2, 0.8, 1.0]) for _ in range(n)])
    start = rng.randrange(n)
    found, _, _ = select.feasible_scan_array(ok, start, rng.randint(1, n))
    for positions in (found, np.flatnonzero(ok), np.arange(start, n)):
        got = select.NodeRows.take(nodes, positions, rows)
        assert list(got) == [nodes[p] for p in positions.tolist()]
        assert got.rows.tolist() == rows[positions].tolist()
