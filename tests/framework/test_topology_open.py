"""`open_topology` hands only the jobs with a network topology or an allocated hypernode (the job's or
a sub-job's) to its two passes (`hypernodes._touched`); against the reference (``PLAIN_OPEN``: every
unsettled job to both), the same jobs afterwards, over random jobs and trees."""

from __future__ import annotations

import copy
import random
from types import SimpleNamespace
from typing import Any

import pytest

from busched.api import subjob
from busched.api.job import JobInfo
from busched.api.node import NodeInfo
from busched.api.queue import HyperNode
from busched.api.resource import Resource
from busched.api.task import TaskInfo, TaskStatus
from busched.framework import hypernodes

_NODES = ("n1", "n2", "n3", "n4")
_TREE = [HyperNode("s0", 1, "rack", ["n1", "n2"]), HyperNode("s1", 1, "rack", ["n3", "n4"]),
         HyperNode("s2", 2, "spine", ["s0", "s1"])]
_HN = ("", "", "", "s0", "s1", "s2", "gone")


def _nt(rng: random.Random) -> dict[str, Any] | None:
    if rng.random() < 0.6:
        return None
    nt: dict[str, Any] = {"mode": rng.choice(("soft", "hard"))}
    if rng.random() < 0.5:
        nt["highestTierAllowed"] = rng.choice((1, 2))
    elif rng.random() < 0.5:
        nt["highestTierName"] = rng.choice(("rack", "spine", "nope"))
    return nt


def _jobs(seed: int) -> list[JobInfo]:
    rng = random.Random(seed)
    jobs = []
    for i in range(40):
        job = JobInfo(uid=f"ns/j{i}", name=f"j{i}", namespace="ns", queue="q", min_available=1,
                      has_podgroup=rng.random() < 0.9, phase="Running")
        job.network_topology = _nt(rng)
        for k in range(rng.randrange(0, 3)):
            r = Resource(1000.0, 1.0)
            on = rng.choice(("",) + _NODES)
            job.add_task(TaskInfo(uid=f"t{i}-{k}", name=f"t{i}-{k}", namespace="ns", job=job.uid, resreq=r,
                                  init_resreq=r, node_name=on,
                                  status=TaskStatus.Running if on else TaskStatus.Pending))
        if rng.random() < 0.3:  # a sub-group's sub-job beside the default one
            sj = job.sub_jobs[f"{job.uid}/g"] = subjob._new_sub_job(f"{job.uid}/g", f"{job.uid}/g", job.uid, 1,
                                                                    _nt(rng), None)
            sj.allocated_hypernode = rng.choice(_HN)
        for sj in job.sub_jobs.values():
            if rng.random() < 0.3:
                sj.network_topology = _nt(rng)
            if rng.random() < 0.3:
                sj.allocated_hypernode = rng.choice(_HN)
        if rng.random() < 0.3:
            job.allocated_hypernode = rng.choice(_HN)
        jobs.append(job)
    return jobs


def _state(jobs: list[JobInfo]) -> list[Any]:
    return [(j.uid, copy.deepcopy(j.network_topology), j.allocated_hypernode,
             [(sj.uid, copy.deepcopy(sj.network_topology), sj.allocated_hypernode) for sj in j.sub_jobs.values()])
            for j in jobs]


def _open(jobs: list[JobInfo], plain: bool, monkeypatch: pytest.MonkeyPatch, tree: list[HyperNode]) -> Any:
    nodes = [NodeInfo.new(n, Resource(2000, 4 << 30)) for n in _NODES]
    ssn = SimpleNamespace(nodes={n.name: n for n in nodes}, node_list=nodes, others={},
                          hypernodes={h.name: h for h in tree}, unsettled_jobs=jobs)
    monkeypatch.setattr(hypernodes, "PLAIN_OPEN", plain)
    return hypernodes.open_topology(ssn)


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize("with_tree", [True, False])
def test_open_matches_reference(seed: int, with_tree: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = _TREE if with_tree else []
    fast, plain = _jobs(seed), _jobs(seed)
    assert _state(fast) == _state(plain)
    before = _state(fast)
    _open(fast, False, monkeypatch, tree)
    _open(plain, True, monkeypatch, tree)
    assert _state(fast) == _state(plain)
    if with_tree:
        assert _state(fast) != before  # (the passes changed something: the jobs they must see were seen)
    assert len(hypernodes._touched(fast)) < len(fast)  # (and some jobs were left out)
