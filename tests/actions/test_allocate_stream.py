"""Allocate's turns for a stream of single-task jobs (busched.actions.allocate_stream) against the
per-job path (execute's loop, ``AllocateAction.stream_turns`` off), which is the reference.

Whole cycles on random clusters (nodes of several shapes, some tainted, cordoned, labelled, running
work) with random job streams: single-task jobs of several templates (one of them infeasible
anywhere, some pinned by a selector), in one queue or two, with priorities, interleaved with gangs
and pending jobs, so streams start, end at a job with more than one task, at the other queue's turn,
at an overused queue, and take turns that fail.  Decisions in order, podgroup phases, pipelined
tasks, fit errors, conditions, the search's rotated start, the random source's state, drf's and
proportion's state and every job's maps must be equal, over two cycles of one cache (the second
reads the unfit memo the first left), also without gang (jobs pushed back with tasks waiting, a
higher-priority one then ahead of the job queue's sorted head).  The first cycle also against the
kernels off (the plain path).
Planted: a stream that skips `overused`, or flushes the handler run only when it ends and tells
drf of nothing, is caught.
"""

from __future__ import annotations

import random

import msgspec
import pytest

from busched.actions import allocate, allocate_stream, allocate_topology
from busched.api import k8s_specs
from busched.api import objects as o
from busched.builtin import run_cycle
from busched.fastpath import FastPathSettings
from busched.framework.config import DEFAULT_CONFIG, load_config
from busched.framework.session import Session
from tests.fastpath.test_kernels_select import CONFIGS, outcome
from tests.framework.test_handler_runs import _handlers_state, _job_state
from tests.kernel_cases import cache_of, random_cluster


def with_stream(rng: random.Random, spec: o.ClusterSpec) -> o.ClusterSpec:
    """``spec`` plus a stream of single-task jobs of a few templates, gangs now and then."""
    jobs, tasks = list(spec.jobs), list(spec.tasks)
    templates = []
    for _ in range(rng.randint(1, 4)):
        req = {"cpu": rng.choice(["250m", "1", "3"]), "memory": rng.choice(["512Mi", "2Gi"])}
        selector = {"zone": rng.choice(["a", "b"])} if rng.random() < 0.25 else {}
        templates.append((req, selector))
    templates.append(({"cpu": "200", "memory": "1Gi"}, {}))  # fits nowhere
    one_queue = rng.random() < 0.6
    if one_queue:  # the cluster's own jobs too: a stream starts at the first turn
        jobs = [msgspec.structs.replace(j, queue="q1") for j in jobs]
    for j in range(rng.randint(15, 70)):
        name = f"st{j:03d}"
        queue = "q1" if one_queue or rng.random() < 0.8 else "q2"
        pc = rng.choice(["", "", "", "high", "low"])
        size = 1 if rng.random() < 0.9 else rng.choice([2, 3])
        req, selector = templates[0] if rng.random() < 0.5 else rng.choice(templates)
        jobs.append(o.JobSpec(name=name, namespace="ns", queue=queue, min_member=rng.randint(1, size),
                              priority_class_name=pc, phase=rng.choice(["Inqueue", "Inqueue", "Pending"])))
        for t in range(size):
            tasks.append(o.TaskSpec(name=f"{name}-{t}", namespace="ns", job=name, requests=dict(req),
                                    node_selector=dict(selector), priority_class_name=pc))
    return msgspec.structs.replace(spec, jobs=jobs, tasks=tasks)


# without gang a job with tasks still waiting after its turn is pushed back, and one of higher priority
# then waits in the job queue's heap ahead of its sorted head: the stream's ``peek`` must show it
STREAM_CONFIGS = dict(CONFIGS, nogang=DEFAULT_CONFIG.replace("  - name: gang\n    enablePreemptable: false\n", ""))
assert STREAM_CONFIGS["nogang"] != DEFAULT_CONFIG

ASKED = ("overused", "allocatable", "job_ready", "job_pipelined", "pre_predicate_fn")


def traced(monkeypatch, calls: list) -> None:
    """Record every ask of the session's queue and job checks, in order, with what was asked."""
    for name in ASKED:
        real = getattr(Session, name)

        def wrapped(self, *a, _name=name, _real=real):
            got = _real(self, *a)
            calls.append((_name, *(getattr(x, "uid", None) for x in a), got))
            return got

        monkeypatch.setattr(Session, name, wrapped)


