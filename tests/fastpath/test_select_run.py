"""Allocate's one-pass search and bucketing (busched.fastpath.select_run) against the full search.

On random clusters, for pending tasks in random order with the search starting anywhere, the
gradients `PredicateHelper.gradients_found` gives must be those the full search
(`PredicateHelper.predicate_nodes`, lazy as allocate asks) followed by `gradients` gives, with
the same rotated start left for the next search; each task is then placed where allocate would
place it, so the kept vectors are read again after changes (idle, future idle, pods).  Whole
cycles with the kernels on and off are compared in test_kernels_select.py and
test_bench_decisions.py, where allocate takes this path.
"""

from __future__ import annotations

import random

import msgspec
import pytest

from busched.api.fit import FitErrors
from busched.builtin import open_session
from busched.fastpath import select
from busched.framework.config import DEFAULT_CONFIG, load_config
from busched.framework.nodeselect import PredicateHelper, best_node, gradients
from busched.framework.statement import Statement
from tests.kernel_cases import GPU, cache_of, random_cluster


def names(buckets) -> list[list[str]]:
    return [[n.name for n in b] for b in buckets]


@pytest.mark.parametrize("seed", range(10))
def test_gradients_found_match_the_full_search(seed):
    rng = random.Random(4200 + seed)
    spec = random_cluster(rng, nodes=rng.choice([5, 60, 180, 320]), jobs=rng.randint(5, 30))
    ssn = open_session(cache_of(spec).snapshot(), load_config(DEFAULT_CONFIG), seed=seed)
    assert ssn.fast is not None
    nodes = ssn.node_list
    tasks = [t for j in ssn.jobs.values() for t in j.tasks.values()
             if t.status.name == "Pending" and not t.resreq.is_empty()]
    rng.shuffle(tasks)
    answered = 0
    stmt = Statement(ssn)
    for task in tasks[:25]:
        start = rng.randrange(1000)
        ssn.last_node_index = start
        found, want_errors = PredicateHelper(ssn, False).predicate_nodes(
            task, nodes, ssn.predicate_for_allocate, resource_fit=task.init_resreq, errors_if_found=False, lazy=True)
        want = names(gradients(ssn, task, list(found))) if len(found) else None
        want_index = ssn.last_node_index
        ssn.last_node_index = start
        got = PredicateHelper(ssn, False).gradients_found(task, nodes, ssn.predicate_for_allocate)
        if got is None:
            # the full search decides: a predicate twin declined the task
            declined = select.predicate_mask(ssn, task, ssn.arrays, ssn.arrays.all_rows,
                                             ssn.predicate_for_allocate) is None
            assert declined
            continue
        if isinstance(got, FitErrors):  # nothing found: the full search's errors, from the same walk
            assert want is None
            assert list(got.nodes.items()) == list(want_errors.nodes.items()) and got.err == want_errors.err
            assert ssn.last_node_index == want_index
            continue
        answered += 1
        assert names(got) == want
        assert ssn.last_node_index == want_index
        best = best_node(ssn, task, got)
        assert best is not None
        if task.init_resreq.less_equal(best.idle):
            stmt.allocate(task, best.name)
        else:
            stmt.pipeline(task, best.name)
    assert answered  # the one-pass path really ran


@pytest.mark.parametrize("nodes", [8, 300])  # unsampled and sampled searches
def test_nothing_found_gives_the_full_search_errors_from_one_walk(nodes, monkeypatch):
    rng = random.Random(7)
    spec = random_cluster(rng, nodes=nodes, jobs=4, fancy=False)
    ssn = open_session(cache_of(spec).snapshot(), load_config(DEFAULT_CONFIG), seed=0)
    task = next(t for j in ssn.jobs.values() for t in j.tasks.values() if t.status.name == "Pending")
    task.init_resreq = task.init_resreq.clone()
    task.init_resreq.cpu = 10**9  # fits no node
    ssn.last_node_index = 3
    found, want = PredicateHelper(ssn, False).predicate_nodes(task, ssn.node_list, ssn.predicate_for_allocate,
                                                              resource_fit=task.init_resreq, errors_if_found=False,
                                                              lazy=True)
    assert not len(found) and len(want.nodes) == nodes
    want_index = ssn.last_node_index
    ssn.last_node_index = 3
    walks = []
    scan = select.scan
    monkeypatch.setattr(select, "scan", lambda *a, **kw: walks.append(1) or scan(*a, **kw))
    got = PredicateHelper(ssn, False).gradients_found(task, ssn.node_list, ssn.predicate_for_allocate)
    assert isinstance(got, FitErrors)
    assert list(got.nodes.items()) == list(want.nodes.items())
    assert ssn.last_node_index == want_index
    assert len(walks) == 1  # the walk is made once, not again by the full search


def test_error_cache_groups_and_shards_take_the_full_search():
    rng = random.Random(11)
    spec = random_cluster(rng, nodes=8, jobs=10, fancy=False)
    ssn = open_session(cache_of(spec).snapshot(), load_config(DEFAULT_CONFIG), seed=0)
    pending = [t for j in ssn.jobs.values() for t in j.tasks.values() if t.status.name == "Pending"]
    with_role = [t for t in pending if t.role]
    assert with_role
    # a task with a role: the error cache of its group is read and written node by node
    assert PredicateHelper(ssn, True).gradients_found(with_role[0], ssn.node_list, ssn.predicate_for_allocate) is None
    # a subset of the nodes: not all rows
    assert PredicateHelper(ssn, False).gradients_found(pending[0], ssn.node_list[:3],
                                                       ssn.predicate_for_allocate) is None


