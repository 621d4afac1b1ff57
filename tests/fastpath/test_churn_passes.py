"""The churn passes cost what changed and decide what the full passes decide.

A busy cluster sees churn cycles (`busched.bench.idle.churn_round`, plus random gangs too big to
fit, node label changes, more finished tasks, and binds that fail).  Three caches take the same changes: one lends
with the passes that cost what changed (the written nodes as the lent nodes' shared listener list
heard them), one with ``SharedMemo.plain`` (every node asked whether it was written: the
reference) and one converting everything afresh (``memo=False``).  Every cycle the three sessions'
outputs must be identical: decisions, podgroup phases and conditions, the queues' figures.
"""

from __future__ import annotations

import random

import msgspec

from busched.bench import cluster as cl
from busched.bench import idle
from busched.bench.driver import apply_decisions, bench_config
from busched.builtin import run_cycle
from busched.framework.config import DEFAULT_CONFIG

CYCLES = 40


def _outcome(ssn) -> tuple:
    decisions = [(d.kind, d.task, d.node, d.reason) for d in ssn.decisions]
    jobs = {uid: (j.phase, [dict(c) for c in j.conditions]) for uid, j in ssn.jobs.items()}
    queues = {name: {k: str(v) for k, v in sorted(fig.items())} for name, fig in sorted(ssn.queue_figures.items())}
    return decisions, jobs, queues


def _churn(caches, rng: random.Random, rnd: int) -> None:
    """The same random changes to every cache."""
    k = rng.randint(0, 4)
    gone = rng.sample(sorted(caches[0].objects["task"]), rng.randint(0, 3))
    labelled = rng.sample(sorted(caches[0].objects["node"]), rng.randint(0, 2))
    big = rng.random() < 0.3  # a gang no node set can hold: Unschedulable conditions, Pending phases
    for c in caches:
        idle.churn_round(c, rnd, k)
        for key in gone:
            if key in c.objects["task"]:
                c.delete("task", key)
        for name in labelled:
            spec = c.objects["node"][name]
            c.upsert("node", msgspec.structs.replace(spec, labels={**spec.labels, "round": str(rnd)}))
        if big:
            job, ts = cl.gang_job(f"big{rnd:03d}", 3, cl.TaskShape(cpu="40"))
            c.upsert("job", job)
            for t in ts:
                c.upsert("task", t)


def test_churn_cycles_decide_as_the_full_passes() -> None:
    rng = random.Random(17)
    fast, plain, private = (idle.build(12, 200, 40)[0] for _ in range(3))
    plain._memo.plain = True
    cfg, _, _ = bench_config(DEFAULT_CONFIG)
    placed = heard_any = 0
    for rnd in range(CYCLES):
        if rnd:
            _churn((fast, plain, private), rng, rnd)
        memo = fast._memo
        # every node the last session wrote was heard (the lending looks at those again)
        written = {n.name for n in memo._lent_nodes if n.written}
        assert written <= set(memo._node_writes.names)
        heard_any += bool(written)
        outs = []
        lost = rng.random() < 0.3  # the binds fail: the written nodes are not among the cache's changes
        for cache, memo_on in ((fast, True), (plain, True), (private, False)):
            ssn = run_cycle(cache.snapshot(memo=memo_on), cfg, uid=f"c{rnd}")
            outs.append(_outcome(ssn))
            if not lost:
                apply_decisions(cache, ssn)
        assert outs[0] == outs[1] == outs[2], f"cycle {rnd}"
        placed += sum(d[0] == "bind" for d in outs[0][0])
    assert placed > 20 and heard_any > 10  # the churn placed tasks, and sessions wrote nodes


def test_shared_listeners_registered_once() -> None:
    """Lent nodes share one listener list: a session's node arrays register once, not once per node,
    and the next lending empties it (keeping only its own listener)."""
    cache = idle.build(6, 60, 6)[0]
    cfg, _, _ = bench_config(DEFAULT_CONFIG)
    run_cycle(cache.snapshot(), cfg, uid="a")
    snap = cache.snapshot()
    lists = {id(n.listeners) for n in snap.nodes}
    assert len(lists) == 1
    shared = snap.nodes[0].listeners
    assert shared == [cache._memo._node_writes]
    run_cycle(snap, cfg, uid="b")
    idle.churn_round(cache, 0, 2)  # work to place: the session builds node arrays
    snap = cache.snapshot()
    ssn = run_cycle(snap, cfg, uid="c")
    assert any(d.kind == "bind" for d in ssn.decisions)
    listening = [ls for ls in shared if ls is not cache._memo._node_writes]
    assert listening and len({id(ls) for ls in listening}) == len(listening)  # each once
    cache.snapshot()
    assert shared == [cache._memo._node_writes]
