"""busched-agent-feedback's batch twin (`fastpath.predicates.refused_mask`) answers as its per-node predicate,
and a cycle with refusals takes the fast path (masks), deciding what the plain walk decides.

Without the twin, one refusal anywhere sent every task of the session to the node-by-node search."""

from __future__ import annotations

import random

import pytest

from busched.builtin import PLUGINS, open_session
from busched.fastpath import FastPathSettings
from busched.framework import points
from busched.framework.config import DEFAULT_CONFIG, load_config
from busched.plugins.refused_nodes import NAME, RefusedNodesPlugin
from busched.scheduler.records import FEEDBACK_PLUGIN, with_refusals
from tests.fastpath.test_kernels_select import counting, outcome
from tests.fastpath.test_kernels_twins import land_some, pending
from tests.kernel_cases import cache_of, passes, random_cluster

REGISTRY = PLUGINS if FEEDBACK_PLUGIN in PLUGINS else PLUGINS.with_entries({FEEDBACK_PLUGIN: RefusedNodesPlugin})


def refusals(rng: random.Random, snapshot) -> dict[str, frozenset[str]]:
    """Some tasks refused by some nodes (and by a node the cluster no longer has)."""
    def values(x):  # noqa: ANN001, ANN202 - a lent snapshot holds lists, a plain one dicts
        return list(x.values()) if isinstance(x, dict) else list(x)

    names = sorted(n.name for n in values(snapshot.nodes))
    tasks = sorted(t.key for j in values(snapshot.jobs) for t in j.tasks.values())
    out = {}
    for key in rng.sample(tasks, max(1, len(tasks) // 3)):
        out[key] = frozenset(rng.sample(names, rng.randint(1, max(1, len(names) // 2))) + ["gone-node"])
    return out


def snapshot_with_refusals(seed: int, fast: bool = True):
    rng = random.Random(seed)
    spec = random_cluster(rng, nodes=rng.choice([5, 40, 120]))
    snap = cache_of(spec, FastPathSettings(kernels=fast)).snapshot()
    snap.refused = refusals(rng, snap)
    return rng, snap


@pytest.mark.parametrize("seed", range(10))
def test_the_twin_answers_as_the_predicate(seed):
    rng, snap = snapshot_with_refusals(seed)
    ssn = open_session(snap, with_refusals(load_config(DEFAULT_CONFIG)), REGISTRY, seed=seed)
    found = [(fn, twin) for name, fn, twin in ssn.hooks.with_twins(points.PREDICATE) if name == NAME]
    assert len(found) == 1 and found[0][1] is not None, "the feedback predicate registered with its twin"
    fn, twin = found[0]
    arrays = ssn.arrays
    refused_seen = 0
    for _ in range(3):
        for task in pending(ssn):
            mask = twin(task, arrays, arrays.all_rows)
            assert mask.tolist() == passes(fn, task, ssn.node_list), task.key
            refused_seen += not mask.all()
            # a subset of rows, in another order: row by row the same answer
            rows = arrays.all_rows[::-1][: max(1, len(arrays.all_rows) // 2)].copy()
            want = [passes(fn, task, [ssn.node_list[r]])[0] for r in rows]
            assert twin(task, arrays, rows).tolist() == want, task.key
        land_some(rng, ssn)
    assert refused_seen, "some task was refused somewhere (the test would prove nothing)"
    # every predicate plugin has a twin now: the session's masks answer for the allocate predicate
    assert ssn.predicate_twins(ssn.predicate_for_allocate) is not None


@pytest.mark.parametrize("seed", range(10))
def test_a_cycle_with_refusals_takes_the_fast_path_and_decides_as_the_walk(monkeypatch, seed):
    from busched.builtin import run_cycle

    cfg = with_refusals(load_config(DEFAULT_CONFIG))
    counts: dict[str, int] = {}
    counting(monkeypatch, "scan", counts)  # the masks' scan: the fast path answered
    out = []
    for fast in (True, False):
        _, snap = snapshot_with_refusals(seed, fast)
        out.append(outcome(run_cycle(snap, cfg, plugins=REGISTRY, seed=seed)))
    assert out[0] == out[1]
    if any(d[0] == "bind" for d in out[0]["decisions"]):
        assert counts.get("scan"), "the fast path never answered"
