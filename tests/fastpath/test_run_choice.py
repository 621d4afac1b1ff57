"""A job turn's choices from one template's kept vectors (busched.fastpath.runchoice) against the
per-task path (`PredicateHelper.chosen_found` -> `batch.choose` -> `best_node`, task by task).

Whole cycles on random clusters (random node sizes, gangs of random sizes of one template, single-task
jobs of one shape, shaped templates with selectors, tolerations, images and GPUs, nodes that tie, the
default, binpack-weighted and most-requested weights) run twice with the kernels on: as allocate runs
them, and with the run switched off so every choice takes the per-task layers.  Every decision (in
order, on the same node), the pipelined tasks, the phases, the fit errors, the rotated search start,
the random source's state, every job's maps, sums and sub-jobs, and the handlers' state must be
identical; the run must really have chosen; and the turns where it cannot (sampled searches on more
than 100 nodes, templates the kept vectors decline, roles under the error cache, nominated nodes,
pre-predicates that fail) must really have fallen back to the per-task path.
"""

from __future__ import annotations

import random

import msgspec
import numpy as np
import pytest

from busched.api import objects as o
from busched.builtin import run_cycle
from busched.fastpath import FastPathSettings, runchoice
from busched.framework.config import load_config
from tests.fastpath.test_batch_choice import with_replicas, with_shaped_replicas
from tests.fastpath.test_kernels_select import CONFIGS, outcome
from tests.framework.test_handler_runs import _handlers_state, _job_state
from tests.kernel_cases import cache_of, random_cluster


def run(spec: o.ClusterSpec, config: str, seed: int, on: bool, monkeypatch, counts: dict, prepare=None) -> dict:
    real_open, real_choose = runchoice.RunChoice.open, runchoice.RunChoice.choose

    def open_(cls, *a, **kw):
        if not on:
            return None  # every choice through the per-task layers
        got = real_open.__func__(cls, *a, **kw)
        counts["opened" if got is not None else "refused"] += 1
        return got

    def choose(self, task):
        got = real_choose(self, task)
        counts["chosen" if got is not None else "passed"] += 1
        return got

    monkeypatch.setattr(runchoice.RunChoice, "open", classmethod(open_))
    monkeypatch.setattr(runchoice.RunChoice, "choose", choose)
    ends: dict = {}

    def before_close(ssn):
        ends["handlers"] = _handlers_state(ssn)
        ends["jobs"] = {u: _job_state(j) for u, j in sorted(ssn.jobs.items())}
        ends["nodes"] = {n.name: (list(n.tasks), n.idle.cpu, n.idle.memory, sorted(n.idle.scalars.items()))
                         for n in ssn.node_list}

    cache = cache_of(spec, FastPathSettings(kernels=True))
    if prepare is not None:
        prepare(cache)
    ssn = run_cycle(cache.snapshot(), load_config(config), seed=seed, before_close=before_close)
    got = outcome(ssn)
    got["rng"] = ssn.rng.random()  # the same draws were made
    got.update(ends)
    return got


def with_nominated(rng: random.Random, spec: o.ClusterSpec) -> o.ClusterSpec:
    """Some replicas nominated to a node (the per-task path tries it first)."""
    names = [n.name for n in spec.nodes]
    tasks = [msgspec.structs.replace(t, nominated_node_name=rng.choice(names))
             if t.job.startswith("rep") and rng.random() < 0.1 else t for t in spec.tasks]
    return msgspec.structs.replace(spec, tasks=tasks)


