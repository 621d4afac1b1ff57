"""The running-job shortcuts of shares.job_usage and drf's per-job share equal the task loops
they skip (`add_job_usage`, summing allocated requests task by task), bit for bit, on random jobs:
odd fractional requests, tasks in one or several statuses, with and without minResources, lent
untouched or written by a session."""

from __future__ import annotations

import random

from busched.api import objects as o
from busched.api.resource import Resource
from busched.api.task import TaskStatus, allocated_status
from busched.cache.cache import Cache
from busched.framework import shares as ct
from busched.plugins.drf import DrfPlugin


def _bits(r: Resource) -> tuple:
    return (r.cpu.hex(), r.memory.hex(), tuple((k, v.hex()) for k, v in r.scalars.items()))


def _cluster(rng: random.Random) -> Cache:
    cache = Cache()
    nodes = [f"n{i}" for i in range(4)]
    for n in nodes:
        cache.upsert("node", o.NodeSpec(name=n, allocatable={"cpu": "1000", "memory": "1000Ti", "pods": "1000",
                                                             "nvidia.com/gpu": "100"}))
    cache.upsert("queue", o.QueueSpec(name="q"))
    for j in range(40):
        phase = rng.choice(["Running", "Running", "Inqueue", "Pending"])
        mr = {"cpu": f"{rng.randint(1, 3000)}m"} if rng.random() < 0.4 else None
        cache.upsert("job", o.JobSpec(name=f"j{j}", namespace="ns", queue="q", min_member=1, phase=phase,
                                      min_resources=mr))
        for t in range(rng.randint(1, 4)):
            req = {"cpu": f"{rng.random() * 3:.7f}", "memory": f"{rng.randint(1, 10**6)}"}
            if rng.random() < 0.3:
                req["nvidia.com/gpu"] = str(rng.randint(1, 2))
            state = rng.choice(["run", "run", "run", "pending", "done"])
            cache.upsert("task", o.TaskSpec(
                name=f"j{j}-{t}", namespace="ns", job=f"j{j}", requests=req,
                node="" if state == "pending" else rng.choice(nodes),
                phase={"run": "Running", "pending": "Pending", "done": "Succeeded"}[state]))
    return cache


def _loop_usage(job) -> tuple:  # noqa: ANN001
    u = ct.Usage()
    ct.add_job_usage(u, job)
    return tuple(_bits(p) for p in u.parts())


def _loop_allocated(job) -> tuple:  # noqa: ANN001
    total = Resource()
    for status, tasks in job.status_index.items():
        if allocated_status(status):
            for t in tasks.values():
                total.add(t.resreq)
    return _bits(total)


def test_running_job_shortcuts_equal_the_task_loops() -> None:
    drf = DrfPlugin({})
    drf.total = Resource(10**6, 10**18, {"pods": 10**4, "nvidia.com/gpu": 100.0})
    shortcut = 0
    for seed in range(30):
        rng = random.Random(seed)
        cache = _cluster(rng)
        for memo in (True, False):
            snap = cache.snapshot(memo=memo)
            for i, job in enumerate(snap.jobs.values()):
                if i % 3 == 0 and job.tasks:  # as a session's eviction leaves it
                    t = next(iter(job.tasks.values()))
                    job.update_task_status(t, TaskStatus.Running)
                u = ct.job_usage(job)
                assert tuple(_bits(p) for p in u.parts()) == _loop_usage(job), job.uid
                assert _bits(drf._attr_of(job).allocated) == _loop_allocated(job), job.uid
                shortcut += len(job.status_index) == 1 and not job.written
            snap.release()
    assert shortcut > 100  # the shortcut was taken often
