"""`busched.api.moves.move_run` against `JobInfo.update_task_status` called task by task.

Two sessions over the same random cluster; in one, runs of a job's tasks are moved with
`move_run`, in the other one by one.  The job's maps (in order), status index (in order), sums,
BestEffort count and sub-jobs must be identical, whichever path move_run takes (the bulk one, or
one by one for mixed statuses, BestEffort tasks, a task listed twice, a single task).
"""

from __future__ import annotations

import random

import pytest

from busched.api.moves import move_run
from busched.api.task import TaskStatus
from tests.helpers import cluster, session


def _spec(rng: random.Random):
    tasks, jobs = [], []
    for j in range(3):
        jobs.append({"name": f"j{j}", "namespace": "ns", "queue": "q1", "minMember": 2, "phase": "Inqueue"})
        for t in range(rng.randint(3, 9)):
            req = {} if rng.random() < 0.2 else {"cpu": rng.choice(["1", "2"]), "memory": "1Gi"}  # BestEffort
            tasks.append({"name": f"j{j}-{t}", "namespace": "ns", "job": f"j{j}", "requests": req})
    return cluster(nodes=[("n1", "64", "256Gi")], tasks=tasks, jobs=jobs)


def _state(job) -> tuple:
    r = (job.total_request.cpu, job.total_request.memory, job.allocated.cpu, job.allocated.memory)
    return (list(job.tasks), [(s, list(ts)) for s, ts in job.status_index.items()], r,
            job.pending_best_effort, list(job.task_to_sub_job.items()),
            {u: (list(sj.tasks), [(s, list(ts)) for s, ts in sj.status_index.items()])
             for u, sj in job.sub_jobs.items()},
            [(t.uid, t.status) for t in job.tasks.values()])


@pytest.mark.parametrize("seed", range(8))
def test_move_run_leaves_what_one_by_one_leaves(seed):
    rng = random.Random(seed)
    spec = _spec(rng)
    bulk, plain = session(spec), session(spec)
    for _ in range(6):
        uid = rng.choice(sorted(bulk.jobs))
        names = sorted(t.name for t in bulk.jobs[uid].tasks.values())
        picked = rng.sample(names, rng.randint(1, len(names)))
        if rng.random() < 0.2:
            picked.append(picked[0])  # a task listed twice
        status = rng.choice([TaskStatus.Allocated, TaskStatus.Binding, TaskStatus.Pipelined, TaskStatus.Pending])
        for ssn, bulk_path in ((bulk, True), (plain, False)):
            job = ssn.jobs[uid]
            by_name = {t.name: t for t in job.tasks.values()}
            tasks = [by_name[n] for n in picked]
            if bulk_path:
                move_run(job, tasks, status)
            else:
                for t in tasks:
                    job.update_task_status(t, status)
        assert _state(bulk.jobs[uid]) == _state(plain.jobs[uid])
    assert any(_state(j) for j in bulk.jobs.values())


def test_a_uniform_run_takes_the_bulk_path_and_matches(monkeypatch):
    """A gang's allocations (same status, not BestEffort) moved Allocated -> Binding as a commit does:
    no per-task call, and the same job as one by one."""
    rng = random.Random(99)
    spec = _spec(rng)
    bulk, plain = session(spec), session(spec)
    for ssn in (bulk, plain):
        for job in ssn.jobs.values():
            for t in [t for t in job.tasks.values() if not t.best_effort]:
                job.update_task_status(t, TaskStatus.Allocated)
    calls = []
    real = type(next(iter(bulk.jobs.values()))).update_task_status
    for ssn, bulk_path in ((bulk, True), (plain, False)):
        for uid in sorted(ssn.jobs):
            job = ssn.jobs[uid]
            tasks = [t for t in job.tasks.values() if t.status == TaskStatus.Allocated]
            assert len(tasks) >= 2
            if bulk_path:
                monkeypatch.setattr(type(job), "update_task_status",
                                    lambda self, t, s: (calls.append(t.uid), real(self, t, s)))
                move_run(job, tasks, TaskStatus.Binding)
                monkeypatch.setattr(type(job), "update_task_status", real)
            else:
                for t in tasks:
                    job.update_task_status(t, TaskStatus.Binding)
    assert not calls
    for uid in bulk.jobs:
        assert _state(bulk.jobs[uid]) == _state(plain.jobs[uid])


def test_a_first_write_by_move_run_is_logged_as_every_writer_logs_it():
    """A lent job's first write logs it (busched.api.outputs), so the next lending assembles it again;
    move_run writes the job as `_move` does and must log it the same way."""
    from busched.api.outputs import LOGGED

    spec = cluster(nodes=[("n1", "64", "256Gi")],
                   tasks=[{"name": f"t{i}", "namespace": "ns", "job": "j", "requests": {"cpu": "1"}} for i in range(3)],
                   jobs=[{"name": "j", "namespace": "ns", "queue": "q1", "minMember": 3, "phase": "Inqueue"}])
    job = session(spec).jobs["ns/j"]
    log: list = []
    job.derived = {LOGGED: log}
    move_run(job, list(job.tasks.values()), TaskStatus.Allocated)
    assert log == [job] and job.derived == {} and job.written