def run(spec: o.ClusterSpec, config: str, seed: int, kernels: bool = True, monkeypatch=None) -> list[dict]:
    """Two cycles over one cache: each one's outcome and state at its close (with ``monkeypatch``,
    also every queue and job check asked, in order)."""
    cache = cache_of(spec, FastPathSettings(kernels=kernels))
    got = []
    calls: list = []
    if monkeypatch is not None:
        traced(monkeypatch, calls)
    for cycle in range(2):
        ends: dict = {}

        def before_close(ssn, ends=ends):
            ends["handlers"] = _handlers_state(ssn)
            ends["jobs"] = {u: _job_state(j) for u, j in sorted(ssn.jobs.items())}
            # what a discard left on each task (a commit clears it; gang's close reads it)
            ends["last_status"] = sorted((t.key, str(t.last_status), t.last_node)
                                         for j in ssn.jobs.values() for t in j.tasks.values())

        ssn = run_cycle(cache.snapshot(), load_config(config), seed=seed + cycle, before_close=before_close)
        one = outcome(ssn)
        one["rng"] = ssn.rng.random()  # the same draws were made
        one.update(ends)
        if monkeypatch is not None:
            one["asked"], calls[:] = list(calls), []
        got.append(one)
    return got


def cluster(seed: int) -> o.ClusterSpec:
    rng = random.Random(4700 + seed)
    base = random_cluster(rng, nodes=rng.choice([8, 40, 150]), jobs=rng.randint(0, 4), fancy=seed % 3 != 2)
    return with_stream(rng, base)


def counted(monkeypatch) -> dict:
    """Count the streams and the turns taken in them."""
    counts = {"streams": 0, "turns": 0}
    real_stream, real_turn = allocate_stream.stream, allocate_stream._turn

    def stream(*a, **kw):
        counts["streams"] += 1
        return real_stream(*a, **kw)

    def turn(*a, **kw):
        counts["turns"] += 1
        return real_turn(*a, **kw)

    monkeypatch.setattr(allocate_stream, "stream", stream)
    monkeypatch.setattr(allocate_stream, "_turn", turn)
    return counts


@pytest.mark.parametrize("config", sorted(STREAM_CONFIGS))
@pytest.mark.parametrize("seed", range(6))
def test_a_stream_decides_as_the_per_job_path(monkeypatch, config, seed):
    spec = cluster(seed)
    with monkeypatch.context() as m:
        now = run(spec, STREAM_CONFIGS[config], seed, monkeypatch=m)
    assert now[0]["decisions"], "nothing placed: the comparison would be empty"
    with monkeypatch.context() as m:
        m.setattr(allocate.AllocateAction, "stream_turns", False)
        counts = counted(m)
        before = run(spec, STREAM_CONFIGS[config], seed, monkeypatch=m)
    assert counts["streams"] == 0
    assert now == before  # (with every check asked, in the same order, with the same answers)
    for one in now:
        one.pop("asked")
    # the first cycle against the kernels off (the second reads the unfit memo, a kernels-on shortcut
    # whose fit errors are the first cycle's, not counted afresh)
    a, b = now[0], run(spec, STREAM_CONFIGS[config], seed, kernels=False)[0]
    for k in ("handlers", "jobs"):  # (the plain path's plugin bookkeeping may be kept differently)
        a.pop(k)
        b.pop(k)
    assert a == b


def test_streams_end_where_execute_takes_over(monkeypatch):
    """Across the seeds, streams end at each of their ends: no job left, a job the stream does not
    take (more than one task waiting, or the queue's turn given back to execute)."""
    ends = {"empty": 0, "other": 0, "overused": 0}
    counts = counted(monkeypatch)
    real_stream = allocate_stream.stream

    def stream(action, queue, jobs, *a, **kw):
        got = real_stream(action, queue, jobs, *a, **kw)
        ends["overused" if not got else "empty" if jobs.empty() else "other"] += 1
        return got

    monkeypatch.setattr(allocate_stream, "stream", stream)
    with_streams = 0
    for seed in range(6):
        before = counts["turns"]
        run(cluster(seed), CONFIGS["default"], seed)
        with_streams += counts["turns"] > before
    assert ends["empty"] > 0 and ends["other"] > 0, ends
    assert counts["turns"] > 4 * counts["streams"], counts  # streams of many turns
    assert with_streams >= 3  # (the others keep two queues live: no stream, execute's loop throughout)


