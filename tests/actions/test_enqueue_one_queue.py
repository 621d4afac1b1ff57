"""enqueue with one queue holding every pending job takes that queue's jobs in order (`_one_queue`)
rather than going round the queues' heap for each job: against the loop (``one_queue`` False), the
same jobs admitted, in the same order, with the same votes, on random clusters (one to three
queues, minimum resources some queues cannot hold)."""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest

from busched.actions.enqueue import EnqueueAction
from busched.api.objects import ClusterSpec
from busched.builtin import open_session
from busched.cache.cache import Cache
from busched.framework.config import DEFAULT_CONFIG, load_config


def _cluster(seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    nq = rng.choice((1, 1, 2, 3))
    queues = [{"name": f"q{i}", "weight": rng.randrange(1, 4), "priority": rng.choice((0, 0, 1)),
               **({"capability": {"cpu": str(rng.randrange(2, 12)), "memory": "64Gi"}} if rng.random() < 0.5 else {})}
              for i in range(nq)]
    # most seeds: every pending job in one queue (the others hold running jobs only)
    pending_queues = [queues[0]["name"]] if rng.random() < 0.7 else [q["name"] for q in queues]
    jobs, tasks = [], []
    for j in range(rng.randrange(5, 40)):
        running = rng.random() < 0.3
        q = rng.choice([x["name"] for x in queues]) if running else rng.choice(pending_queues)
        job: dict[str, Any] = {"name": f"j{j}", "namespace": "ns", "queue": q, "minMember": 1,
                               "phase": "Running" if running else "Pending", "created": rng.randrange(5)}
        if rng.random() < 0.6:
            job["minResources"] = {"cpu": str(rng.randrange(1, 5)), "memory": "1Gi"}
        jobs.append(job)
        t: dict[str, Any] = {"name": f"j{j}-0", "namespace": "ns", "job": f"j{j}",
                             "requests": {"cpu": str(rng.randrange(1, 4)), "memory": "1Gi"}}
        if running:
            t.update(node="n0", phase="Running")
        tasks.append(t)
    return {"queues": queues, "nodes": [{"name": "n0", "allocatable": {"cpu": "16", "memory": "64Gi", "pods": 110}}],
            "jobs": jobs, "tasks": tasks}


def _enqueue(spec: dict[str, Any], one: bool) -> tuple[list[str], dict[str, str]]:
    cache = Cache()
    cache.load(msgspec.convert(spec, ClusterSpec))
    ssn = open_session(cache.snapshot(), load_config(DEFAULT_CONFIG))
    told: list[str] = []
    enqueued = ssn.job_enqueued

    def record(job: Any) -> None:
        told.append(job.uid)
        enqueued(job)

    ssn.job_enqueued = record  # type: ignore[method-assign]
    action = EnqueueAction()
    action.one_queue = one
    action.execute(ssn)
    return told, {u: j.phase for u, j in ssn.jobs.items()}


@pytest.mark.parametrize("seed", range(40))
def test_one_queue_matches_the_round(seed: int) -> None:
    spec = _cluster(seed)
    fast = _enqueue(spec, True)
    assert fast == _enqueue(spec, False)


def test_the_clusters_exercise_it() -> None:
    """Across the seeds: jobs admitted and jobs refused, in one queue and in several."""
    admitted = refused = 0
    for seed in range(40):
        told, phases = _enqueue(_cluster(seed), True)
        admitted += len(told)
        refused += sum(1 for p in phases.values() if p == "Pending")
    assert admitted > 50 and refused > 10