def both(monkeypatch, spec, config: str, seed: int, prepare=None) -> dict:
    counts = {"opened": 0, "refused": 0, "chosen": 0, "passed": 0}
    fast = run(spec, config, seed, True, monkeypatch, counts, prepare)
    plain = run(spec, config, seed, False, monkeypatch, {"opened": 0, "refused": 0, "chosen": 0, "passed": 0},
                prepare)
    assert fast["decisions"], "nothing placed: the comparison would be empty"
    assert fast == plain
    return counts


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("seed", range(6))
def test_a_turns_run_chooses_as_the_per_task_path(monkeypatch, config, seed):
    rng = random.Random(7700 + seed)
    nodes = [40, 60, 100, 150, 30, 80][seed]
    spec = with_replicas(rng, random_cluster(rng, nodes=nodes, fancy=seed % 3 != 2), sized=seed % 2 == 0)
    if seed % 3 == 1:
        spec = with_nominated(rng, spec)
    counts = both(monkeypatch, spec, CONFIGS[config], seed)
    if nodes > 100:
        assert counts["chosen"] == 0 and counts["refused"] > 0  # sampled searches: the per-task path
    elif seed % 3 != 2:
        # fancy clusters (PreferNoSchedule taints, affinities): templates the kept vectors decline, the
        # run passes every choice to the per-task path
        assert counts["passed"] > 10
    else:
        assert counts["chosen"] > 10  # the run really chose


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("seed", range(3))
def test_a_turns_run_chooses_as_the_per_task_path_for_shaped_templates(monkeypatch, config, seed):
    """Selectors, tolerations, images and GPUs on tainted and cordoned nodes (some templates declined)."""
    rng = random.Random(7800 + seed)
    spec = with_shaped_replicas(rng, random_cluster(rng, nodes=[8, 40, 100][seed], fancy=True), sized=seed != 1)
    counts = both(monkeypatch, spec, CONFIGS[config], seed)
    assert counts["chosen"] > 10


def gang_cluster(rng: random.Random, mixed: bool = False) -> o.ClusterSpec:
    """`busched bench gang`'s shape, drawn: equal nodes (every choice a tie), gangs of one template
    (``mixed``: each gang's tasks of two templates, interleaved in the turn)."""
    n = rng.choice([10, 37, 100])
    cpu = rng.choice(["8", "32"])
    nodes = [o.NodeSpec(name=f"n{i:03d}", allocatable={"cpu": cpu, "memory": "256Gi", "pods": 110})
             for i in range(n)]
    jobs, tasks = [], []
    for j in range(rng.randint(2, 6)):
        size = rng.randint(1, 3 * n)
        jobs.append(o.JobSpec(name=f"g{j}", namespace="ns", queue="default", min_member=rng.randint(1, size),
                              phase="Inqueue"))
        req = {"cpu": rng.choice(["1", "3"]), "memory": "16Gi"}
        other = {"cpu": "2", "memory": rng.choice(["8Gi", "16Gi"])}
        tasks.extend(o.TaskSpec(name=f"g{j}-{t}", namespace="ns", job=f"g{j}",
                                requests=dict(other if mixed and rng.random() < 0.4 else req))
                     for t in range(size))
    return o.ClusterSpec(nodes=nodes, queues=[o.QueueSpec(name="default")], jobs=jobs, tasks=tasks)


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("seed", range(4))
def test_gangs_on_equal_nodes(monkeypatch, config, seed):
    """Ties everywhere, gangs larger than the cluster holds (discarded turns), several per queue."""
    rng = random.Random(7900 + seed)
    counts = both(monkeypatch, gang_cluster(rng, mixed=seed % 2 == 1), CONFIGS[config], seed)
    assert counts["chosen"] > 10


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_the_runs_refreshed_rows_are_the_vectors_computed_afresh(monkeypatch, config):
    """After every choice the run made, its template's parts equal their twins computed afresh and its
    board equals the parts combined afresh (`_Template._combine_all`): the rows the run refreshed
    between its draws are what the per-task path would have found."""
    real = runchoice.RunChoice.choose
    checked = []

    def choose(self, task):
        got = real(self, task)
        t = self.template
        if got is None or t is None:
            return got
        for part in t.parts:
            fresh = part.twin(*part.args)
            if part.local.one is not None:
                assert list(part.vec) == np.asarray(fresh, dtype=part.dtype).tolist()
        board = t.board
        t._combine_all(self.size)
        fresh_board = t.board
        t.board = board
        assert (board.ok, board.idle, board.total, board.cls, board.count) == (
            fresh_board.ok, fresh_board.idle, fresh_board.total, fresh_board.cls, fresh_board.count)
        assert {c: {v: list(g) for v, g in gs.items()} for c, gs in enumerate(board.groups)} == {
            c: {v: list(g) for v, g in gs.items()} for c, gs in enumerate(fresh_board.groups)}
        checked.append(True)
        return got

    monkeypatch.setattr(runchoice.RunChoice, "choose", choose)
    rng = random.Random(8100)
    spec = gang_cluster(rng, mixed=True)
    run_cycle(cache_of(spec, FastPathSettings(kernels=True)).snapshot(), load_config(CONFIGS[config]), seed=1)
    assert len(checked) > 10  # the run really chose