def overused_cluster(jobs: int) -> o.ClusterSpec:
    """q1 (weight 2) asks for more than its deserved, two thirds of the cluster in every resource
    (32 cpu, 128Gi, 32 pods: 32 of its tasks), as q2 (weight 1) asks for more than a third with a
    gang that fits nowhere.  Once q2's turn is over q1 is alone, and its stream must stop where q1
    becomes overused."""
    nodes = [o.NodeSpec(name=f"node-{i}", allocatable={"cpu": "8", "memory": "32Gi", "pods": 8}) for i in range(6)]
    specs = [o.JobSpec(name="big", namespace="ns", queue="q2", min_member=30, phase="Inqueue")]
    tasks = [o.TaskSpec(name=f"big-{t}", namespace="ns", job="big", requests={"cpu": "9", "memory": "8Gi"})
             for t in range(30)]
    for j in range(jobs):
        specs.append(o.JobSpec(name=f"st{j:03d}", namespace="ns", queue="q1", min_member=1, phase="Inqueue"))
        tasks.append(o.TaskSpec(name=f"st{j:03d}-0", namespace="ns", job=f"st{j:03d}",
                                requests={"cpu": "1", "memory": "4Gi"}))
    return o.ClusterSpec(nodes=nodes, tasks=tasks, jobs=specs,
                         queues=[o.QueueSpec(name="q1", weight=2), o.QueueSpec(name="q2")])


def test_a_stream_stops_at_an_overused_queue(monkeypatch):
    """A stream asks ``overused`` before every turn, as execute does: q1 stops at its deserved (32
    of 48 cpu).  Planted: a stream that never asks it (``allocatable`` then refuses every task, so
    the decisions stay the same) is caught by the checks' trace."""
    spec = overused_cluster(60)
    ends: list[bool] = []
    real_stream = allocate_stream.stream

    def stream(*a, **kw):
        ends.append(real_stream(*a, **kw))
        return ends[-1]

    with monkeypatch.context() as m:
        m.setattr(allocate_stream, "stream", stream)
        now = run(spec, CONFIGS["default"], 0, monkeypatch=m)
    assert False in ends  # a stream ended at the overused queue
    assert len([d for d in now[0]["decisions"] if d[0] == "bind"]) == 32
    assert any(c[0] == "overused" and c[-1] is True for c in now[0]["asked"])
    with monkeypatch.context() as m:
        m.setattr(allocate.AllocateAction, "stream_turns", False)
        assert run(spec, CONFIGS["default"], 0, monkeypatch=m) == now

    def never_overused(action, *a, **kw):
        action.ssn.overused = lambda q: False
        return real_stream(action, *a, **kw)

    with monkeypatch.context() as m:
        m.setattr(allocate_stream, "stream", never_overused)
        bad = run(spec, CONFIGS["default"], 0, monkeypatch=m)
    assert bad != now
    assert [c[:-1] for c in bad[0]["asked"]] != [c[:-1] for c in now[0]["asked"]]


def refused_cluster(nowhere_first: bool) -> o.ClusterSpec:
    """One queue (q1, capability 3 cpu) whose first job's turn is a stream turn that ends neither
    ready nor pipelined without a task found to fit nowhere: its one task asks 5 cpu, refused by
    ``allocatable``.  With ``nowhere_first`` a job whose task fits nowhere (a selector no node has)
    takes the first turn before it, leaving the action's ``turn_unfit`` set.  Single-task jobs of
    1 cpu follow."""
    nodes = [o.NodeSpec(name=f"node-{i}", allocatable={"cpu": "8", "memory": "32Gi", "pods": 8},
                        labels={"zone": "a"}) for i in range(2)]
    specs, tasks = [], []

    def job(name: str, pc: str, cpu: str, selector: dict) -> None:
        specs.append(o.JobSpec(name=name, namespace="ns", queue="q1", min_member=1, phase="Inqueue",
                               priority_class_name=pc))
        tasks.append(o.TaskSpec(name=f"{name}-0", namespace="ns", job=name, requests={"cpu": cpu, "memory": "1Gi"},
                                node_selector=selector, priority_class_name=pc))

    if nowhere_first:
        job("nowhere", "top", "1", {"zone": "z"})
    job("refused", "high", "5", {})
    for j in range(4):
        job(f"st{j:03d}", "", "1", {})
    return o.ClusterSpec(nodes=nodes, tasks=tasks, jobs=specs, queues=[o.QueueSpec(name="q1", capability={"cpu": "3"})],
                         priority_classes=[o.PriorityClassSpec(name="top", value=2000),
                                           o.PriorityClassSpec(name="high", value=1000)])


