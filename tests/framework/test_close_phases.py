"""Close's per-job work for the jobs that are not steady: gang hands a ready job with no condition
but (maybe) Scheduled the list it gives the quiet jobs (``GangPlugin.shared_scheduled``), and
`close_phases` looks at each conditions list once (``phase.PLAIN_OTHERS`` False).  Against the
references (each job a list of its own; each job's conditions looked at), cycle after cycle on random
clusters: the same conditions and phases for every job."""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest

from busched.actions import ACTIONS
from busched.api.objects import ClusterSpec
from busched.bench.driver import apply_decisions
from busched.builtin import close_session, open_session
from busched.cache.cache import Cache
from busched.framework import phase
from busched.framework.config import DEFAULT_CONFIG, load_config
from busched.plugins.gang import GangPlugin


def _cluster(seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    jobs, tasks = [], []
    for j in range(rng.randrange(10, 40)):
        job: dict[str, Any] = {"name": f"j{j}", "namespace": "ns", "queue": "q",
                               "minMember": rng.choice((0, 1, 1, 2, 3)),
                               "phase": rng.choice(("Pending", "Pending", "Inqueue", "Running"))}
        if rng.random() < 0.3:
            job["conditions"] = [{"type": rng.choice(("Scheduled", "Unschedulable", "Other")), "status": "True",
                                  "transitionID": "old", "reason": "r", "message": "m"}
                                 for _ in range(rng.choice((1, 1, 2)))]
        jobs.append(job)
        for k in range(rng.choice((1, 1, 1, 2, 3))):
            t: dict[str, Any] = {"name": f"j{j}-{k}", "namespace": "ns", "job": f"j{j}",
                                 "requests": {"cpu": rng.choice(("1", "2", "4")), "memory": "1Gi"}}
            if rng.random() < 0.2:
                t.update(node=f"n{rng.randrange(3)}", phase="Running")
            tasks.append(t)
    nodes = [{"name": f"n{i}", "allocatable": {"cpu": str(rng.choice((4, 8, 16))), "memory": "64Gi", "pods": 110}}
             for i in range(3)]
    return {"queues": [{"name": "q"}], "nodes": nodes, "jobs": jobs, "tasks": tasks}


def _cycles(spec: dict[str, Any], n: int) -> list[Any]:
    cache = Cache()
    cache.load(msgspec.convert(spec, ClusterSpec))
    cfg = load_config(DEFAULT_CONFIG)
    seen = []
    for i in range(n):
        ssn = open_session(cache.snapshot(), cfg, uid=f"s{i}")
        for name in cfg.actions:
            ACTIONS[name]().execute(ssn)
        close_session(ssn)
        seen.append({u: (j.phase, [dict(c) for c in j.conditions]) for u, j in ssn.jobs.items()})
        apply_decisions(cache, ssn)
    return seen


@pytest.mark.parametrize("seed", range(12))
def test_gang_shared_list_matches_reference(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _cluster(seed)
    fast = _cycles(spec, 3)
    monkeypatch.setattr(GangPlugin, "shared_scheduled", False)
    assert _cycles(spec, 3) == fast
    assert any(c and c[0]["type"] == "Scheduled" for s in fast for _, c in s.values())


@pytest.mark.parametrize("seed", range(12))
def test_close_phases_matches_reference(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _cluster(seed)
    fast = _cycles(spec, 3)
    monkeypatch.setattr(phase, "PLAIN_OTHERS", True)
    assert _cycles(spec, 3) == fast
    phases = {p for s in fast for p, _ in s.values()}
    assert len(phases) > 1  # (phases were computed, not all alike)
