"""Lent snapshots (busched.fastpath.lending) decide what private copies decide, and sessions never
change a lent object without flagging it.

Every conformance case and every extra scenario runs three cycles on two caches holding the
same cluster: one snapshots with lent objects (verification on: a lent object changed without
its ``written`` flag raises when it comes back), the other converts every object afresh
(``memo=False``, the reference).  Between cycles the decisions are applied as the binder and
the agents would report them, so later cycles lend some objects again and assemble others.
The two caches must decide the same, cycle after cycle, and end with the same podgroups.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import msgspec
import pytest

from busched import fastpath
from busched.bench.driver import apply_decisions
from busched.builtin import run_cycle
from busched.cache.cache import Cache
from busched.fastpath import lending as shared
from busched.scenario.runner import _registries, load_scenario
from tests.conformance.test_conformance import LOAD_PARAMS

EXTRA = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.yaml"))
PARAMS = LOAD_PARAMS + [pytest.param(p, id=f"extra/{p.name}") for p in EXTRA]


def _cache(sc) -> Cache:
    c = Cache()
    c.load(sc.cluster)
    c.shard = sc.shard
    return c


def _outcome(ssn) -> tuple:
    decisions = [(d.kind, d.task, d.node, d.reason) for d in ssn.decisions]
    jobs = {uid: (j.phase, [dict(c) for c in j.conditions]) for uid, j in ssn.jobs.items()}
    return decisions, jobs


@pytest.fixture
def verify():
    """Every cache made meanwhile verifies its lending (busched.fastpath)."""
    was = fastpath.use_by_default(dataclasses.replace(fastpath.default_settings(), verify=True))
    yield
    fastpath.use_by_default(was)


@pytest.mark.parametrize("path", PARAMS)
def test_lent_equals_private(path: Path, verify) -> None:
    sc = load_scenario(path)
    plugins, actions = _registries()
    lent, private = _cache(sc), _cache(sc)
    for cycle in range(3):
        a = run_cycle(lent.snapshot(memo=True), sc.config, plugins=plugins, actions=actions, uid=f"c{cycle}",
                      now=sc.now)
        b = run_cycle(private.snapshot(memo=False), sc.config, plugins=plugins, actions=actions,
                      uid=f"c{cycle}", now=sc.now)
        assert _outcome(a) == _outcome(b), f"cycle {cycle}"
        apply_decisions(lent, a)
        apply_decisions(private, b)
    lent.snapshot(memo=True)  # takes the last lease back: verification runs


def _idle_cache() -> Cache:
    from busched.bench import idle

    return idle.build(20, 200, 20)[0]


def _cycle(cache: Cache):  # noqa: ANN202
    from busched.framework.config import DEFAULT_CONFIG, load_config

    ssn = run_cycle(cache.snapshot(memo=True), load_config(DEFAULT_CONFIG))
    apply_decisions(cache, ssn)
    return ssn


def test_unchanged_cluster_is_lent_again(verify) -> None:
    """Nothing assembled again when nothing changed; one job and its node when one task did."""
    cache = _idle_cache()
    first = _cycle(cache)
    second = _cycle(cache)
    memo = cache._memo
    assert memo.assembled_nodes == 0 and memo.assembled_jobs == 0
    assert all(a is b for a, b in zip(first.jobs.values(), second.jobs.values()))
    spec = next(t for t in cache.objects["task"].values() if t.node and t.job)
    cache.upsert("task", msgspec.structs.replace(spec, labels={**spec.labels, "touched": "yes"}))
    _cycle(cache)
    assert (memo.assembled_nodes, memo.assembled_jobs) == (1, 1)


def test_unflagged_change_is_caught(verify) -> None:
    """The verification itself: a lent job changed behind the flag's back is named."""
    cache = _idle_cache()
    ssn = _cycle(cache)
    job = next(iter(ssn.jobs.values()))
    assert not job.written
    next(iter(job.tasks.values())).priority += 1
    with pytest.raises(shared.SharedStateMutated, match=job.uid):
        cache.snapshot(memo=True)


def test_unopened_snapshot_counts_as_read() -> None:
    """A snapshot no session opened (a query) does not end the lending: the next snapshot lends the
    same objects, and the first can no longer be opened."""
    from busched.builtin import open_session
    from busched.framework.config import DEFAULT_CONFIG, load_config
    from busched.framework.session import SessionError

    cache = _idle_cache()
    _cycle(cache)
    first = cache.snapshot(memo=True)
    second = cache.snapshot(memo=True)
    assert cache._memo.assembled_jobs == 0
    assert all(a is b for a, b in zip(first.jobs.values(), second.jobs.values()))
    with pytest.raises(SessionError, match="superseded"):
        open_session(first, load_config(DEFAULT_CONFIG))
    open_session(second, load_config(DEFAULT_CONFIG))


def test_snapshot_during_a_session_is_apart() -> None:
    """A query's snapshot while a session runs shares nothing with it and does not end the lending:
    the next cycle's snapshot lends again what the session did not write."""
    from busched.builtin import close_session, open_session
    from busched.framework.config import DEFAULT_CONFIG, load_config

    cache = _idle_cache()
    _cycle(cache)
    snap = cache.snapshot(memo=True)
    ssn = open_session(snap, load_config(DEFAULT_CONFIG))
    query = cache.snapshot(memo=True)
    assert query.lease is None
    assert not {id(j) for j in snap.jobs.values()} & {id(j) for j in query.jobs.values()}
    close_session(ssn)
    after = cache.snapshot(memo=True)
    assert cache._memo.assembled_jobs == 0
    assert all(a is b for a, b in zip(snap.jobs.values(), after.jobs.values()))


