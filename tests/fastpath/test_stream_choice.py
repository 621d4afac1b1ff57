"""A stream's choices on sampled searches (busched.fastpath.streamchoice: the template held across the
stream's turns, the draw from its kept windows) against the per-task path (``AllocateAction.
stream_choice`` off: every choice through `PredicateHelper.chosen_found` -> `batch.choose` ->
`pick_window` -> `best_node`), which is the reference.

Whole cycles, two per cache (the second reads the unfit memo the first left), on clusters whose
searches are sampled (more than 100 nodes): random clusters (node shapes, taints, cordons, labels,
running work) with random streams of single-task jobs of a few templates (one fitting nowhere, some
pinned by a selector, priorities, one queue or two, gangs now and then), `busched bench
throughput`'s shape (equal nodes, one template, ties everywhere) small and dense enough for nodes to
fill (the walks widen past full nodes, windows forgotten), and two templates interleaved.  Every
decision in order, the phases, pipelined tasks, fit errors, conditions, the rotated search start,
the random source's state, drf's and proportion's state, every job's maps and sums, the trace of
every queue and job check asked, and the kept templates' trial counts must be equal; the stream's
choice must really have chosen, and its windows really answered.
"""

from __future__ import annotations

import random

import pytest

from busched.actions import allocate
from busched.api import objects as o
from busched.builtin import run_cycle
from busched.fastpath import FastPathSettings, batch, streamchoice, windows
from busched.framework.config import load_config
from tests.actions.test_allocate_stream import STREAM_CONFIGS, traced, with_stream
from tests.fastpath.test_kernels_select import CONFIGS, outcome
from tests.framework.test_handler_runs import _handlers_state, _job_state
from tests.kernel_cases import cache_of, random_cluster


def run(spec: o.ClusterSpec, config: str, seed: int, monkeypatch) -> list[dict]:
    """Two cycles over one cache: each one's outcome, state at close and checks asked."""
    cache = cache_of(spec, FastPathSettings(kernels=True))
    calls: list = []
    traced(monkeypatch, calls)
    got = []
    for cycle in range(2):
        ends: dict = {}

        def before_close(ssn, ends=ends):
            ends["handlers"] = _handlers_state(ssn)
            ends["jobs"] = {u: _job_state(j) for u, j in sorted(ssn.jobs.items())}
            ends["last_status"] = sorted((t.key, str(t.last_status), t.last_node)
                                         for j in ssn.jobs.values() for t in j.tasks.values())
            kept = ssn.arrays.cache.get(batch._KEY)
            ends["templates"] = None if kept is None else (kept.built, kept.reused, len(kept))
            ends["nodes"] = {n.name: (list(n.tasks), n.idle.cpu, n.idle.memory, sorted(n.idle.scalars.items()))
                             for n in ssn.node_list}

        ssn = run_cycle(cache.snapshot(), load_config(config), seed=seed + cycle, before_close=before_close)
        one = outcome(ssn)
        one["rng"] = ssn.rng.random()  # the same draws were made
        one.update(ends)
        one["asked"], calls[:] = list(calls), []
        got.append(one)
    return got


def counted(monkeypatch) -> dict:
    """Count the stream's choices made (and passed) and the draws its kept windows answered."""
    counts = {"chosen": 0, "passed": 0, "windows": 0, "left": 0}
    real_choose = streamchoice.StreamChoice.choose
    real_pick, real_left = windows.Windows.pick, windows.pick_window

    def choose(self, task):
        got = real_choose(self, task)
        counts["chosen" if got is not None else "passed"] += 1
        return got

    def pick(self, *a, **kw):
        counts["windows"] += 1
        return real_pick(self, *a, **kw)

    def left(*a, **kw):
        counts["left"] += 1
        return real_left(*a, **kw)

    monkeypatch.setattr(streamchoice.StreamChoice, "choose", choose)
    monkeypatch.setattr(windows.Windows, "pick", pick)
    monkeypatch.setattr(windows, "pick_window", left)
    return counts


