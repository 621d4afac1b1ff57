"""A settled job's totals standing for its tasks in a first open's sums (busched.api.settled.WHOLE,
read by `queue_totals.queue_usage` and drf's `_attrs_of`) give what the task-by-task references give.

`queue_usage`'s first sum is compared with `queue_totals._task_by_task` to the bit (every float's repr, so
-0.0 too, and the scalars' order) over random queues mixing certified jobs (one allocated status,
whole requests, with and without scalars and a minimum), jobs whose requests are fractional,
negative or infinite, pending and ended tasks, written jobs, and totals past a float's exact range;
`settled.summable` is what the lending's cold loop certifies as it indexes (`_index_settled`), and
drf's table in one loop is ``ssn.memo`` per job.
"""

from __future__ import annotations

import math
import random
import types
from typing import Any

import pytest

from busched.api import settled
from busched.api.job import JobInfo
from busched.api.resource import GO_INFINITY, Resource
from busched.api.shared import SharedResource
from busched.api.task import TaskInfo, TaskStatus
from busched.fastpath import lending_cold
from busched.fastpath.templates import _Template
from busched.framework import queue_totals, shares
from busched.plugins.drf import share_table

_SCALARS = ("pods", "nvidia.com/gpu", "hugepages-2Mi")
_PLACED = (TaskStatus.Running, TaskStatus.Bound, TaskStatus.Allocated, TaskStatus.Binding, TaskStatus.Releasing)


def _res(rng: random.Random, whole: bool) -> Resource:
    names = rng.sample(_SCALARS, rng.randrange(4))
    if whole:
        big = rng.random() < 0.1  # (a queue's totals past 2**52, where whole sums round)
        scalars = {n: float(rng.choice((0, 1, 2, 1000))) for n in names}
        return Resource(float(rng.choice((0, 250, 1000, 4000))),
                        float(2**51 + rng.randrange(1, 99) if big else rng.choice((0, 2**30, 3 * 2**30))), scalars)
    if rng.random() < 0.3:  # whole but for one scalar
        r = _res(rng, True)
        r.scalars[rng.choice(_SCALARS)] = rng.choice((0.5, -1.0, GO_INFINITY, 1.0 / 3))
        return r
    scalars = {n: rng.choice((1.0, 0.1, 1000.0, -2.0, GO_INFINITY, -0.0, 1.0 / 3)) for n in names}
    return Resource(rng.choice((0.0, 1000.0, 333.3, 0.1, -5.0, -0.0, math.inf, 1.0 / 3)) * rng.randrange(1, 4),
                    rng.choice((2.0**30, 1.0 / 3, 0.0, 1e17, 0.3)) * rng.randrange(1, 5), scalars)


def _job(rng: random.Random, i: int) -> JobInfo:
    job = JobInfo(uid=f"ns/j{i}", name=f"j{i}", namespace="ns", queue=rng.choice(("q0", "q1", "q2")),
                  min_available=rng.randrange(0, 3), has_podgroup=True,
                  phase=rng.choice(("Running", "Running", "Inqueue", "Pending")))
    if rng.random() < 0.2:
        job.min_resources = _res(rng, rng.random() < 0.7)
    kind = rng.random()
    one = rng.choice(_PLACED)
    whole = rng.random() < 0.85
    for k in range(rng.randrange(1, 5)):
        status = one if kind < 0.7 else rng.choice(list(TaskStatus))
        r = _res(rng, whole)
        job.add_task(TaskInfo(uid=f"ns-j{i}-{k}", name=f"j{i}-{k}", namespace="ns", job=job.uid, resreq=r,
                              init_resreq=r, status=status))
    job.written = rng.random() < 0.1
    if settled.summable(job):
        job.derived[settled.WHOLE] = True
    return job


def _state(usage: dict[str, shares.Usage]) -> list:
    return [(q, [(repr(r.cpu), repr(r.memory), [(n, repr(v)) for n, v in r.scalars.items()]) for r in u.parts()])
            for q, u in usage.items()]


def _first_sum(jobs: list[JobInfo]) -> dict[str, shares.Usage]:
    ssn = types.SimpleNamespace(jobs={j.uid: j for j in jobs}, incremental=lambda key, objs, full, update: full(objs))
    return queue_totals.queue_usage(ssn)