def test_failed_session_is_not_lent_again() -> None:
    """A session that raised gives nothing back: the next snapshot assembles everything."""
    from busched.framework.config import DEFAULT_CONFIG, load_config

    class Boom:
        def execute(self, ssn) -> None:  # noqa: ANN001
            raise RuntimeError("boom")

    cache = _idle_cache()
    _cycle(cache)
    snap = cache.snapshot(memo=True)
    with pytest.raises(RuntimeError):
        run_cycle(snap, load_config(DEFAULT_CONFIG), actions={"enqueue": Boom, "allocate": Boom,
                                                              "backfill": Boom})
    again = cache.snapshot(memo=True)
    assert again.lease is not None
    assert not {id(j) for j in snap.jobs.values()} & {id(j) for j in again.jobs.values()}


def test_churn_lent_equals_private(verify) -> None:
    """Tasks finishing and single-task jobs arriving between cycles (the idle bench's churn): the
    patched lending decides what converting everything afresh decides, round after round."""
    from busched.bench import idle
    from busched.framework.config import DEFAULT_CONFIG, load_config

    cfg = load_config(DEFAULT_CONFIG)
    lent, private = _idle_cache(), _idle_cache()
    for rnd in range(6):
        for c in (lent, private):
            idle.churn_round(c, rnd, 3)
        if rnd == 3:  # a job deleted too: the lending is walked whole again
            for c in (lent, private):
                c.delete("job", next(iter(c.objects["job"])))
        a = run_cycle(lent.snapshot(memo=True), cfg, uid=f"r{rnd}")
        b = run_cycle(private.snapshot(memo=False), cfg, uid=f"r{rnd}")
        assert _outcome(a) == _outcome(b), f"round {rnd}"
        assert sum(d.kind == "bind" for d in a.decisions) == 3
        apply_decisions(lent, a)
        apply_decisions(private, b)
    lent.snapshot(memo=True)
    assert lent._memo.assembled_jobs < 20  # patched: only the changed jobs were assembled again


def test_released_snapshot_is_lent_again() -> None:
    """A snapshot only read and released gives its objects back: the next one shares them."""
    cache = _idle_cache()
    _cycle(cache)
    first = cache.snapshot(memo=True)
    first.release()
    second = cache.snapshot(memo=True)
    assert cache._memo.assembled_jobs == 0 and cache._memo.assembled_nodes == 0
    assert all(a is b for a, b in zip(first.jobs.values(), second.jobs.values()))


def test_gone_jobs_leave_nothing_behind() -> None:
    """A job deleted with its tasks leaves no version, index or kept object (a long churn must not
    grow the cache's bookkeeping)."""
    cache = _idle_cache()
    _cycle(cache)
    key = next(iter(cache.objects["job"]))
    for tkey in list(cache.job_tasks[key]):
        cache.delete("task", tkey)
    cache.delete("job", key)
    _cycle(cache)
    assert key not in cache.job_version and key not in cache.job_tasks
    assert key not in cache._memo._jobs and key not in cache._memo._lent


def _settled(snap):  # noqa: ANN001, ANN202
    from busched.api.job import unsettled

    return next(j for j in snap.jobs.values() if not unsettled(j) and j.tasks)


def test_first_assembly_lends_the_validation_conversions() -> None:
    """A settled job's first assembly is the very job and tasks the cache converted to validate
    them (nothing converted or copied twice); a pending job gets copies of its tasks."""
    from busched.bench import idle

    cache = _idle_cache()
    idle.churn_round(cache, 0, 2)  # new pending jobs
    memo = cache._memo
    templates = {k: m.task for k, m in memo._tasks.items()}
    job_templates = {k: m[1] for k, m in memo._job_templates.items()}
    snap = cache.snapshot(memo=True)
    job = _settled(snap)
    assert job is job_templates[job.uid]
    assert all(t is templates[f"{t.namespace}/{t.name}"] for t in job.tasks.values())
    pending = next(j for j in snap.jobs.values() if j.phase in ("Pending", "") and j.tasks)
    assert all(t is not templates[f"{t.namespace}/{t.name}"] for t in pending.tasks.values())
    snap.release()


def test_template_changed_by_a_session_is_converted_again(verify) -> None:
    """A session that evicts a task of a settled job changes the very task the cache converted: the
    next snapshot converts it afresh, so its job and its node see the spec again, as the plain
    conversion does."""
    from busched.api.task import TaskStatus
    from busched.builtin import close_session, open_session
    from busched.framework.config import DEFAULT_CONFIG, load_config

    cache = _idle_cache()
    snap = cache.snapshot(memo=True)
    ssn = open_session(snap, load_config(DEFAULT_CONFIG))
    job = _settled(snap)
    task = next(iter(job.tasks.values()))
    node = next(n for n in snap.nodes if n.name == task.node_name)
    job.update_task_status(task, TaskStatus.Releasing)  # as the statement's evict does
    node.update_task(task)
    close_session(ssn)
    again = cache.snapshot(memo=True)
    job2 = again.jobs[job.uid]
    task2 = job2.tasks[task.uid]
    assert task2 is not task and task2.status == TaskStatus.Running
    node2 = next(n for n in again.nodes if n.name == task.node_name)
    assert node2.tasks[task.uid].status == TaskStatus.Running
    plain = cache.snapshot(memo=False)
    pnode = next(n for n in plain.nodes if n.name == task.node_name)
    assert repr(node2) == repr(pnode)
    assert job2.allocated.to_dict() == plain.jobs[job.uid].allocated.to_dict()
