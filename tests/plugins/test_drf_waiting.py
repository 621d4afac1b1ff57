"""drf's first open shares one attr among the jobs holding only pending tasks (`_attrs_of`): the
table it builds against the reference (``bulk_open`` False: ``ssn.memo`` per job, each its own attr),
and a shared attr copied before it changes, on random clusters."""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest

from busched.api.objects import ClusterSpec
from busched.builtin import open_session
from busched.cache.cache import Cache
from busched.framework.config import parse_config
from busched.framework.statement import Statement
from busched.plugins.drf import DrfPlugin


def _cluster(seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    jobs, tasks = [], []
    for j in range(rng.randrange(5, 30)):
        jobs.append({"name": f"j{j}", "namespace": "ns", "queue": "q",
                     "phase": rng.choice(("Pending", "Inqueue", "Running"))})
        for k in range(rng.choice((1, 1, 2, 3))):
            t = {"name": f"j{j}-{k}", "namespace": "ns", "job": f"j{j}",
                 "requests": {"cpu": rng.choice(("1", "500m", "2")), "memory": rng.choice(("1Gi", "3Gi"))}}
            if rng.random() < 0.4:
                t.update(node="n1", phase=rng.choice(("Running", "Succeeded")))
            tasks.append(t)
    return {"queues": [{"name": "q"}],
            "nodes": [{"name": "n1", "allocatable": {"cpu": "64", "memory": "256Gi", "pods": 500}}],
            "jobs": jobs, "tasks": tasks}


def _open(spec: dict[str, Any], bulk: bool) -> Any:
    cache = Cache()
    cache.load(msgspec.convert(spec, ClusterSpec))
    DrfPlugin.bulk_open = bulk
    try:
        return open_session(cache.snapshot(), parse_config({"actions": "", "tiers": [{"plugins": [{"name": "drf"}]}]}))
    finally:
        DrfPlugin.bulk_open = True


def _table(ssn: Any) -> dict[str, Any]:
    return {u: (a.share, a.dominant, a.allocated.cpu, a.allocated.memory, dict(a.allocated.scalars))
            for u, a in ssn.plugins["drf"].job_attrs.items()}


@pytest.mark.parametrize("seed", range(15))
def test_first_open_matches_reference(seed: int) -> None:
    spec = _cluster(seed)
    fast, plain = _open(spec, True), _open(spec, False)
    assert _table(fast) == _table(plain)
    attrs = fast.plugins["drf"].job_attrs
    waiting = [u for u, j in fast.jobs.items() if all(t.status.name == "Pending" for t in j.tasks.values())
               and j.tasks]
    if len(waiting) > 1:  # (the shared path was taken)
        assert len({id(attrs[u]) for u in waiting}) == 1


@pytest.mark.parametrize("seed", range(15))
def test_shared_attr_copied_before_it_changes(seed: int) -> None:
    """A pending task allocated: its job's share moves, the other waiting jobs' stay as the reference's."""
    spec = _cluster(seed)
    fast, plain = _open(spec, True), _open(spec, False)
    rng = random.Random(seed)
    pending = [t for j in fast.jobs.values() for t in j.tasks.values() if t.status.name == "Pending"]
    for t in rng.sample(pending, min(3, len(pending))):
        for ssn in (fast, plain):
            Statement(ssn).allocate(ssn.jobs[t.job].tasks[t.uid], "n1")
        assert _table(fast) == _table(plain)
    if pending:
        assert any(s > 0 for s, *_ in _table(fast).values())
