"""Per-node values carried from session to session (`NodeArrays.carried`: nodeorder's taint counts,
the predicates pod view's max tasks and allocatable columns) equal a fresh session's, cycle after
cycle over one cache, as one node's taints or allocatable change between cycles."""

from __future__ import annotations

import random

import msgspec
import pytest

from busched.api import objects as o
from busched.bench.driver import apply_decisions
from busched.builtin import run_cycle
from busched.framework.config import DEFAULT_CONFIG, load_config
from tests.kernel_cases import cache_of, random_cluster

PREFER = {"key": "dedicated", "value": "x", "effect": "PreferNoSchedule"}
OTHER = {"key": "spot", "value": "y", "effect": "PreferNoSchedule"}


def _change_one_node(rng: random.Random, cache) -> None:
    n = rng.choice(list(cache.objects["node"].values()))
    if rng.random() < 0.5:
        taints = rng.choice([[], [PREFER], [OTHER], [PREFER, OTHER]])
        cache.upsert("node", msgspec.structs.replace(n, taints=taints))
    else:
        alloc = {**n.allocatable, "cpu": rng.choice(["2", "4", "12"]), "memory": rng.choice(["6Gi", "48Gi"]),
                 "pods": rng.choice([3, 20, 110])}
        cache.upsert("node", msgspec.structs.replace(n, allocatable=alloc))


def _carried(ssn) -> dict:
    arrays = ssn.arrays
    names = [n.name for n in arrays.nodes]
    return {key: dict(zip(names, values.tolist())) for key, (values, _) in arrays.carry.items()}


def _arrive(cache, rnd: int) -> None:
    """One single-task job arrives (scored against every node, it is placed: one node written)."""
    cache.upsert("job", o.JobSpec(name=f"new{rnd}", namespace="ns", queue="q1", min_member=1, phase="Inqueue"))
    tolerations = [{"key": "spot", "operator": "Exists"}] if rnd % 2 else []  # counts that depend on the taint
    cache.upsert("task", o.TaskSpec(name=f"new{rnd}-0", namespace="ns", job=f"new{rnd}",
                                    requests={"cpu": "100m", "memory": "128Mi"}, tolerations=tolerations))


@pytest.mark.parametrize("seed", range(4))
def test_carried_values_equal_a_fresh_sessions(seed: int) -> None:
    rng = random.Random(seed)
    spec = random_cluster(rng, nodes=40, jobs=6)
    # a running pod on every node: a node's first pod adds a resource name to its row, and a row
    # with other names is not carried (the arrays are built afresh)
    spec.jobs.append(o.JobSpec(name="base", namespace="ns", queue="q1", min_member=1, phase="Running"))
    spec.tasks.extend(o.TaskSpec(name=f"base-{n.name}", namespace="ns", job="base", node=n.name, phase="Running",
                                 requests={"cpu": "100m", "memory": "128Mi"}) for n in spec.nodes)
    cache = cache_of(spec)
    cfg = load_config(DEFAULT_CONFIG)
    apply_decisions(cache, run_cycle(cache.snapshot(), cfg, seed=seed, uid="c"))  # the cluster settles
    seeded = 0
    for rnd in range(8):
        _change_one_node(rng, cache)
        _arrive(cache, rnd)
        fresh_snap = cache.snapshot(memo=False)
        fresh_snap.others["plugin_state"] = {}  # nothing carried into it (nor out of it)
        fresh = run_cycle(fresh_snap, cfg, seed=seed, uid=f"c{rnd}")
        kept = run_cycle(cache.snapshot(), cfg, seed=seed, uid=f"c{rnd}")
        got, want = _carried(kept), _carried(fresh)
        assert got.keys() == want.keys()
        assert any(k[0] == "taints" for k in got if isinstance(k, tuple)) and "podview.max_tasks" in got
        for key in got:
            assert got[key] == want[key], (rnd, key)
        seeded += kept.arrays._old_carry is not None and bool(kept.arrays._changed)
        apply_decisions(cache, kept)
    assert seeded >= 6  # the values were carried over changed rows, not only built afresh
