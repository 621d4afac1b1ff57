"""The jobs' log (busched.api.outputs) gives what passes asking every job give.

Three caches take the same random changes, session after session: one lends with the log (the
lending looks again at the written jobs the log names and puts back the phases it names, gang
closes one by one only the quiet jobs logged as written, close recomputes only the logged steady
jobs' phases), one
with ``SharedMemo.logged = False`` (the reference: every job looked at) and one converting everything
afresh (``memo=False``).  The changes: churn (tasks gone, jobs arriving), gangs too big to fit,
tasks evicted inside a session (settled jobs written after they were lent), evictions undone
(written, yet unchanged), binds that fail, and podgroup statuses written back into the specs as
the scheduler does (so specs carry Scheduled and Unschedulable conditions of older sessions).
Every session's decisions, podgroup phases and conditions (transition ids included) and queue
figures must be identical, and so must what a status writer would publish.
"""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest

from busched.bench import cluster as cl
from busched.bench import idle
from busched.bench.driver import apply_decisions, bench_config
from busched.builtin import run_cycle
from busched.fastpath import FastPathSettings
from busched.fastpath.lending import SharedStateMutated
from busched.framework.config import DEFAULT_CONFIG
from busched.framework.statement import Statement

CYCLES = 30


def _outcome(ssn: Any) -> tuple:
    decisions = [(d.kind, d.task, d.node, d.reason) for d in ssn.decisions]
    jobs = {uid: (j.phase, [dict(c) for c in j.conditions]) for uid, j in ssn.jobs.items()}
    queues = {name: {k: str(v) for k, v in sorted(fig.items())} for name, fig in sorted(ssn.queue_figures.items())}
    return decisions, jobs, queues


def _changes(caches: list[Any], rng: random.Random, rnd: int) -> None:
    k = rng.randint(0, 4)
    gone = rng.sample(sorted(caches[0].objects["task"]), rng.randint(0, 2))
    big = rng.random() < 0.3
    for c in caches:
        idle.churn_round(c, rnd, k)
        for key in gone:
            if key in c.objects["task"]:
                c.delete("task", key)
        if big:
            job, ts = cl.gang_job(f"big{rnd:03d}", 3, cl.TaskShape(cpu="40"))
            c.upsert("job", job)
            for t in ts:
                c.upsert("task", t)


def _in_session(rng: random.Random, running: list[str], undone: list[str]) -> Any:
    """Before close: evict some running tasks (a decision each), and evict others in a statement that is
    discarded (their jobs written, their state as it was)."""
    def act(ssn: Any) -> None:
        by_key = {t.key: t for j in ssn.jobs.values() for t in j.tasks.values()}
        for key in running:
            t = by_key.get(key)
            if t is not None and t.node_name:
                ssn.evict(t, "test")
        st = Statement(ssn)
        for key in undone:
            t = by_key.get(key)
            if t is not None and t.node_name:
                st.evict(t, "test")
        st.discard()
    return act


def _write_back(cache: Any, ssn: Any, uids: list[str]) -> None:
    """The podgroup statuses of ``uids`` written back into their specs, as `busched.scheduler.effective`
    overlays them (phase and conditions, transition ids included)."""
    specs = cache.objects["job"]
    for uid in uids:
        job, spec = ssn.jobs.get(uid), specs.get(uid)
        if job is None or spec is None:
            continue
        conds = [{"type": c.get("type", ""), "status": c.get("status", ""), "reason": c.get("reason", ""),
                  "message": c.get("message", ""), "transitionID": c.get("transitionID", "")}
                 for c in job.conditions]
        cache.upsert("job", msgspec.structs.replace(spec, phase=job.phase, conditions=conds))


def _published(ssn: Any, last: dict[str, tuple]) -> dict[str, tuple]:
    """What a status writer publishes after this session (busched.scheduler.statuses): the jobs whose
    phase or conditions (transition id aside) changed, with their conditions as written."""
    out = {}
    for uid, j in ssn.jobs.items():
        content = (j.phase, [(c.get("type"), c.get("status"), c.get("reason"), c.get("message")) for c in j.conditions])
        if last.get(uid) != content:
            last[uid] = content
            out[uid] = (j.phase, [dict(c) for c in j.conditions])
    return out