def without_gpus(spec):
    """The cluster with no GPU anywhere: its node arrays have only the cpu and memory columns."""
    nodes = [msgspec.structs.replace(n, allocatable={k: v for k, v in n.allocatable.items() if k != GPU})
             for n in spec.nodes]
    tasks = [msgspec.structs.replace(t, requests={k: v for k, v in t.requests.items() if k != GPU})
             for t in spec.tasks]
    return msgspec.structs.replace(spec, nodes=nodes, tasks=tasks)


@pytest.mark.parametrize("gpus", [False, True])
@pytest.mark.parametrize("seed", range(5))
def test_kept_fits_and_rows_follow_evictions_and_pipelines(seed, gpus):
    """The kept fit vectors and the arrays' future-idle rows (refreshed from the node's idle, releasing
    and pipelined values without building its future idle, when nothing releasing or pipelined there
    names a scalar) against the per-node reference, while tasks are allocated, evicted (Releasing) and pipelined onto
    future idle.  Requests of exactly some nodes' future idle put verdicts on the edge."""
    from busched.api.resource import Resource
    from busched.fastpath.fit import FUTURE_IDLE, IDLE, fit_mask_reference, fits

    rng = random.Random(900 + seed)
    spec = random_cluster(rng, nodes=rng.choice([6, 40]), jobs=25)
    ssn = open_session(cache_of(spec if gpus else without_gpus(spec)).snapshot(),
                       load_config(DEFAULT_CONFIG), seed=seed)
    arrays = ssn.arrays
    shapes = [t.init_resreq for j in ssn.jobs.values() for t in j.tasks.values()][:8]
    for _ in range(6):
        for n in rng.sample(ssn.node_list, 3):
            fi = n.future_idle()
            shapes.append(Resource(fi.cpu, fi.memory))  # on the edge of this node
            shapes.append(Resource(fi.cpu, fi.memory, {"pods": fi.scalars.get("pods", 0.0)}))
        for req in shapes:
            fits(arrays, req, FUTURE_IDLE)  # kept now, refreshed below
        stmt = Statement(ssn)
        placed = [t for j in ssn.jobs.values() for t in j.tasks.values() if t.status.name == "Allocated"]
        for t in rng.sample(placed, min(3, len(placed))):
            stmt.evict(t, "test")
        waiting = [t for j in ssn.jobs.values() for t in j.tasks.values() if t.status.name == "Pending"]
        for t in rng.sample(waiting, min(4, len(waiting))):
            on_idle = [n for n in ssn.node_list if t.init_resreq.less_equal(n.idle)]
            on_future = [n for n in ssn.node_list if t.init_resreq.less_equal(n.future_idle())]
            if on_idle and rng.random() < 0.5:
                stmt.allocate(t, rng.choice(on_idle).name)
            elif on_future:
                stmt.pipeline(t, rng.choice(on_future).name)
        for i, n in enumerate(ssn.node_list):
            fi = n.future_idle()
            assert (arrays.future[i, 0], arrays.future[i, 1]) == (fi.cpu, fi.memory)
        for req in shapes:
            for which in (IDLE, FUTURE_IDLE):
                assert fits(arrays, req, which).tolist() == fit_mask_reference(ssn.node_list, req, which).tolist()


def test_a_refreshed_fit_on_the_edge():
    """A node's kept fit, refreshed after a task lands there, for requests of exactly its new future
    idle (fits), a milli-cpu, a byte or a pod more (does not), and its row of future idle."""
    from busched.api.resource import Resource
    from busched.fastpath.fit import FUTURE_IDLE, fit_mask_reference, fits

    rng = random.Random(3)
    ssn = open_session(cache_of(without_gpus(random_cluster(rng, nodes=12, jobs=10, fancy=False))).snapshot(),
                       load_config(DEFAULT_CONFIG), seed=0)
    arrays = ssn.arrays
    task = next(t for j in ssn.jobs.values() for t in j.tasks.values()
                if t.status.name == "Pending" and t.init_resreq.cpu > 0 and t.init_resreq.memory > 0)
    node = next(n for n in ssn.node_list if task.init_resreq.less_equal(n.idle))
    after = node.future_idle().sub(task.init_resreq)
    pods = after.scalars["pods"]
    edge = [Resource(after.cpu, after.memory, {"pods": pods}), Resource(after.cpu + 1, after.memory),
            Resource(after.cpu, after.memory + 1), Resource(after.cpu, after.memory, {"pods": pods + 1}),
            Resource(after.cpu, after.memory)]
    for req in edge:
        fits(arrays, req, FUTURE_IDLE)  # kept before the task lands
    Statement(ssn).allocate(task, node.name)
    i = arrays.row[node.name]
    assert (arrays.future[i, 0], arrays.future[i, 1]) == (after.cpu, after.memory)
    assert arrays.future[i, arrays.columns["pods"]] == pods
    got = [bool(fits(arrays, req, FUTURE_IDLE)[i]) for req in edge]
    assert got == [True, False, False, False, True]
    for req in edge:
        assert fits(arrays, req, FUTURE_IDLE).tolist() == fit_mask_reference(ssn.node_list, req).tolist()