@pytest.mark.parametrize("seed", range(60))
def test_first_queue_sum_is_the_task_by_task_sum(seed: int) -> None:
    rng = random.Random(seed)
    jobs = [_job(rng, i) for i in range(rng.randrange(1, 40))]
    assert _state(_first_sum(jobs)) == _state(queue_totals._task_by_task(jobs))


def test_certified_jobs_are_summed_by_their_totals(monkeypatch: pytest.MonkeyPatch) -> None:
    """The path is taken: a queue of certified jobs adds no task; an uncertain job beside them (a
    fractional request) sends its queue back to the task-by-task sum, which still matches."""
    jobs = []
    for i in range(30):
        job = JobInfo(uid=f"ns/j{i}", name=f"j{i}", namespace="ns", queue="q", phase="Running")
        for k in range(2):
            r = Resource(1000.0 * (k + 1), 2.0**30, {"pods": 1.0})
            job.add_task(TaskInfo(uid=f"t{i}-{k}", name=f"t{i}-{k}", namespace="ns", job=job.uid, resreq=r,
                                  init_resreq=r, status=TaskStatus.Running))
        job.written = False
        job.derived[settled.WHOLE] = True
        jobs.append(job)
    walked: list[JobInfo] = []
    plain = shares.add_job_usage
    monkeypatch.setattr(shares, "add_job_usage", lambda q, job, phase=None: (walked.append(job), plain(q, job, phase)))
    assert _state(_first_sum(jobs)) == _state(queue_totals._task_by_task(jobs))
    assert len(walked) == len(jobs)  # (only the reference walked them)
    odd = JobInfo(uid="ns/odd", name="odd", namespace="ns", queue="q", phase="Running")
    r = Resource(0.5, 1.0 / 3)  # ((1/3 + 2**30) + 2**30 is not 1/3 + (2**30 + 2**30): the order shows)
    odd.add_task(TaskInfo(uid="odd-0", name="odd-0", namespace="ns", job=odd.uid, resreq=r, init_resreq=r,
                          status=TaskStatus.Running))
    walked.clear()
    mixed = [jobs[0], odd, *jobs[1:]]
    assert _state(_first_sum(mixed)) == _state(queue_totals._task_by_task(mixed))
    assert len(walked) == 1 + 2 * len(mixed)  # the odd job, then the whole queue again (and the reference)


@pytest.mark.parametrize("seed", range(30))
def test_cold_loop_certifies_as_summable(seed: int) -> None:
    """`_index_settled`'s inline check is `settled.summable` of the job it indexed."""
    rng = random.Random(seed)
    job = JobInfo(uid="ns/j", name="j", namespace="ns", queue="q", phase="Running")
    ref = JobInfo(uid="ns/j", name="j", namespace="ns", queue="q", phase="Running")
    specs, templates, keys = {}, {}, []
    one = rng.choice(_PLACED) if rng.random() < 0.8 else rng.choice(list(TaskStatus))
    known = [SharedResource.of(Resource(1.0, 1.0)) if rng.random() < 0.5 else None]
    for k in range(rng.randrange(1, 6)):
        r = _res(rng, rng.random() < 0.85)
        if rng.random() < 0.5:  # (a request shared by tasks: looked at once while it is known whole)
            r = SharedResource.of(r)
        elif rng.random() < 0.3 and known[0] is not None:
            r = known[0]
        status = one if rng.random() < 0.8 else rng.choice(list(TaskStatus))
        t = TaskInfo(uid=f"t{k}", name=f"t{k}", namespace="ns", job=job.uid, resreq=r, init_resreq=r, status=status)
        spec = object()
        specs[f"k{k}"], templates[f"k{k}"] = spec, _Template(spec, t)
        keys.append(f"k{k}")
        ref.add_task(t)
    got = lending_cold._index_settled(job, keys, specs, templates, {}, None, known)
    assert got == settled.summable(ref) == settled.summable(job)
    assert [(s, list(ts)) for s, ts in job.status_index.items()] == \
        [(s, list(ts)) for s, ts in ref.status_index.items()]