def both(monkeypatch, spec: o.ClusterSpec, config: str, seed: int) -> dict:
    with monkeypatch.context() as m:
        counts = counted(m)
        now = run(spec, config, seed, m)
    with monkeypatch.context() as m:
        m.setattr(allocate.AllocateAction, "stream_choice", False)
        off = counted(m)
        before = run(spec, config, seed, m)
    assert now[0]["decisions"], "nothing placed: the comparison would be empty"
    assert off["chosen"] == off["passed"] == off["windows"] == 0  # the reference never asked the stream's choice
    assert now == before
    return counts


def sampled_cluster(seed: int) -> o.ClusterSpec:
    rng = random.Random(5100 + seed)
    base = random_cluster(rng, nodes=rng.choice([120, 260, 450]), jobs=rng.randint(0, 4), fancy=seed % 3 == 0)
    return with_stream(rng, base)


@pytest.mark.parametrize("config", sorted(STREAM_CONFIGS))
@pytest.mark.parametrize("seed", range(6))
def test_a_streams_sampled_choices_are_the_per_task_paths(monkeypatch, config, seed):
    counts = both(monkeypatch, sampled_cluster(seed), STREAM_CONFIGS[config], seed)
    if seed % 3 == 0:
        # fancy clusters (PreferNoSchedule taints): templates the kept vectors decline, the stream's
        # choice passes them to the per-task path
        assert counts["passed"] > 5, counts
    else:
        assert counts["chosen"] > 5, counts  # the stream's choice really chose


