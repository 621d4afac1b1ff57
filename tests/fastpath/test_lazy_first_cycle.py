"""A cold lending with settled jobs' sub-jobs filled in on first read (busched.api.settled) decides
what the eager assembly decides (``SharedMemo.lazy_sub_jobs = False``, the reference), and so do
settled jobs' totals standing for their tasks in the queues' first sums and drf's table in one loop
(``SharedMemo.job_totals = False`` and ``DrfPlugin.bulk_open = False`` in the reference).

Random clusters, with settled jobs of one to three running tasks (some preemptable, in both
queues), go through rounds of changes; each round both caches lend and run a whole cycle, with
the default actions and with preempt and reclaim (which evict running tasks of settled jobs: a
deferred job is filled in before it changes).  Every round the decisions, podgroup phases and
conditions and the queues' figures must be equal, and what the session read at open (the jobs,
their task indexes and sums, the nodes' task maps, drf's shares); at the end every job, its
sub-jobs included, read field by field.
"""

from __future__ import annotations

import random

import msgspec
import pytest

from busched.actions import ACTIONS
from busched.api import objects as o
from busched.api import settled
from busched.builtin import open_session
from busched.framework.config import DEFAULT_CONFIG, load_config
from busched.framework.cycle import finish_cycle
from busched.plugins.drf import DrfPlugin
from tests.fastpath.test_kernels_snapshot import EVICTING, mutate, node_state, task_state
from tests.kernel_cases import cache_of, random_cluster

RECLAIMING = EVICTING.replace('actions: "enqueue, allocate, preempt, reclaim, backfill"',
                              'actions: "enqueue, reclaim, allocate, backfill, preempt"')


def _cluster(rng: random.Random) -> o.ClusterSpec:
    """`random_cluster` with settled gangs added: running, some preemptable, in both queues."""
    spec = random_cluster(rng, nodes=rng.choice([4, 12, 40]))
    nodes = [n.name for n in spec.nodes]
    jobs, tasks = list(spec.jobs), list(spec.tasks)
    for j in range(rng.randint(3, 25)):
        name = f"settled{j}"
        ann = {"volcano.sh/preemptable": "true"} if rng.random() < 0.6 else {}
        jobs.append(o.JobSpec(name=name, namespace="ns", queue=rng.choice(["q1", "q2"]), min_member=1,
                              phase="Running", annotations=ann, priority_class_name=rng.choice(["", "low"])))
        for t in range(rng.randint(1, 3)):
            tasks.append(o.TaskSpec(name=f"{name}-{t}", namespace="ns", job=name, node=rng.choice(nodes),
                                    phase="Running", annotations=ann,
                                    requests={"cpu": rng.choice(["1", "2", "4"]), "memory": "1Gi"}))
    return msgspec.structs.replace(spec, jobs=jobs, tasks=tasks)


def _job_view(j) -> tuple:
    """A job as the default actions and plugins read it (its sub-jobs left alone)."""
    return (j.phase, j.queue, j.priority, j.written, list(j.tasks), [(s, list(ts)) for s, ts in j.status_index.items()],
            j.allocated.to_dict(), j.total_request.to_dict(), j.pending_best_effort,
            [task_state(t) for t in j.tasks.values()])


def _full_job(j) -> tuple:
    """Every field of a job, its sub-jobs read (which fills a deferred one in)."""
    subs = [(uid, sj.gid, sj.uid, sj.min_available, sj.priority, list(sj.tasks),
             [(s, list(ts)) for s, ts in sj.status_index.items()], sj.allocated_hypernode)
            for uid, sj in j.sub_jobs.items()]
    return _job_view(j), subs, list(j.task_to_sub_job.items()), j.min_sub_jobs, j.allocated_hypernode


def _opened(ssn) -> tuple:
    drf = ssn.plugins.get("drf")
    shares = {uid: (a.share, a.allocated.to_dict()) for uid, a in drf.job_attrs.items()} if drf else {}
    return ({uid: _job_view(j) for uid, j in ssn.jobs.items()}, [node_state(n) for n in ssn.node_list], shares)


def _cycle(snap, cfg, seed: int, uid: str):  # noqa: ANN001, ANN202
    """`run_cycle` with what the session read at open taken before the actions run."""
    ssn = open_session(snap, cfg, seed=seed, uid=uid)
    opened = _opened(ssn)
    for name in cfg.actions:
        ACTIONS[name]().execute(ssn)
    finish_cycle(ssn)
    return ssn, opened


def _outcome(ssn) -> tuple:
    decisions = [(d.kind, d.task, d.node, d.reason) for d in ssn.decisions]
    jobs = {uid: (j.phase, [dict(c) for c in j.conditions]) for uid, j in ssn.jobs.items()}
    queues = {name: {k: str(v) for k, v in sorted(fig.items())} for name, fig in sorted(ssn.queue_figures.items())}
    return decisions, jobs, queues


@pytest.mark.parametrize("config", [DEFAULT_CONFIG, EVICTING, RECLAIMING], ids=["default", "evicting", "reclaiming"])
@pytest.mark.parametrize("seed", range(6))
def test_deferred_sub_jobs_decide_as_eager(seed: int, config: str) -> None:
    rng = random.Random(seed)
    spec = _cluster(rng)
    lazy, eager = cache_of(spec), cache_of(spec)
    eager._memo.lazy_sub_jobs = False
    eager._memo.job_totals = False  # (and the queues summed task by task, drf's table per job)
    cfg = load_config(config)
    lent = kept = 0
    for rnd in range(4):
        snap = lazy.snapshot()
        lent += sum(type(j) is settled.SubJobsLater for j in snap.jobs.values())
        a, opened_a = _cycle(snap, cfg, seed, f"c{rnd}")
        kept += sum(type(j) is settled.SubJobsLater for j in a.jobs.values())
        DrfPlugin.bulk_open = False
        try:
            b, opened_b = _cycle(eager.snapshot(), cfg, seed, f"c{rnd}")
        finally:
            DrfPlugin.bulk_open = True
        assert opened_a == opened_b, f"round {rnd}: the session's views at open"
        assert _outcome(a) == _outcome(b), f"round {rnd}"
        state = rng.getstate()
        mutate(rng, lazy)
        rng.setstate(state)
        mutate(rng, eager)
    a, b = lazy.snapshot(), eager.snapshot()
    assert {u: _full_job(j) for u, j in a.jobs.items()} == {u: _full_job(j) for u, j in b.jobs.items()}
    # the lazy path was taken: jobs lent deferred, and with the default actions some went through
    # whole cycles unfilled (preempt and reclaim read the sub-jobs of the jobs they look at)
    assert lent > 0
    assert kept > 0 or config is not DEFAULT_CONFIG