@pytest.mark.parametrize("nowhere_first", [False, True])
def test_a_refused_stream_turn_clears_turn_unfit(monkeypatch, nowhere_first):
    """A stream turn that is neither ready nor pipelined is remembered as unfit only when that turn
    found its task to fit nowhere (`_turn` clears the action's ``turn_unfit`` first, as
    `AllocateAction.allocate_tasks` does): as the action's first turn it must not read an unset
    flag, after a turn that did find no fit it must not read that turn's.  Two cycles: the second
    reads the unfit memo the first left, and must ask ``allocatable`` of the refused job again."""
    spec = refused_cluster(nowhere_first)
    counts = counted(monkeypatch)
    with monkeypatch.context() as m:
        now = run(spec, CONFIGS["default"], 0, monkeypatch=m)
    assert counts["turns"] >= 4, counts  # the refused job's turn and the others' in streams
    for one in now:
        assert any(c[0] == "allocatable" and c[-1] is False for c in one["asked"])  # the refused job asked
        assert len([d for d in one["decisions"] if d[0] == "bind"]) == 3  # q1's capability
    with monkeypatch.context() as m:
        m.setattr(allocate.AllocateAction, "stream_turns", False)
        assert run(spec, CONFIGS["default"], 0, monkeypatch=m) == now


def routed(spec: o.ClusterSpec, rng: random.Random) -> o.ClusterSpec:
    """``spec`` with about one stream job in four (single-task and multi-task alike) taking the
    topology path (`allocate_topology.routes`): a hard network topology or a sub-group policy."""
    jobs = list(spec.jobs)
    for i, j in enumerate(jobs):
        if j.name.startswith("st") and rng.random() < 0.25:
            if rng.random() < 0.5:
                jobs[i] = msgspec.structs.replace(j, network_topology=k8s_specs.NetworkTopology(
                    mode="hard", highest_tier_allowed=1))
            else:
                jobs[i] = msgspec.structs.replace(j, sub_group_policy=[
                    k8s_specs.SubGroupPolicy(name="p", sub_group_size=1, match_label_keys=["r"])])
    return msgspec.structs.replace(spec, jobs=jobs)


def test_a_stream_ends_at_a_job_that_takes_the_topology_path(monkeypatch):
    """A single-task job with a hard network topology or a sub-group policy is execute's (its turn
    goes through `allocate_topology`): the stream ends before it, and the cycles decide as the per-job
    path.  Across the seeds streams do end there, at single-task jobs."""
    ended: list[int] = []  # the tasks of each job a stream ended at for its topology path
    real_stream, real_routes = allocate_stream.stream, allocate_topology.routes
    inside = [False]

    def stream(*a, **kw):
        inside[0] = True
        try:
            return real_stream(*a, **kw)
        finally:
            inside[0] = False

    def routes(job):
        got = real_routes(job)
        if inside[0] and got:
            ended.append(len(job.tasks))
        return got

    for seed in range(4):
        spec = routed(cluster(seed), random.Random(seed))
        with monkeypatch.context() as m:
            m.setattr(allocate_stream, "stream", stream)
            m.setattr(allocate_topology, "routes", routes)
            now = run(spec, CONFIGS["default"], seed, monkeypatch=m)
        with monkeypatch.context() as m:
            m.setattr(allocate.AllocateAction, "stream_turns", False)
            assert run(spec, CONFIGS["default"], seed, monkeypatch=m) == now, seed
    assert 1 in ended, ended
