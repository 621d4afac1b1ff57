"""busched.api.assemble against the one-task methods it writes out: the same job or node, to the bit
(maps and their order, every sum, sub-jobs, flags), and the same refusal at the same task."""

from __future__ import annotations

import random

import pytest

from busched.api import assemble
from busched.api.job import JobInfo
from busched.api.node import NodeAccountingError, NodeInfo
from busched.api.resource import Resource
from busched.api.task import TaskInfo, TaskStatus

_SCALARS = ("pods", "nvidia.com/gpu", "ephemeral-storage")


def _res(rng: random.Random) -> Resource:
    scalars = {n: rng.choice((1.0, 0.1, 1000.0, 2.5e-4)) for n in rng.sample(_SCALARS, rng.randrange(4))}
    return Resource(rng.choice((0.0, 1000.0, 333.3, 0.1)) * rng.randrange(1, 9),
                    rng.choice((2.0**30, 1.0 / 3, 0.0, 1e17)) * rng.randrange(1, 5), scalars)


def _tasks(rng: random.Random, n: int, job: str = "ns/j", node: str = "") -> list[TaskInfo]:
    out = []
    for i in range(n):
        r = _res(rng)
        out.append(TaskInfo(uid=f"ns-t{i}", name=f"t{i}", namespace="ns", job=job, resreq=r,
                            init_resreq=r, status=rng.choice(list(TaskStatus)), priority=rng.randrange(-3, 4),
                            best_effort=rng.random() < 0.3, node_name=rng.choice(("", node))))
    return out


def _job(rng: random.Random, policy: bool) -> JobInfo:
    job = JobInfo(uid="ns/j", name="j", namespace="ns", queue="q", min_available=rng.randrange(1, 4),
                  has_podgroup=True)
    if policy:
        job.subgroup_policy = [{"name": "p", "matchLabelKeys": ["k"]}]
    return job


def _res_state(r: Resource) -> tuple:
    return r.cpu, r.memory, list(r.scalars.items())


def _job_state(job: JobInfo) -> tuple:
    return (list(job.tasks.items()), [(s, list(ts.items())) for s, ts in job.status_index.items()],
            _res_state(job.total_request), _res_state(job.allocated), job.pending_best_effort, job.written,
            job.derived, [(uid, sj.gid, sj.priority, sj.min_available, list(sj.tasks.items()),
                           [(s, list(ts)) for s, ts in sj.status_index.items()]) for uid, sj in job.sub_jobs.items()],
            list(job.task_to_sub_job.items()))


@pytest.mark.parametrize("seed", range(40))
def test_add_tasks_is_add_task_for_each(seed: int) -> None:
    rng = random.Random(seed)
    policy = seed % 5 == 0
    bulk, plain = _job(rng, policy), _job(random.Random(seed), policy)
    tasks = _tasks(rng, rng.randrange(0, 12))
    if tasks and seed % 3 == 0:
        tasks.append(tasks[0])  # the same task twice: replaced, as add_task does
    if seed % 4 == 0:  # a job that held tasks (and had derived values) before
        first = _tasks(random.Random(seed + 100), 3)
        for t in first:
            bulk.add_task(t)
            plain.add_task(t)
        bulk.derived = {"x": 1}
        plain.derived = {"x": 1}
    assemble.add_tasks(bulk, tasks)
    for t in tasks:
        plain.add_task(t)
    assert _job_state(bulk) == _job_state(plain)


def _node(rng: random.Random) -> NodeInfo:
    alloc = Resource(64000.0, 2.0**38, {"pods": 110.0, "nvidia.com/gpu": rng.choice((0.0, 8000.0))})
    return NodeInfo.new("n1", alloc)


def _node_state(node: NodeInfo) -> tuple:
    return ([(k, t.uid, t.status, t.node_name) for k, t in node.tasks.items()], node.written,
            _res_state(node.idle), _res_state(node.used), _res_state(node.releasing), _res_state(node.pipelined))


def _add_all(node: NodeInfo, pairs: list[tuple[TaskInfo, TaskInfo]], bulk: bool) -> str:
    try:
        if bulk:
            assemble.add_copies(node, pairs)
        else:
            for t, c in pairs:
                node.add_task(t, c)
    except NodeAccountingError as e:
        return str(e)
    return ""


@pytest.mark.parametrize("seed", range(40))
def test_add_copies_is_add_task_for_each(seed: int) -> None:
    rng = random.Random(seed)
    statuses = [TaskStatus.Running, TaskStatus.Releasing, TaskStatus.Pipelined, TaskStatus.Bound,
                TaskStatus.Allocated] + ([TaskStatus.Binding] if seed % 6 == 0 else [])
    tasks = _tasks(rng, rng.randrange(0, 15), node="n1")
    for t in tasks:
        t.status = rng.choice(statuses)
    if tasks and seed % 5 == 1:
        tasks.insert(rng.randrange(len(tasks)), tasks[0])  # refused: already on the node
    if tasks and seed % 5 == 2:
        tasks[-1].node_name = "n2"  # refused: on another node
    bulk, plain = _node(random.Random(seed)), _node(random.Random(seed))
    b_tasks = [t.copy() for t in tasks]
    p_tasks = [t.copy() for t in tasks]
    if seed % 7 == 3:
        bulk.listeners = [_Heard()]
        plain.listeners = [_Heard()]
    got = _add_all(bulk, [(t, t.copy()) for t in b_tasks], True)
    want = _add_all(plain, [(t, t.copy()) for t in p_tasks], False)
    assert got == want
    assert _node_state(bulk) == _node_state(plain)
    assert [t.node_name for t in b_tasks] == [t.node_name for t in p_tasks]
    assert [ls.heard for ls in bulk.listeners] == [ls.heard for ls in plain.listeners]


class _Heard:
    def __init__(self) -> None:
        self.heard = 0

    def node_changed(self, _node: NodeInfo) -> None:
        self.heard += 1
