"""Shortcuts for streams of tasks of one template, against their plain forms: the windowed
feasible walk on large clusters (`select._head`) and the predicates filter kept per template
(`predicates.passing`) while pods land and fill nodes to their pod limit."""

from __future__ import annotations

import random

import numpy as np
import pytest

from busched.bench import cluster as cl
from busched.builtin import open_session
from busched.fastpath import predicates, select
from busched.framework import points
from busched.framework.config import DEFAULT_CONFIG, load_config
from busched.framework.statement import Statement
from tests.kernel_cases import passes


def walk(ok, start, to_find):
    """The plain node-by-node walk (the reference of every feasible scan)."""
    n = len(ok)
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
    return found, processed, failed


@pytest.mark.parametrize("seed", range(40))
def test_windowed_walk_on_large_clusters(seed):
    rng = random.Random(seed)
    n = rng.choice([300, 2000, 9000])
    density = rng.choice([0.002, 0.05, 0.5, 0.97, 1.0])
    ok = np.array([rng.random() < density for _ in range(n)])
    if rng.random() < 0.3:
        ok[: rng.randrange(n)] = False  # a long failing run: the window holds too few
    start = rng.choice([0, rng.randrange(n), n - 1 - rng.randrange(min(n, 50))])
    to_find = rng.choice([1, 5, 100, n // 20 or 1, n])
    found, processed, failed = walk(ok, start, to_find)
    assert select.feasible_scan(ok, start, to_find) == (found, processed, failed)
    got, p2, f2 = select.feasible_scan_array(ok, start, to_find, failures=False)
    assert (got.tolist(), p2) == (found, processed)
    assert f2 == ([] if found else failed)


def _pods(task_count: int, seed: int):
    rng = random.Random(seed)
    shape = cl.NodeShape(pods=rng.choice([1, 2, 3]))
    node_specs = cl.nodes(rng.choice([6, 30, 60]), shape)
    specs, tasks = [], []
    for j in range(task_count):
        job, ts = cl.gang_job(f"j{j:04d}", 1, cl.TaskShape(cpu="100m", memory="1Mi"))
        specs.append(job)
        tasks.extend(ts)
    cache = cl.new_cache(node_specs, specs, tasks)
    return rng, open_session(cache.snapshot(), load_config(DEFAULT_CONFIG), seed=seed)


@pytest.mark.parametrize("seed", range(10))
def test_kept_filter_follows_pods_to_the_limit(seed, monkeypatch):
    monkeypatch.setattr(predicates, "KEEP_FROM", 0)  # kept on small clusters too, to be checked here
    rng, ssn = _pods(200, seed)
    arrays = ssn.arrays
    [(name, fn, twin)] = ssn.hooks.with_twins(points.PREDICATE)
    pending = [t for j in ssn.jobs.values() for t in j.tasks.values()]
    rng.shuffle(pending)
    full = 0
    for step, task in enumerate(pending):
        want = passes(fn, task, ssn.node_list)
        if step % 4:  # else not read: two tasks land between two reads (two rows logged)
            assert twin(task, arrays, arrays.all_rows).tolist() == want, (name, step)
        fitting = [n for n, w in zip(ssn.node_list, want) if w]
        if not fitting:
            full += 1
            continue
        Statement(ssn).allocate(task, rng.choice(fitting).name)
    assert full, "no node ever reached its pod limit: the refresh of a full node went untested"
