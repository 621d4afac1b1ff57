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

import pytest

from busched.builtin import open_session
from busched.fastpath import select
from busched.framework.config import DEFAULT_CONFIG, load_config
from busched.framework.nodeselect import PredicateHelper, best_node, gradients
from busched.framework.statement import Statement
from tests.kernel_cases import cache_of, random_cluster


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
        found, _ = PredicateHelper(ssn, False).predicate_nodes(
            task, nodes, ssn.predicate_for_allocate, resource_fit=task.init_resreq, errors_if_found=False, lazy=True)
        want = names(gradients(ssn, task, list(found))) if len(found) else None
        want_index = ssn.last_node_index
        ssn.last_node_index = start
        got = PredicateHelper(ssn, False).gradients_found(task, nodes, ssn.predicate_for_allocate)
        if got is None:
            # the full search decides: nothing found, or a predicate twin declined the task
            declined = select.predicate_mask(ssn, task, ssn.arrays, ssn.arrays.all_rows,
                                             ssn.predicate_for_allocate) is None
            assert want is None or declined
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


def test_nothing_found_leaves_the_search_to_the_full_path():
    rng = random.Random(7)
    spec = random_cluster(rng, nodes=8, jobs=4, fancy=False)
    ssn = open_session(cache_of(spec).snapshot(), load_config(DEFAULT_CONFIG), seed=0)
    task = next(t for j in ssn.jobs.values() for t in j.tasks.values() if t.status.name == "Pending")
    task.init_resreq = task.init_resreq.clone()
    task.init_resreq.cpu = 10**9  # fits no node
    ssn.last_node_index = 3
    assert PredicateHelper(ssn, False).gradients_found(task, ssn.node_list, ssn.predicate_for_allocate) is None
    assert ssn.last_node_index == 3  # untouched: the full search starts where this one would have


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
