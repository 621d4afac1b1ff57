"""Allocate's choice from vectors kept per template (busched.fastpath.batch) against the per-task path.

Whole cycles on random clusters (with replicas of one template: gangs of up to 40, single-task
jobs of one shape, some templates the kept vectors decline) run twice with the kernels on: once
as allocate runs them, once with the kept-vector choice turned off, so every task takes the
per-task search, bucketing, scoring and draw.  Every decision (in order, on the same node), the
pipelined tasks, the podgroup phases, the fit errors, the rotated search start and the state of
the session's random source after the cycle must be identical; and the kept vectors must really
have answered.  Then the kept vectors themselves, after placements and a discard, against the
twins computed afresh.
"""

from __future__ import annotations

import random

import msgspec
import numpy as np
import pytest

from busched.api import objects as o
from busched.api.resource import GPU
from busched.builtin import open_session, run_cycle
from busched.fastpath import FastPathSettings, batch, rowlocal
from busched.fastpath import nodeorder as nodeorder_kernel
from busched.fastpath.fit import FUTURE_IDLE, IDLE, fit_mask
from busched.framework.config import DEFAULT_CONFIG, load_config
from busched.framework.statement import Statement
from tests.fastpath.test_kernels_select import CONFIGS, outcome
from tests.kernel_cases import cache_of, random_cluster


def with_replicas(rng: random.Random, spec: o.ClusterSpec, sized: bool) -> o.ClusterSpec:
    """``spec`` plus jobs of many replicas of one template (gangs, or single-task jobs of one shape)."""
    jobs, tasks = list(spec.jobs), list(spec.tasks)
    for j in range(rng.randint(2, 5)):
        name = f"rep{j}"
        size = rng.choice([12, 25, 40]) if sized else 1
        req = {"cpu": rng.choice(["500m", "1", "3"]), "memory": rng.choice(["1Gi", "4Gi"])}
        copies = 1 if sized else rng.randint(10, 30)
        for c in range(copies):
            job = f"{name}-{c}"
            jobs.append(o.JobSpec(name=job, namespace="ns", queue=rng.choice(["q1", "q2"]),
                                  min_member=rng.randint(1, size), phase="Inqueue"))
            for t in range(size):
                tasks.append(o.TaskSpec(name=f"{job}-{t}", namespace="ns", job=job, requests=dict(req)))
    return msgspec.structs.replace(spec, jobs=jobs, tasks=tasks)


def run(spec: o.ClusterSpec, config: str, seed: int, kept: bool, monkeypatch, counts: dict) -> dict:
    real = batch.choose

    def choose(*a, **kw):
        if not kept:
            return None  # the per-task path for every task
        got = real(*a, **kw)
        counts["answered" if got is not None else "declined"] += 1
        return got

    monkeypatch.setattr(batch, "choose", choose)  # FastPath looks it up as a session opens
    ssn = run_cycle(cache_of(spec, FastPathSettings(kernels=True)).snapshot(), load_config(config), seed=seed)
    got = outcome(ssn)
    got["rng"] = ssn.rng.random()  # the same draws were made
    return got


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("seed", range(6))
def test_kept_vectors_choose_as_the_per_task_path(monkeypatch, config, seed):
    rng = random.Random(9100 + seed)
    spec = with_replicas(rng, random_cluster(rng, nodes=rng.choice([8, 60, 150, 320]), fancy=seed % 3 != 2),
                         sized=seed % 2 == 0)
    counts = {"answered": 0, "declined": 0}
    fast = run(spec, CONFIGS[config], seed, True, monkeypatch, counts)
    plain = run(spec, CONFIGS[config], seed, False, monkeypatch, counts)
    assert fast["decisions"], "nothing placed: the comparison would be empty"
    assert fast == plain
    assert counts["answered"] > 10  # the kept vectors really chose