def test_a_run_opens_only_for_the_genuine_choice_whatever_was_imported_first(monkeypatch):
    """runchoice imported while a test's stand-in for `batch.choose` is in place (a test file run
    alone patches it before anything imports allocate) must still tell the genuine choice from a
    stand-in: a session choosing with the genuine one gets a run, one choosing with a stand-in none."""
    import importlib.util

    from busched.builtin import open_session
    from busched.fastpath import batch

    def stand_in(*a, **kw):
        return None

    monkeypatch.setattr(batch, "choose", stand_in)
    spec = importlib.util.spec_from_file_location("runchoice_imported_under_a_stand_in", runchoice.__file__)
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)  # a first import under the stand-in (sys.modules untouched)
    monkeypatch.undo()
    rng = random.Random(8200)
    cluster = gang_cluster(rng)
    ssn = open_session(cache_of(cluster, FastPathSettings(kernels=True)).snapshot(),
                       load_config(CONFIGS["default"]), seed=0)
    nodes = ssn.node_list
    assert ssn.fast.batch_choose is batch.choose
    assert fresh.RunChoice.open(ssn, nodes, ssn.predicate_for_allocate, len(nodes)) is not None
    ssn.fast.batch_choose = stand_in
    assert fresh.RunChoice.open(ssn, nodes, ssn.predicate_for_allocate, len(nodes)) is None


def one_use_templates(declined: bool, n: int = 100) -> o.ClusterSpec:
    """One gang whose every task is a template of its own (its own annotation); ``declined``: some
    nodes with PreferNoSchedule taints, which the kept vectors decline."""
    taint = [{"key": "k", "value": "v", "effect": "PreferNoSchedule"}]
    nodes = [o.NodeSpec(name=f"n{i:03d}", allocatable={"cpu": "64", "memory": "256Gi", "pods": 110},
                        taints=taint if declined and i % 4 == 0 else [])
             for i in range(12)]
    jobs = [o.JobSpec(name="g", namespace="ns", queue="default", min_member=n, phase="Inqueue")]
    tasks = [o.TaskSpec(name=f"g-{t}", namespace="ns", job="g", requests={"cpu": "1", "memory": "1Gi"},
                        annotations={"idx": str(t)}) for t in range(n)]
    return o.ClusterSpec(nodes=nodes, queues=[o.QueueSpec(name="default")], jobs=jobs, tasks=tasks)


@pytest.mark.parametrize("declined", [True, False])
def test_a_run_keeps_the_trial_count_of_one_use_templates(monkeypatch, declined):
    """`batch`'s trial stops building templates after `batch.TRIAL` that were never used again; a
    template the run found or built and then passed to the per-task path (declined, say) is found
    there again, and must not count as reused twice: the templates built and reused are the run-off
    path's."""
    from busched.fastpath import batch

    real_open = runchoice.RunChoice.open
    ends = {}
    for on in (True, False):
        monkeypatch.setattr(runchoice.RunChoice, "open", real_open if on else classmethod(lambda cls, *a, **kw: None))

        def before_close(ssn, on=on):
            kept = ssn.arrays.cache.get(batch._KEY)
            ends[on] = (kept.built, kept.reused)

        ssn = run_cycle(cache_of(one_use_templates(declined), FastPathSettings(kernels=True)).snapshot(),
                        load_config(CONFIGS["default"]), seed=1, before_close=before_close)
        ends[on, "decisions"] = outcome(ssn)["decisions"]
    assert ends[True, "decisions"] == ends[False, "decisions"] and ends[True, "decisions"]
    assert ends[True] == ends[False]
    if declined:
        assert ends[False] == (batch.TRIAL, 0)  # the trial really stopped building


def plain_gang(n_nodes: int, n_tasks: int, min_member: int = 0, **task_fields) -> o.ClusterSpec:
    """One gang of one template on equal plain nodes (every choice the run's to make)."""
    nodes = [o.NodeSpec(name=f"n{i:03d}", allocatable={"cpu": str(4 + i % 5), "memory": "64Gi", "pods": 110})
             for i in range(n_nodes)]
    jobs = [o.JobSpec(name="a", namespace="ns", queue="default", min_member=min_member or n_tasks, phase="Inqueue")]
    tasks = [o.TaskSpec(name=f"a-{t}", namespace="ns", job="a", requests={"cpu": "1", "memory": "1Gi"},
                        labels={"app": "a"}, **task_fields) for t in range(n_tasks)]
    return o.ClusterSpec(nodes=nodes, queues=[o.QueueSpec(name="default")], jobs=jobs, tasks=tasks)


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("seed", range(2))
def test_nominated_replicas_of_a_plain_template_take_the_per_task_path(monkeypatch, config, seed):
    """A replica nominated to a node is tried there first by the per-task path; the run, which draws
    from the whole board, must leave it alone while choosing for its plain siblings."""
    spec = plain_gang(20, 12)
    tasks = [msgspec.structs.replace(t, nominated_node_name="n007") if i % 3 == 1 else t
             for i, t in enumerate(spec.tasks)]
    counts = both(monkeypatch, msgspec.structs.replace(spec, tasks=tasks), CONFIGS[config], seed)
    assert counts["chosen"] >= 4  # the run chose for the others


