"""Jobs remembered as unfit (busched.fastpath.unfit) are skipped without changing any decision.

A crowded random cluster runs many cycles through its cache, binds and
evictions written back and random events in between (tasks finishing, new
jobs, nodes changing, nothing at all).  The same run with the kernels off
(every job tried every cycle) must give the same decisions, podgroup phases
and conditions, cycle by cycle; and the memo must have skipped some turns.
"""

from __future__ import annotations

import random

import msgspec
import pytest

from busched.api import objects as o
from busched.builtin import run_cycle
from busched.fastpath import FastPathSettings
from busched.framework.config import DEFAULT_CONFIG, load_config
from tests.kernel_cases import cache_of, random_cluster

PREEMPT = DEFAULT_CONFIG.replace('"enqueue, allocate, backfill"', '"enqueue, allocate, preempt, backfill"')


def write_back(cache, ssn) -> None:
    tasks = cache.objects["task"]
    for d in ssn.decisions:
        spec = tasks.get(d.task)
        if spec is None:
            continue
        if d.kind == "bind":
            cache.upsert("task", msgspec.structs.replace(spec, node=d.node, phase="Running"))
        else:
            cache.delete("task", d.task)
    # podgroup status, as the scheduler writes it: only when the phase or a condition (its transition
    # id aside) changed
    def key(conds):
        return [(c.get("type"), c.get("status"), c.get("reason"), c.get("message")) for c in conds]

    for uid, job in ssn.jobs.items():
        spec = cache.objects["job"].get(uid)
        if spec is not None and (spec.phase != job.phase or key(spec.conditions) != key(job.conditions)):
            cache.upsert("job", msgspec.structs.replace(spec, phase=job.phase, conditions=job.conditions))


def events(rng: random.Random, cache, step: int) -> None:
    what = rng.random()
    tasks = [t for t in cache.objects["task"].values() if t.node]
    if what < 0.4:
        return  # nothing happens: the unfit jobs stay unfit
    if what < 0.6 and tasks:
        t = rng.choice(tasks)
        cache.delete("task", f"{t.namespace}/{t.name}")  # a task finishes: room for someone
    elif what < 0.8:
        name = f"late{step}"
        cache.upsert("job", o.JobSpec(name=name, namespace="ns", queue="q1", min_member=1))
        cache.upsert("task", o.TaskSpec(name=f"{name}-0", namespace="ns", job=name,
                                        requests={"cpu": rng.choice(["1", "6"]), "memory": "1Gi"}))
    else:
        nodes = list(cache.objects["node"].values())
        n = rng.choice(nodes)
        cache.upsert("node", msgspec.structs.replace(n, labels={**n.labels, "step": str(step)}))


def run(monkeypatch, seed: int, fast: bool, config: str) -> tuple[list, int]:
    rng = random.Random(seed)
    cache = cache_of(random_cluster(rng, nodes=rng.choice([6, 30, 140]), jobs=rng.randint(20, 45)),
                     FastPathSettings(kernels=fast))
    cfg = load_config(config)
    out = []
    for step in range(8):
        ssn = run_cycle(cache.snapshot(), cfg, seed=seed, uid=f"c{step}")
        out.append(([(d.kind, d.task, d.node, d.reason) for d in ssn.decisions],
                    {uid: (j.phase, [dict(c) for c in j.conditions]) for uid, j in sorted(ssn.jobs.items())}))
        write_back(cache, ssn)
        events(rng, cache, step)
    return out, cache.unfit.skipped


@pytest.mark.parametrize("config", [DEFAULT_CONFIG, PREEMPT], ids=["default", "preempt"])
@pytest.mark.parametrize("seed", range(10))
def test_unfit_memo_changes_no_decision(monkeypatch, seed, config):
    fast, skipped = run(monkeypatch, seed, True, config)
    ref, _ = run(monkeypatch, seed, False, config)
    for step, (a, b) in enumerate(zip(fast, ref)):
        assert a == b, f"cycle {step}"
    pytest.skipped_total = getattr(pytest, "skipped_total", 0) + skipped


def test_the_memo_is_used(monkeypatch):
    total = sum(run(monkeypatch, seed, True, DEFAULT_CONFIG)[1] for seed in range(10))
    assert total > 0