def test_a_shared_request_not_whole_is_never_remembered_as_whole() -> None:
    """The cold loop's ``known`` carries the last shared request found whole from one job to the next: a shared
    request that is not whole, met first in one job, must still make the next job holding it not summable."""
    odd = SharedResource.of(Resource(0.5, 1.0))
    known: list[Any] = [None]
    got = []
    for name in ("a", "b"):
        job = JobInfo(uid=f"ns/{name}", name=name, namespace="ns", queue="q", phase="Running")
        t = TaskInfo(uid=f"{name}0", name=f"{name}0", namespace="ns", job=job.uid, resreq=odd, init_resreq=odd,
                     status=TaskStatus.Running)
        spec = object()
        got.append(lending_cold._index_settled(job, ["k"], {"k": spec}, {"k": _Template(spec, t)}, {}, None, known))
    assert got == [False, False] and known[0] is not odd


@pytest.mark.parametrize("seed", range(20))
def test_drf_table_in_one_loop(seed: int) -> None:
    """`share_table._attrs_of` against ``ssn.memo`` per job: the same attr per job (the same objects shared),
    kept in each job's derived map, a kept one read back."""
    rng = random.Random(seed)
    jobs = [_job(rng, i) for i in range(rng.randrange(1, 30))]
    for j in jobs:
        if rng.random() < 0.2:
            j.derived["k"] = ("kept", j.uid)
    twins = [JobInfo(uid=j.uid, name=j.name, namespace="ns", queue=j.queue) for j in jobs]
    for j, t in zip(jobs, twins):
        t.status_index, t.allocated, t.written, t.derived = j.status_index, j.allocated, j.written, dict(j.derived)

    def attrs(of: list[JobInfo], bulk: bool) -> dict:
        made: list = []

        def attr_of(job: JobInfo) -> tuple:
            made.append(job.uid)
            return ("attr", job.uid)
        same: dict = {}
        if bulk:
            table = share_table._attrs_of(of, "k", same, attr_of)
        else:
            def shared(job: JobInfo) -> tuple:  # on_session_open's attr_of, with attr_of above
                idx = job.status_index
                if len(idx) == 1 and not job.written and next(iter(idx)) in share_table._ALLOCATED:
                    a = job.allocated
                    k = (a.cpu, a.memory, *a.scalars.items())
                    if k not in same:
                        same[k] = attr_of(job)
                    return same[k]
                return attr_of(job)
            from busched.fastpath.memo import job_value
            table = {j.uid: job_value(j, "k", shared) for j in of}
        return {"table": table, "made": made, "kept": [j.derived.get("k") for j in of]}

    assert attrs(jobs, True) == attrs(twins, False)


def _settled_job(uid: str, memories: list[float], certify: bool) -> JobInfo:
    job = JobInfo(uid=uid, name=uid, namespace="ns", queue="q", phase="Running")
    for k, m in enumerate(memories):
        r = Resource(1000.0, m)
        job.add_task(TaskInfo(uid=f"{uid}-{k}", name=f"{uid}-{k}", namespace="ns", job=uid, resreq=r,
                              init_resreq=r, status=TaskStatus.Running))
    job.written = False
    if certify:
        assert settled.summable(job)
        job.derived[settled.WHOLE] = True
    return job


@pytest.mark.parametrize(("memories", "why"), [
    # fractional requests beside a certified job, whose total comes out whole all the same:
    # ((0.3 + a) + b) + 0.7 is not (0.3 + (a + b)) + 0.7
    ([[0.3], [2.0**51 - 1, 2.0**50 + 1], [0.7]], "others"),
    # whole requests past a float's exact range: ((2**53 + 1) + 1) is not 2**53 + 2
    ([[2.0**52, 2.0**52], [1.0, 1.0]], "range"),
])
def test_what_sends_a_queue_back_to_task_by_task(memories: list[list[float]], why: str) -> None:
    jobs = [_settled_job(f"j{i}", m, certify=settled.summable(_settled_job("x", m, False)))
            for i, m in enumerate(memories)]
    lumped = shares.Usage()
    for j in jobs:
        if settled.WHOLE in j.derived:
            shares.add_settled_usage(lumped, j)
        else:
            shares.add_job_usage(lumped, j)
    want = queue_totals._task_by_task(jobs)
    assert lumped.request.memory != want["q"].request.memory  # (the totals alone would be wrong here)
    assert _state(_first_sum(jobs)) == _state(want)
