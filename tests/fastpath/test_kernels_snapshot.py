"""Shared snapshots (busched.fastpath.lending) give what converting every object again gives.

Random clusters go through rounds of changes (tasks bound, deleted, added;
nodes changed; priority classes changed) with a full cycle run on each shared
snapshot in between (sessions change the objects they get); after every
round the shared snapshot must equal the freshly converted one, field by
field, and the cycles must decide the same.
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


def task_state(t) -> dict:
    d = {k: getattr(t, k) for k in type(t).__slots__}
    d["resreq"] = t.resreq.to_dict()
    d["init_resreq"] = t.init_resreq.to_dict()
    return d


def node_state(n) -> dict:
    d = {k: v for k, v in n.__dict__.items() if k not in ("listeners", "tasks", "written", "derived")}
    for f in ("allocatable", "capacity", "idle", "used", "releasing", "pipelined"):
        d[f] = getattr(n, f).to_dict()
    d["tasks"] = {uid: task_state(t) for uid, t in n.tasks.items()}
    return d


def snap_state(snap) -> dict:
    return {
        "nodes": [node_state(n) for n in snap.nodes],
        "jobs": {uid: ({k: getattr(j, k) for k in type(j).__slots__ if k not in ("tasks", "status_index", "allocated",
                                                                       "total_request", "min_resources", "sub_jobs",
                                                                       "task_to_sub_job", "written", "derived")},
                       {uid2: task_state(t) for uid2, t in j.tasks.items()}, j.allocated.to_dict(),
                       j.total_request.to_dict())
                 for uid, j in snap.jobs.items()},
    }


def mutate(rng: random.Random, cache) -> None:
    tasks = list(cache.objects["task"].values())
    nodes = list(cache.objects["node"].values())
    for spec in rng.sample(tasks, min(len(tasks), rng.randint(0, 6))):
        what = rng.random()
        key = f"{spec.namespace}/{spec.name}"
        if what < 0.35 and nodes:
            cache.upsert("task", msgspec.structs.replace(spec, node=rng.choice(nodes).name, phase="Running"))
        elif what < 0.55:
            cache.delete("task", key)
        elif what < 0.7:
            cache.upsert("task", msgspec.structs.replace(spec, deleting=True))
        else:
            cache.upsert("task", msgspec.structs.replace(spec, requests={"cpu": "250m", "memory": "1Gi"}))
    if nodes and rng.random() < 0.5:
        n = rng.choice(nodes)
        cache.upsert("node", msgspec.structs.replace(n, labels={**n.labels, "zone": "z"},
                                                     ready=rng.random() < 0.8))
    if rng.random() < 0.3:
        cache.upsert("priorityClass", o.PriorityClassSpec(name="high", value=rng.choice([500, 2000])))
    if rng.random() < 0.2:  # a global default gives jobs without a class its value
        cache.upsert("priorityClass", o.PriorityClassSpec(name="dflt", value=rng.choice([0, 7]),
                                                         global_default=rng.random() < 0.7))
    if rng.random() < 0.3 and nodes:
        cache.upsert("task", o.TaskSpec(name=f"late-{rng.random():.6f}", namespace="ns", job="job0",
                                        node=rng.choice(nodes).name, phase="Running", requests={"cpu": "1"}))


# the default actions, and evicting ones (sessions write settled jobs and their nodes there)
EVICTING = DEFAULT_CONFIG.replace('actions: "enqueue, allocate, backfill"',
                                  'actions: "enqueue, allocate, preempt, reclaim, backfill"').replace(
    "enablePreemptable: false", "enablePreemptable: true")


@pytest.mark.parametrize("config", [DEFAULT_CONFIG, EVICTING], ids=["default", "evicting"])
@pytest.mark.parametrize("seed", range(10))
def test_shared_snapshot_equals_fresh(seed, config, monkeypatch):
    rng = random.Random(seed)
    cache = cache_of(random_cluster(rng, nodes=rng.choice([4, 30, 120])), FastPathSettings(verify=True))
    cfg = load_config(config)
    assert "preempt" in cfg.actions or config is DEFAULT_CONFIG
    for rnd in range(5):
        shared, fresh = cache.snapshot(memo=True), cache.snapshot(memo=False)
        assert snap_state(shared) == snap_state(fresh), f"round {rnd}"
        a = run_cycle(shared, cfg, seed=seed, uid=f"c{rnd}")
        b = run_cycle(fresh, cfg, seed=seed, uid=f"c{rnd}")
        assert [(d.kind, d.task, d.node) for d in a.decisions] == [(d.kind, d.task, d.node) for d in b.decisions]
        mutate(rng, cache)