def bench_like(nodes: int, jobs: int, cpu: str, templates: int = 1, pods: int = 110, gang: int = 0) -> o.ClusterSpec:
    """`busched bench throughput`'s shape: equal nodes, single-task jobs of ``templates`` shapes
    (interleaved), one queue; ``gang``: halfway, a job of that many tasks of another shape (it ends
    the stream, and its placements change more rows than a template's refresh takes one by one)."""
    node_specs = [o.NodeSpec(name=f"node-{i:04d}", allocatable={"cpu": cpu, "memory": "64Gi", "pods": pods})
                  for i in range(nodes)]
    shapes = [{"cpu": "1", "memory": "4Gi"}, {"cpu": "2", "memory": "1Gi"}, {"cpu": "500m", "memory": "2Gi"}]
    specs, tasks = [], []
    for j in range(jobs):
        name = f"job{j:05d}"
        size = gang if gang and j == jobs // 2 else 1
        specs.append(o.JobSpec(name=name, namespace="ns", queue="default", min_member=size, phase="Inqueue"))
        for t in range(size):
            shape = shapes[j % templates if j % 7 else (j // 7) % templates]
            req = {"cpu": "3", "memory": "3Gi"} if size > 1 else shape
            tasks.append(o.TaskSpec(name=f"{name}-{t}", namespace="ns", job=name, requests=dict(req)))
    return o.ClusterSpec(nodes=node_specs, queues=[o.QueueSpec(name="default")], jobs=specs, tasks=tasks)


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("shape", ["roomy", "dense", "two-templates", "pod-limited", "gang-between"])
def test_throughputs_shape(monkeypatch, config, shape):
    """Equal nodes and one queue of single-task jobs: every choice ties, the windows come round again.
    Dense: nodes fill and fail, the walks widen past them and their windows are looked at afresh;
    pod-limited: nodes fill by their pod count (the predicates' kept filter); gang-between: a gang's
    turn between two streams changes many rows at once (the template recombined whole, every window
    forgotten)."""
    spec = {
        "roomy": lambda: bench_like(400, 900, "32"),
        "dense": lambda: bench_like(150, 700, "4"),
        "two-templates": lambda: bench_like(300, 800, "16", templates=2),
        "pod-limited": lambda: bench_like(200, 700, "64", templates=3, pods=3),
        "gang-between": lambda: bench_like(150, 500, "32", gang=60),
    }[shape]()
    counts = both(monkeypatch, spec, CONFIGS[config], 0)
    assert counts["chosen"] > 300, counts
    assert counts["windows"] > 300 and counts["left"] < counts["windows"], counts  # the windows answered


TENTH = CONFIGS["default"] + "nodeSearch:\n  percentageNodesToFind: 10\n"  # walks of 100 of 1,000 nodes


@pytest.mark.parametrize("nodes", [1003, 1000])
def test_a_streams_kept_windows_stay_few_on_any_cluster_size(monkeypatch, nodes):
    """The review of tp8: on a cluster whose size is not a multiple of the walk's length the starts
    drift every lap and a window kept at every new start piled up (one per start, each placed row
    walked into hundreds).  Whole cycles on 1,003 nodes (and 1,000, the starts coming round): the
    kept windows stay about one per start of a lap, and the choices are still the per-task path's."""
    seen = {"most": 0, "bound": 0}
    real = windows.Windows.pick

    def pick(self, ok, idle, total, start, to_find, rng):
        got = real(self, ok, idle, total, start, to_find, rng)
        seen["most"] = max(seen["most"], len(self.at))
        seen["bound"] = max(seen["bound"], len(ok) // min(to_find, len(ok)) + 1)
        return got

    with monkeypatch.context() as m:
        m.setattr(windows.Windows, "pick", pick)
        counts = both(m, bench_like(nodes, 1500, "32"), TENTH, 0)
    assert counts["chosen"] > 1000, counts
    assert seen["bound"] == 11 and seen["most"] <= seen["bound"], seen
    if nodes == 1000:
        assert counts["left"] < counts["windows"] // 4, counts  # the starts come round: the windows answer


def releasing(nodes: int = 150, jobs: int = 300, every: int = 3) -> o.ClusterSpec:
    """Nodes of 32 cpu, each running a task of 24 cpu that is being deleted (releasing: 8 cpu idle,
    32 once it is gone), and single-task jobs of 1.5 cpu, every ``every``-th of 31.5: that one fits
    only the future idle, it is pipelined, and its node then stops passing (0.5 cpu of future idle
    left) while it still fits idle (8 cpu) for the small ones."""
    node_specs = [o.NodeSpec(name=f"node-{i:04d}", allocatable={"cpu": "32", "memory": "64Gi", "pods": 110})
                  for i in range(nodes)]
    specs, tasks = [], []
    for i in range(nodes):
        specs.append(o.JobSpec(name=f"run{i}", namespace="ns", queue="default", min_member=1, phase="Running"))
        tasks.append(o.TaskSpec(name=f"run{i}-0", namespace="ns", job=f"run{i}", node=f"node-{i:04d}",
                                phase="Running", deleting=True, requests={"cpu": "24", "memory": "1Gi"}))
    for j in range(jobs):
        name = f"job{j:04d}"
        specs.append(o.JobSpec(name=name, namespace="ns", queue="default", min_member=1, phase="Inqueue"))
        cpu = "31500m" if j % every == every - 1 else "1500m"
        tasks.append(o.TaskSpec(name=f"{name}-0", namespace="ns", job=name, requests={"cpu": cpu, "memory": "1Gi"}))
    return o.ClusterSpec(nodes=node_specs, queues=[o.QueueSpec(name="default")], jobs=specs, tasks=tasks)


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_a_row_that_stops_passing_while_it_still_fits_idle(monkeypatch, config):
    """The review of tp8: a kept window must forget a row that no longer passes even though it still
    fits idle (`batch._Template._combine` tells the windows ``ok`` false, ``idle`` true).  The small
    jobs' template sees the big ones' nodes, pipelined on, stop passing one by one."""
    counts = both(monkeypatch, releasing(), CONFIGS[config], 0)
    assert counts["chosen"] > 150 and counts["windows"] > 150, counts