def test_logged_sessions_output_as_every_job_passes() -> None:
    rng = random.Random(1717)
    fast, ref, private = (idle.build(12, 200, 40)[0] for _ in range(3))
    ref._memo.logged = False
    cfg, _, _ = bench_config(DEFAULT_CONFIG)
    lasts: list[dict[str, tuple]] = [{}, {}, {}]
    evicted = undone = short_logs = 0
    for rnd in range(CYCLES):
        if rnd:
            _changes([fast, ref, private], rng, rnd)
        running = sorted(k for k, t in fast.objects["task"].items() if t.phase == "Running" and t.node)
        evict = rng.sample(running, rng.randint(0, 2)) if rng.random() < 0.5 else []
        undo = rng.sample(running, rng.randint(0, 2)) if rng.random() < 0.5 else []
        evicted += len(evict)
        undone += len(undo)
        lost = rng.random() < 0.2
        back = rng.random()
        outs, pubs, sessions = [], [], []
        for i, (cache, memo_on) in enumerate(((fast, True), (ref, True), (private, False))):
            ssn = run_cycle(cache.snapshot(memo=memo_on), cfg, uid=f"c{rnd}",
                            before_close=_in_session(random.Random(rnd), evict, undo))
            outs.append(_outcome(ssn))
            pubs.append(_published(ssn, lasts[i]))
            sessions.append(ssn)
            if i == 0:
                log = ssn.jobs_logged()
                assert log is not None
                short_logs += len(set(map(id, log))) < len(ssn.jobs) // 2
            else:
                assert i == 2 or ssn.jobs_logged() is None  # the reference keeps no log
        assert outs[0] == outs[1] == outs[2], f"cycle {rnd}"
        assert pubs[0] == pubs[1] == pubs[2], f"cycle {rnd}"
        uids = sorted(sessions[0].jobs)
        chosen = rng.sample(uids, int(len(uids) * back))
        for cache, ssn in zip((fast, ref, private), sessions):
            if not lost:
                apply_decisions(cache, ssn)
            _write_back(cache, ssn, chosen)
    # the random changes reached the paths the log serves: evictions, and sessions that logged few jobs
    assert evicted > 5 and undone > 5
    assert short_logs > CYCLES // 2


def test_a_session_that_changed_nothing_logs_nothing() -> None:
    """After a session that changed nothing, the next one logs no job: its close looks at none of them
    one by one, yet every ready job gets the Scheduled condition with the new session's id."""
    cache = idle.build(6, 60, 12)[0]
    cfg, _, _ = bench_config(DEFAULT_CONFIG)
    run_cycle(cache.snapshot(), cfg, uid="a")
    run_cycle(cache.snapshot(), cfg, uid="b")
    snap = cache.snapshot()
    assert all(j.conditions == [] for j in snap.jobs.values())  # the spec's, put back as lent
    ssn = run_cycle(snap, cfg, uid="c")
    assert ssn.jobs_logged() == []
    for j in ssn.jobs.values():
        assert j.conditions == [{"type": "Scheduled", "status": "True", "transitionID": "c",
                                 "reason": "tasks in gang are ready to be scheduled", "message": ""}]
    # a task evicted in a session: its job is logged (once), and the next lending assembles it again
    victim = next(iter(ssn.jobs.values()))
    ssn2 = run_cycle(cache.snapshot(), cfg, uid="d",
                     before_close=lambda s: s.evict(next(iter(s.jobs[victim.uid].tasks.values())), "test"))
    assert [j.uid for j in dict.fromkeys(ssn2.jobs_logged())] == [victim.uid]
    assert cache.snapshot().jobs[victim.uid] is not ssn2.jobs[victim.uid]


def test_verification_finds_a_phase_changed_without_the_log() -> None:
    """With verification on, a lent job given another phase by a session that did not log it (a writer
    that bypassed `output_changed`) is reported as the lease comes back."""
    cache = idle.build(6, 60, 12)[0]
    cache.fast = FastPathSettings(verify=True)
    cfg, _, _ = bench_config(DEFAULT_CONFIG)
    run_cycle(cache.snapshot(), cfg, uid="a")
    run_cycle(cache.snapshot(), cfg, uid="b")  # logged changes: passes
    cache.snapshot().release()

    def sneak(ssn: Any) -> None:
        next(iter(ssn.jobs.values())).phase = "Completed"  # (not logged)

    run_cycle(cache.snapshot(), cfg, uid="c", before_close=sneak)
    with pytest.raises(SharedStateMutated, match="without being logged"):
        cache.snapshot()