@pytest.mark.parametrize("mode", ["soft", "hard"])
@pytest.mark.parametrize("seed", range(2))
def test_a_sharded_scheduler_takes_the_per_task_path(monkeypatch, mode, seed):
    """A scheduler with a node shard, soft (its own nodes first) or hard (only its own nodes), searches
    other node lists than the board's: no run, and the same decisions as the per-task path."""
    def shard(cache):
        cache.own_shard = ("s1", mode)
        cache.upsert("nodeShard", o.NodeShardSpec(name="s1", nodes_desired=["n003", "n004"]))

    counts = both(monkeypatch, plain_gang(20, 10), CONFIGS["default"], seed, prepare=shard)
    assert counts["chosen"] == 0


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_a_pre_predicate_failure_in_a_runs_turn_is_recorded_as_the_per_task_path_does(monkeypatch, config):
    """A replica whose required node affinity leaves no node (two metadata.name fields that cannot
    both hold) fails its pre-predicates in the middle of a run's turn: its fit errors and the job's
    are the per-task path's, and the run goes on choosing for the rest."""
    impossible = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["x"]},
                         {"key": "metadata.name", "operator": "In", "values": ["y"]}]}]}}}
    spec = plain_gang(10, 8, min_member=7)
    tasks = [msgspec.structs.replace(t, affinity=impossible) if i == 3 else t for i, t in enumerate(spec.tasks)]
    counts = both(monkeypatch, msgspec.structs.replace(spec, tasks=tasks), CONFIGS[config], 0)
    assert counts["chosen"] >= 3


def test_a_row_function_that_raises_leaves_the_choice_to_the_per_task_path(monkeypatch):
    """The node order's row function (`Local.one`, which refreshes a template's scores on the rows
    placed on) raising in the run: the run drops the template and the per-task path decides, as it
    does when `batch.choose` meets the same error; the cycle goes on, with the same decisions."""
    from busched.fastpath import nodeorder as nodeorder_kernel
    from busched.fastpath import rowlocal

    real_local = nodeorder_kernel.batch_node_order_local
    calls = {"one": 0, "raised": 0}

    def local(plugin, task, arrays):
        got = real_local(plugin, task, arrays)
        if got is None or got.one is None:
            return got
        real_one = got.one

        def one(row):
            calls["one"] += 1
            if calls["one"] % 3 == 0:
                calls["raised"] += 1
                raise RuntimeError("a row function's error")
            return real_one(row)

        return rowlocal.Local(got.logs, one, got.still)

    monkeypatch.setattr(nodeorder_kernel, "batch_node_order_local", local)
    spec = plain_gang(30, 40, min_member=10)
    counts = both(monkeypatch, spec, CONFIGS["default"], 0)
    assert calls["raised"] and counts["chosen"] > 5


def test_a_nan_score_leaves_the_choice_to_the_per_task_path(monkeypatch):
    """A node order whose refreshed score is NaN (`Local.one` answering NaN for the rows placed on):
    the board's best is NaN, the run draws nothing and the per-task path (which scores node by node)
    decides, as it does when `batch.choose` meets the NaN."""
    from busched.fastpath import nodeorder as nodeorder_kernel
    from busched.fastpath import rowlocal

    real_local = nodeorder_kernel.batch_node_order_local
    nans = []

    def local(plugin, task, arrays):
        got = real_local(plugin, task, arrays)
        if got is None or got.one is None:
            return got

        def one(row):
            nans.append(row)
            return float("nan")

        return rowlocal.Local(got.logs, one, got.still)

    monkeypatch.setattr(nodeorder_kernel, "batch_node_order_local", local)
    counts = both(monkeypatch, plain_gang(30, 40, min_member=10), CONFIGS["default"], 0)
    assert nans and counts["passed"] > 0 and counts["chosen"] > 0, (len(nans), counts)