def with_shaped_replicas(rng: random.Random, spec: o.ClusterSpec, sized: bool) -> o.ClusterSpec:
    """``spec``'s taints made NoSchedule (a PreferNoSchedule taint a task does not tolerate makes
    nodeorder's declaration decline the template, so the kept vectors would hardly answer) plus
    replicas whose template reads more than requests: node selectors, tolerations (the cordon's
    among them), images and GPUs."""
    nodes = [msgspec.structs.replace(n, taints=[dict(t, effect="NoSchedule") for t in n.taints])
             for n in spec.nodes]
    jobs, tasks = list(spec.jobs), list(spec.tasks)
    # one request for every template: they differ only in what else they read, so a template key that
    # left one of those fields out would lend one template's vectors to another
    req: dict[str, object] = {"cpu": rng.choice(["500m", "1", "3"]), "memory": rng.choice(["1Gi", "4Gi"])}
    if rng.random() < 0.3:
        req[GPU] = rng.choice([1, 2])
    sel: dict[str, str] = {}
    tol: list[dict[str, str]] = []
    images: list[str] = []
    for j in range(rng.randint(4, 7)):
        size = rng.choice([6, 12, 25])
        # every other template is its predecessor with one field changed (selector, tolerations or images)
        change = "all" if j % 2 == 0 else ("sel", "tol", "images")[(j // 2) % 3]
        if change in ("all", "sel"):
            sel = {"zone": rng.choice(["a", "b"])} if not sel or rng.random() < 0.5 else {}
        if change in ("all", "tol"):
            tol = [] if tol else [{"key": "dedicated", "operator": "Exists"}]
            if rng.random() < 0.3:
                tol.append({"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"})
        if change in ("all", "images"):
            images = [] if images else [rng.choice(["busybox:latest", "train:v1"])]
        for c in range(1 if sized else rng.randint(3, 8)):
            job = f"rep{j}-{c}"
            jobs.append(o.JobSpec(name=job, namespace="ns", queue=rng.choice(["q1", "q2"]),
                                  min_member=rng.randint(1, size), phase="Inqueue"))
            for t in range(size if sized else rng.randint(1, 3)):
                tasks.append(o.TaskSpec(name=f"{job}-{t}", namespace="ns", job=job, requests=dict(req),
                                        node_selector=dict(sel), tolerations=list(tol), images=list(images)))
    return msgspec.structs.replace(spec, nodes=nodes, jobs=jobs, tasks=tasks)


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("seed", range(4))
def test_kept_vectors_choose_as_the_per_task_path_for_shaped_templates(monkeypatch, config, seed):
    """Selectors, tolerations, images and GPUs on tainted and cordoned nodes, through the kept vectors."""
    rng = random.Random(5000 + seed)
    spec = with_shaped_replicas(rng, random_cluster(rng, nodes=[8, 40, 150, 320][seed], fancy=True),
                                sized=seed % 2 == 1)
    counts = {"answered": 0, "declined": 0}
    fast = run(spec, CONFIGS[config], seed, True, monkeypatch, counts)
    plain = run(spec, CONFIGS[config], seed, False, monkeypatch, counts)
    assert fast["decisions"], "nothing placed: the comparison would be empty"
    assert fast == plain
    assert counts["answered"] > 10  # the kept vectors really chose, for these templates too


def test_tasks_differing_in_any_field_a_twin_reads_are_not_one_template():
    """The template key: two tasks equal but for one field a declared twin reads never share kept vectors."""
    rng = random.Random(3)
    spec = with_shaped_replicas(rng, random_cluster(rng, nodes=8, fancy=True), sized=True)
    ssn = open_session(cache_of(spec, FastPathSettings(kernels=True)).snapshot(), load_config(DEFAULT_CONFIG))
    base = next(t for j in ssn.jobs.values() for t in j.tasks.values())
    other = {"namespace": "elsewhere", "labels": {"x": "1"}, "annotations": {"x": "1"},
             "node_selector": {"zone": "c"}, "affinity": {"nodeAffinity": {}},
             "tolerations": [{"key": "k", "operator": "Exists"}], "topology_spread_constraints": [{"maxSkew": 1}],
             "host_ports": [8080], "images": ["other:v2"], "extra": {"x": 1}, "best_effort": not base.best_effort,
             "qos": "Guaranteed" if base.qos != "Guaranteed" else "BestEffort"}
    assert set(other) == set(rowlocal._FIELDS)
    assert rowlocal.same_template(base, base.clone())
    for name, value in other.items():
        t = base.clone()
        setattr(t, name, value)
        assert not rowlocal.same_template(base, t), name
    t = base.clone()
    t.resreq = t.resreq.clone()
    t.resreq.cpu += 1
    assert not rowlocal.same_template(base, t)


def test_kept_vectors_follow_placements_and_discards():
    rng = random.Random(5)
    spec = with_replicas(rng, random_cluster(rng, nodes=40, jobs=3, fancy=False), sized=True)
    ssn = open_session(cache_of(spec).snapshot(), load_config(DEFAULT_CONFIG), seed=0)
    pending = [t for j in ssn.jobs.values() for t in j.tasks.values()
               if t.status.name == "Pending" and t.job.startswith("ns/rep")]
    template = pending[0]
    same = [t for t in pending if rowlocal.same_template(template, t)]
    assert len(same) >= 10
    nodes, fn = ssn.node_list, ssn.predicate_for_allocate
    stmt = Statement(ssn)
    placed = 0
    for task in same[:8]:
        got = batch.choose(ssn, task, nodes, fn, 0, len(nodes))
        if got is None:
            break
        stmt.allocate(task, got[0].name)
        placed += 1
    assert placed
    stmt.discard()  # every row placed on is logged again: the kept vectors follow
    batch.choose(ssn, same[8], nodes, fn, 0, len(nodes))
    kept = ssn.arrays.cache["batch-choice"][0]
    rows = ssn.arrays.all_rows
    for part in kept.preds + kept.orders:
        assert np.array_equal(part.vec, part.twin(template, ssn.arrays, rows))
    for part in kept.batches:
        assert np.array_equal(part.vec, part.twin(template, ssn.arrays, rows, nodes))
    assert np.array_equal(kept.future.vec, fit_mask(ssn.arrays, template.init_resreq, FUTURE_IDLE))
    assert np.array_equal(kept.idle.vec, fit_mask(ssn.arrays, template.init_resreq, IDLE))


def test_a_template_with_pod_affinity_is_declined():
    rng = random.Random(3)
    spec = random_cluster(rng, nodes=8, jobs=2, fancy=False)
    ssn = open_session(cache_of(spec).snapshot(), load_config(DEFAULT_CONFIG), seed=0)
    task = next(t for j in ssn.jobs.values() for t in j.tasks.values() if t.status.name == "Pending")
    task.affinity = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    assert batch.choose(ssn, task, ssn.node_list, ssn.predicate_for_allocate, 0, len(ssn.node_list)) is None


def test_a_declaration_that_raises_leaves_the_choice_to_the_per_task_path(monkeypatch):
    rng = random.Random(21)
    spec = with_replicas(rng, random_cluster(rng, nodes=30, jobs=4, fancy=False), sized=True)
    counts = {"answered": 0, "declined": 0}
    plain = run(spec, DEFAULT_CONFIG, 1, False, monkeypatch, counts)

    def broken(*a, **kw):
        raise RuntimeError("boom")

    monkeypatch.setattr(nodeorder_kernel, "batch_node_order_local", broken)
    fast = run(spec, DEFAULT_CONFIG, 1, True, monkeypatch, counts)
    assert fast["decisions"] and fast == plain
    assert counts["declined"] and not counts["answered"]


def test_templates_used_once_each_stop_being_built(monkeypatch):
    monkeypatch.setattr(batch, "TRIAL", 3)
    rng = random.Random(8)
    spec = with_replicas(rng, random_cluster(rng, nodes=20, jobs=1, fancy=False), sized=True)
    ssn = open_session(cache_of(spec).snapshot(), load_config(DEFAULT_CONFIG), seed=0)
    tasks = [t for j in ssn.jobs.values() for t in j.tasks.values()
             if t.status.name == "Pending" and t.job.startswith("ns/rep")][:6]
    nodes, fn = ssn.node_list, ssn.predicate_for_allocate
    for i, task in enumerate(tasks):
        task.labels = {"pod": str(i)}  # every task its own template
    got = [batch.choose(ssn, t, nodes, fn, 0, len(nodes)) for t in tasks]
    assert all(g is not None for g in got[:3]) and all(g is None for g in got[3:])
    assert ssn.arrays.cache["batch-choice"].built == 3
