"""Node selection with the array kernels decides exactly as the per-node reference loops.

Whole cycles on random clusters run twice, the kernels (busched.fastpath) on and
off: the decisions (in order), pipelined tasks, podgroup phases and fit errors
must be identical.  Then the pieces one by one: feasible nodes with their errors,
node scores, the chosen node.
"""

from __future__ import annotations

import random

import pytest

from busched.api.task import TaskStatus
from busched.builtin import open_session, run_cycle
from busched.fastpath import FastPath, FastPathSettings, batch, select
from busched.framework.config import DEFAULT_CONFIG, load_config
from busched.framework.nodeselect import PredicateHelper, choose_node, gradients, prioritize_nodes
from tests.kernel_cases import cache_of, random_cluster

CONFIGS = {
    "default": DEFAULT_CONFIG,
    "binpack-weighted": DEFAULT_CONFIG.replace("  - name: binpack\n", """  - name: binpack
    arguments:
      binpack.weight: 5
      binpack.cpu: 2
      binpack.resources: nvidia.com/gpu
      binpack.resources.nvidia.com/gpu: 3
"""),
    "mostrequested": DEFAULT_CONFIG.replace("  - name: nodeorder\n", """  - name: nodeorder
    arguments:
      mostrequested.weight: 2
      leastrequested.weight: 0
      balancedresource.weight: 3
""") + "configurations:\n- name: allocate\n  arguments: {predicateErrorCacheEnable: false}\n",
}


def outcome(ssn) -> dict:
    return {
        "decisions": [(d.kind, d.task, d.node, d.reason) for d in ssn.decisions],
        "phases": {uid: j.phase for uid, j in sorted(ssn.jobs.items())},
        "pipelined": sorted((t.key, t.node_name) for j in ssn.jobs.values() for t in j.tasks_in(TaskStatus.Pipelined)),
        "fit_errors": {uid: {t: str(fe) for t, fe in sorted(j.nodes_fit_errors.items())}
                       for uid, j in sorted(ssn.jobs.items())},
        "conditions": {uid: [dict(c) for c in j.conditions] for uid, j in sorted(ssn.jobs.items())},
        "last_node_index": ssn.last_node_index,
    }


def counting(monkeypatch, name: str, counts: dict, module=select) -> None:
    """Count the calls of ``<module>.<name>`` that answered (not None): the fast path really ran."""
    real = getattr(module, name)

    def wrapped(*a, **kw):
        r = real(*a, **kw)
        if r is not None:
            counts[name] = counts.get(name, 0) + 1
        return r

    monkeypatch.setattr(module, name, wrapped)


def run_both(monkeypatch, spec, config_text: str, seed: int) -> tuple[dict, dict]:
    cfg = load_config(config_text)
    out = []
    counts: dict[str, int] = {}
    counting(monkeypatch, "scan", counts)
    counting(monkeypatch, "scores", counts)
    counting(monkeypatch, "choose", counts, batch)  # a run of one template: scored from kept vectors
    for fast in (True, False):
        ssn = run_cycle(cache_of(spec, FastPathSettings(kernels=fast)).snapshot(), cfg, seed=seed)
        out.append(outcome(ssn))
    if any(d[0] == "bind" for d in out[1]["decisions"]):
        assert (counts.get("scan") and counts.get("scores")) or counts.get("choose"), "the fast path never answered"
    return out[0], out[1]


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("seed", range(12))
def test_cycle_decisions_match_reference(monkeypatch, config, seed):
    rng = random.Random(seed * 7919 + len(config))
    spec = random_cluster(rng)
    fast, ref = run_both(monkeypatch, spec, CONFIGS[config], seed)
    assert fast == ref


@pytest.mark.parametrize("seed", range(4))
def test_sampled_search_on_a_large_cluster(monkeypatch, seed):
    """Over 100 nodes the search stops early and rotates its start: both paths must agree."""
    rng = random.Random(1000 + seed)
    spec = random_cluster(rng, nodes=320, jobs=60, fancy=seed % 2 == 0)
    fast, ref = run_both(monkeypatch, spec, DEFAULT_CONFIG, seed)
    assert fast["decisions"] and fast == ref


def pending_tasks(ssn):
    return [t for j in ssn.jobs.values() for t in j.tasks.values() if t.status == TaskStatus.Pending]


@pytest.mark.parametrize("seed", range(15))
def test_pieces_match_reference(monkeypatch, seed):
    rng = random.Random(500 + seed)
    spec = random_cluster(rng, nodes=rng.choice([5, 60, 180]))
    cache = cache_of(spec)
    ssn = open_session(cache.snapshot(), load_config(DEFAULT_CONFIG), seed=seed)
    tasks = pending_tasks(ssn)
    rng.shuffle(tasks)
    for task in tasks[:8]:
        k = rng.randint(1, len(ssn.node_list))
        subset = rng.sample(ssn.node_list, k) if rng.random() < 0.5 else ssn.node_list
        got = {}
        for fast in (True, False):
            ssn.fast = FastPath(FastPathSettings()) if fast else None
            ssn.last_node_index = 37
            helper = PredicateHelper(ssn, True)
            found, fe = helper.predicate_nodes(task, subset, ssn.predicate_for_allocate, resource_fit=task.init_resreq)
            scores = prioritize_nodes(ssn, task, subset)
            state = ssn.rng.getstate()
            best = choose_node(ssn, task, subset)
            ssn.rng.setstate(state)
            grads = gradients(ssn, task, list(found))
            got[fast] = ([n.name for n in found], {n: str(e) for n, e in fe.nodes.items()}, ssn.last_node_index,
                         {s: [n.name for n in ns] for s, ns in scores.items()}, best.name if best else None,
                         [[n.name for n in g] for g in grads])
        assert got[True] == got[False]
