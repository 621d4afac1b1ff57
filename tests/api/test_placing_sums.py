"""The written-out request arithmetic of a task's status move (`JobInfo._move`, `moves.move_run`) and
of a node's placement (`NodeInfo.add_task`) against the plain `Resource.add` / `Resource.sub` they
stand for: random requests with fractions and scalars (some the sums lack), every sum compared
exactly, scalar maps included (busched.api.moves' own test compares cpu and memory only)."""

from __future__ import annotations

import random

import pytest

from busched.api.job import JobInfo
from busched.api.moves import move_run
from busched.api.node import NodeInfo
from busched.api.resource import Resource
from busched.api.task import TaskInfo, TaskStatus

_SCALARS = ["pods", "nvidia.com/gpu", "hugepages-2Mi"]


def _req(rng: random.Random) -> Resource:
    sc = {n: rng.choice([1.0, 0.5, 3.0, 1e-3]) for n in _SCALARS if rng.random() < 0.5}
    return Resource(rng.choice([0.0, 1000.5, 3000.0, 1e-3]), rng.choice([0.0, 2.0**30 + 1 / 3, 17.25]), sc)


def _job(rng: random.Random, n: int) -> JobInfo:
    job = JobInfo(uid="ns/j", name="j", namespace="ns", queue="q", min_available=2)
    for i in range(n):
        r = _req(rng)
        job.add_task(TaskInfo(uid=f"ns-t{i}", name=f"t{i}", namespace="ns", job="ns/j", resreq=r,
                              init_resreq=r, status=rng.choice(list(TaskStatus)), best_effort=r.is_empty()))
    return job


def _sums(job: JobInfo) -> tuple:
    return tuple((r.cpu, r.memory, list(r.scalars.items())) for r in (job.total_request, job.allocated))


def _plain_move(job: JobInfo, t: TaskInfo, status: TaskStatus) -> None:
    job.delete_task(t)
    t.status = status
    job.add_task(t)


@pytest.mark.parametrize("seed", range(6))
def test_status_moves_sum_as_add_and_sub(seed):
    rng = random.Random(seed)
    fast, bulk, plain = _job(random.Random(seed), 8), _job(random.Random(seed), 8), _job(random.Random(seed), 8)
    for _ in range(60):
        status = rng.choice(list(TaskStatus))
        names = rng.sample(sorted(plain.tasks), rng.randint(1, 4))
        prev = {plain.tasks[u].status for u in names}
        for u in names:
            fast.update_task_status(fast.tasks[u], status)  # the one-call move
            _plain_move(plain, plain.tasks[u], status)
        move_run(bulk, [bulk.tasks[u] for u in names], status)
        assert _sums(fast) == _sums(plain), (names, prev, status)
        assert _sums(bulk) == _sums(plain), (names, prev, status)


@pytest.mark.parametrize("seed", range(6))
def test_node_placement_sums_as_add_and_sub(seed):
    rng = random.Random(seed)
    alloc = Resource(64000.0, 2.0**40, {"pods": 110.0, "nvidia.com/gpu": 8.0} if seed % 2 else {})
    node = NodeInfo.new("n", alloc)
    idle, used = alloc.clone(), Resource()
    for i in range(40):
        r = _req(rng)
        t = TaskInfo(uid=f"ns-t{i}", name=f"t{i}", namespace="ns", job="ns/j", resreq=r, init_resreq=r,
                     status=rng.choice([TaskStatus.Allocated, TaskStatus.Running, TaskStatus.Bound]))
        node.add_task(t)
        idle.sub(r)
        used.add(r)
        assert (node.idle.cpu, node.idle.memory, node.idle.scalars) == (idle.cpu, idle.memory, idle.scalars)
        assert (node.used.cpu, node.used.memory, node.used.scalars) == (used.cpu, used.memory, used.scalars)
        assert list(node.used.scalars) == list(used.scalars)
        held = node.tasks[t.uid]
        assert held is not t and held.node_name == "n" and t.node_name == "n" and held.status == t.status
