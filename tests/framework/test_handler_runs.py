"""Event handlers told once per run, and a commit's allocations dispatched together
(busched.framework.runs, busched.api.moves), against telling and dispatching task by task.

Whole cycles on random clusters with replicas of one template (gangs, single-task jobs of one
shape) run twice with the kernels on: as allocate runs them, and with the runs switched off.
The decisions, phases, pipelined tasks, fit errors, the random source, and the state the
handlers and moves leave (drf's shares, proportion's queues, every job's maps in their order,
its sums and its sub-jobs) must be identical, and multi-task runs must really have been told.
Then a handler that raises mid-run: the others hear exactly what one by one they would have.
"""

from __future__ import annotations

import random

import pytest

from busched.api.resource import Resource
from busched.api.task import TaskInfo
from busched.builtin import run_cycle
from busched.fastpath import FastPathSettings
from busched.framework import runs
from busched.framework.config import load_config
from busched.framework.hooks import EventHandler
from tests.fastpath.test_batch_choice import with_replicas
from tests.fastpath.test_kernels_select import CONFIGS, outcome
from tests.kernel_cases import cache_of, random_cluster


def _res(r) -> tuple:
    return (r.cpu, r.memory, tuple(sorted(r.scalars.items())))


def _job_state(j) -> tuple:
    return (list(j.tasks), [(s, list(ts)) for s, ts in j.status_index.items()], _res(j.total_request),
            _res(j.allocated), j.pending_best_effort, sorted(j.task_to_sub_job.items()),
            {u: (list(sj.tasks), [(s, list(ts)) for s, ts in sj.status_index.items()])
             for u, sj in j.sub_jobs.items()})


def _handlers_state(ssn) -> dict:
    got: dict = {}
    drf = ssn.plugins.get("drf")
    if drf is not None:
        got["drf"] = {u: (_res(a.allocated), a.share, a.dominant) for u, a in sorted(drf.job_attrs.items())}
    prop = ssn.plugins.get("proportion")
    if prop is not None:
        got["proportion"] = {q: (_res(a.allocated), a.share) for q, a in sorted(prop.queue_opts.items())}
    return got


def run(spec, config: str, seed: int, on: bool, monkeypatch, told: list[int]) -> dict:
    if not on:
        monkeypatch.setattr(runs, "wanted", lambda ssn: False)  # every task told and dispatched by itself
    real = runs.HandlerRun.flush

    def flush(self):
        told.append(len(self.tasks))
        real(self)

    monkeypatch.setattr(runs.HandlerRun, "flush", flush)
    ends: dict = {}

    def before_close(ssn):
        ends["handlers"] = _handlers_state(ssn)
        ends["jobs"] = {u: _job_state(j) for u, j in sorted(ssn.jobs.items())}

    ssn = run_cycle(cache_of(spec, FastPathSettings(kernels=True)).snapshot(), load_config(config), seed=seed,
                    before_close=before_close)
    got = outcome(ssn)
    got["rng"] = ssn.rng.random()
    got.update(ends)
    return got


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("seed", range(4))
def test_runs_leave_what_one_by_one_leaves(monkeypatch, config, seed):
    rng = random.Random(4400 + seed)
    spec = with_replicas(rng, random_cluster(rng, nodes=rng.choice([8, 60, 150]), fancy=seed % 3 != 2),
                         sized=seed % 2 == 0)
    told: list[int] = []
    fast = run(spec, CONFIGS[config], seed, True, monkeypatch, told)
    plain_told: list[int] = []
    plain = run(spec, CONFIGS[config], seed, False, monkeypatch, plain_told)
    assert fast["decisions"], "nothing placed: the comparison would be empty"
    assert fast == plain
    assert not plain_told  # switched off: no run was opened
    if "drf" in fast["handlers"]:
        assert max(told) > 1  # some run really told many tasks at once


class _Session:
    def __init__(self, handlers):
        self.event_handlers = handlers


def _recorder(log: list, name: str, fail_on: str = "", run_form: bool = False) -> EventHandler:
    def one(t: TaskInfo) -> None:
        if t.name == fail_on:
            raise RuntimeError(f"{name} fails on {t.name}")
        log.append((name, t.name))

    def many(ts: list[TaskInfo]) -> None:
        for t in ts:
            one(t)

    return EventHandler(allocate=one, allocate_run=many if run_form else None)


def _tell(run_form: bool, fail_on: str) -> tuple[list, str]:
    log: list = []
    hs = [_recorder(log, "a", run_form=run_form), _recorder(log, "b", fail_on=fail_on),
          _recorder(log, "c", run_form=run_form)]
    tasks = [TaskInfo(uid=f"u{i}", name=f"t{i}", namespace="ns", job="ns/j", resreq=Resource(),
                      init_resreq=Resource()) for i in range(4)]
    err = ""
    r = runs.HandlerRun(_Session(hs))  # type: ignore[arg-type]
    try:
        for t in tasks:
            if run_form:
                r.allocated(t)
            else:  # Session._on_allocate's order
                for eh in hs:
                    eh.allocate(t)  # type: ignore[misc]
        r.flush()
    except RuntimeError as e:
        err = str(e)
    return sorted(log), err


@pytest.mark.parametrize("fail_on", ["", "t0", "t2", "t3"])
def test_a_handler_failing_mid_run_leaves_the_others_as_one_by_one(fail_on):
    """Handler b (per task) raises on one task: a and c (run forms) have heard, per handler, exactly the
    tasks they would have one by one (a before b, so a hears the failing task too; c does not)."""
    got, err = _tell(True, fail_on)
    want, want_err = _tell(False, fail_on)
    assert err == want_err
    assert got == want
    if fail_on:
        assert ("a", fail_on) in got and ("c", fail_on) not in got
