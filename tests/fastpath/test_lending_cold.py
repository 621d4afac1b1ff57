"""The cold lending written out as one loop per kind (busched.fastpath.lending_cold) leaves the
snapshot and every record of the shared memo as the one-object methods do
(``SharedMemo.cold_bulk = False``, the reference).

Random clusters (running, pending, ended and deleting tasks, settled gangs with and without a
priority class, jobs with sub-group policies, tasks without a job or on a missing node, cordoned
nodes) are loaded into two caches, one inserting as a restart does; each lends cold, then runs a
cycle (sessions write the lent objects), then lends again cold after the memo dropped its jobs and
nodes (a priority class changed: templates kept, some handed to jobs a session wrote), then patches.
After every lending the lent jobs and nodes field by field, which objects are shared (a settled
job's tasks are the templates, a node's are copies), the memo's records (jobs, templates and their
owners, nodes, the session's order, the log, what was volatile) must be equal.
"""

from __future__ import annotations

import random

import msgspec
import pytest

from busched.api import k8s_specs, settled
from busched.api import objects as o
from busched.api.node import NodeAccountingError
from busched.builtin import run_cycle
from busched.cache.cache import object_key
from busched.fastpath import lending
from busched.framework.config import DEFAULT_CONFIG, load_config
from tests.fastpath.test_kernels_snapshot import EVICTING, mutate, snap_state
from tests.fastpath.test_lazy_first_cycle import _cluster, _full_job
from tests.kernel_cases import cache_of


def _odd_cluster(rng: random.Random) -> o.ClusterSpec:
    """`_cluster` with the cases the cold loop must hand on as the methods do."""
    spec = _cluster(rng)
    nodes = [n.name for n in spec.nodes]
    jobs, tasks = list(spec.jobs), list(spec.tasks)
    for j in range(rng.randint(2, 8)):
        name = f"odd{j}"
        kind = rng.choice(["policy", "ended", "pending", "nojob", "nonode", "binding"])
        policy = [k8s_specs.SubGroupPolicy(name="p", sub_group_size=1, match_label_keys=["r"])]
        jobs.append(o.JobSpec(name=name, namespace="ns", queue="q1", min_member=1,
                              phase="Pending" if kind == "pending" else "Running"))
        if kind == "policy":
            jobs[-1] = msgspec.structs.replace(jobs[-1], sub_group_policy=policy)
        for t in range(rng.randint(1, 3)):
            phase = rng.choice(["Succeeded", "Failed", "Running"]) if kind == "ended" else "Running"
            binding = kind == "binding" and t == 0  # (on a node of its own, which it fits)
            node = "gone" if kind == "nonode" else "spare" if binding else rng.choice(nodes)
            req = {"cpu": "10m"} if binding else {"cpu": rng.choice(["1", "250m"]), "memory": "1Gi",
                                                   "nvidia.com/gpu": rng.choice([0, 1])}
            tasks.append(o.TaskSpec(
                name=f"{name}-{t}", namespace="ns", job="" if kind == "nojob" else name, node=node, phase=phase,
                status="Binding" if binding else "", deleting=rng.random() < 0.1, labels={"r": "a"}, requests=req))
    spare = o.NodeSpec(name="spare", allocatable={"cpu": "64", "memory": "64Gi", "pods": 110})
    return msgspec.structs.replace(spec, nodes=[*spec.nodes, spare], jobs=jobs, tasks=tasks)


def _restart_cache(spec: o.ClusterSpec):  # noqa: ANN202
    """The cache a restart's catch-up fills (`insert_task`, `insert_job`: the lending's templates)."""
    c = cache_of(msgspec.structs.replace(spec, tasks=[], jobs=[]))
    for t in spec.tasks:
        c.insert_task(object_key("task", t), t)
    for j in spec.jobs:
        c.insert_job(object_key("job", j), j)
    return c


def _memo_state(snap, memo) -> dict:  # noqa: ANN001
    """Every record the memo keeps, and which lent objects are shared with which."""
    tasks_of = {id(m.task): key for key, m in memo._tasks.items()}
    return {
        "snap": snap_state(snap),
        "full": {u: _full_job(j) for u, j in snap.jobs.items()},
        "classes": {u: type(j).__name__ for u, j in memo._lent.items()},
        "unsettled": [j.uid for j in snap.unsettled],
        "jobs": {k: (m.spec, m.version, m.prio, m.job.uid, m.phase, m.conditions, m.volatile, m.job.written,
                     m.job is memo._lent.get(k), list(m.job.derived))
                 for k, m in memo._jobs.items()},
        "templates": {k: (m.spec, m.owner.uid if m.owner is not None else None) for k, m in memo._tasks.items()},
        "job_templates": {k: v[0] for k, v in memo._job_templates.items()},
        # a settled job's tasks are the templates themselves; anything else holds its own copies
        "shared": {u: [tasks_of.get(id(t)) for t in j.tasks.values()] for u, j in memo._lent.items()},
        "node_copies": [[tasks_of.get(id(t)) for t in n.tasks.values()] for n in snap.nodes],
        "nodes": {k: (v[0], v[1], v[2], v[3].name, v[3].written, v[3].listeners is memo._listeners)
                  for k, v in memo._nodes.items()},
        "order": (list(memo._lent), list(memo._outputs), list(memo._in_session), memo._pos, memo._node_at,
                  [n.name for n in memo._lent_nodes]),
        "log": [j.uid for j in memo._job_log],
        "counts": (memo.assembled_jobs, memo.assembled_nodes),
    }


def _lent(cache):  # noqa: ANN001, ANN202
    """The snapshot, or the refusal the lending raised."""
    try:
        return cache.snapshot()
    except NodeAccountingError as e:
        return str(e)


@pytest.mark.parametrize("config", [DEFAULT_CONFIG, EVICTING], ids=["default", "evicting"])
@pytest.mark.parametrize("seed", range(8))
def test_cold_lending_equals_one_object_methods(seed: int, config: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    spec = _odd_cluster(rng)
    bulk, ref = (_restart_cache(spec), _restart_cache(spec)) if seed % 2 else (cache_of(spec), cache_of(spec))
    ref._memo.cold_bulk = False
    cfg = load_config(config)
    cold: list[str] = []
    deferred = policies = 0
    for name in ("lend_jobs_cold", "lend_nodes_cold"):  # (counted: the cold loops were taken)
        fn = getattr(lending, name)
        monkeypatch.setattr(lending, name, lambda *a, _fn=fn, _name=name: cold.append(_name) or _fn(*a))
    for rnd in range(4):
        if rnd == 2:  # a priority class changes: the memo assembles every job and node afresh, cold again
            for c in (bulk, ref):
                c.upsert("priorityClass", o.PriorityClassSpec(name="low", value=11 + seed))
        a, b = _lent(bulk), _lent(ref)
        if isinstance(a, str) or isinstance(b, str):  # a node refused a Binding task: the same refusal
            assert a == b, f"round {rnd}"
            # ... left as the reference leaves it (counted per object up to the refusal)
            assert (bulk._memo.assembled_jobs, bulk._memo.assembled_nodes) == \
                (ref._memo.assembled_jobs, ref._memo.assembled_nodes), f"round {rnd}"
            return
        deferred += sum(type(j) is settled.SubJobsLater for j in a.jobs.values())
        policies += sum(bool(j.subgroup_policy and j.sub_jobs) for j in a.jobs.values())
        assert _memo_state(a, bulk._memo) == _memo_state(b, ref._memo), f"round {rnd}"
        sa = run_cycle(a, cfg, seed=seed, uid=f"c{rnd}")
        sb = run_cycle(b, cfg, seed=seed, uid=f"c{rnd}")
        assert [(d.kind, d.task, d.node) for d in sa.decisions] == [(d.kind, d.task, d.node) for d in sb.decisions]
        state = rng.getstate()
        mutate(rng, bulk)
        rng.setstate(state)
        mutate(rng, ref)
    # the first lending and the one after the priority class (at least) took the cold loops
    assert cold[:2] == ["lend_nodes_cold", "lend_jobs_cold"]
    assert cold.count("lend_jobs_cold") >= 2 and cold.count("lend_nodes_cold") >= 2
    assert deferred > 0  # settled jobs were lent with their sub-jobs to fill in later
    assert policies or not any(j.sub_group_policy for j in spec.jobs)


@pytest.mark.parametrize("cold_bulk", [True, False])
def test_nodes_start_from_the_validation_conversion(cold_bulk: bool) -> None:
    """A node's first assembly is the very object the cache converted to validate it (converted once,
    not twice), its index set; a node whose spec changed since is converted again."""
    rng = random.Random(3)
    spec = _odd_cluster(rng)
    cache = cache_of(spec)
    cache._memo.cold_bulk = cold_bulk
    kept = {name: node for name, (_, node) in cache._memo._node_templates.items()}
    first = spec.nodes[0]
    cache.upsert("node", msgspec.structs.replace(first, labels={"zone": "moved"}))  # a new template for it
    kept.pop(first.name)
    snap = cache.snapshot()
    ready = [n for n in snap.nodes if n.name in kept]
    assert ready and all(n is kept[n.name] for n in ready)
    assert [n.index for n in snap.nodes] == list(range(len(snap.nodes)))
    assert snap.nodes[0].name == first.name and snap.nodes[0].labels == {"zone": "moved"}
    assert not any(name in cache._memo._node_templates for name in (n.name for n in snap.nodes))


def test_a_refused_cold_lending_leaves_the_counts_the_reference_leaves() -> None:
    """A node whose Binding task does not fit refuses the lending half way; what was assembled before it is
    counted as the one-object methods count it (each as it is made, not once at the end)."""
    nodes = [o.NodeSpec(name=n, allocatable={"cpu": "4", "memory": "8Gi", "pods": 110}) for n in ("a", "b", "c")]
    job = o.JobSpec(name="j", namespace="ns", queue="q1", min_member=1, phase="Running")
    tasks = [o.TaskSpec(name="ok", namespace="ns", job="j", node="a", phase="Running", requests={"cpu": "1"}),
             o.TaskSpec(name="big", namespace="ns", job="j", node="b", status="Binding", requests={"cpu": "9"})]
    spec = o.ClusterSpec(queues=[o.QueueSpec(name="q1")], nodes=nodes, jobs=[job], tasks=tasks)
    counts = []
    for cold_bulk in (True, False):
        cache = cache_of(spec)
        cache._memo.cold_bulk = cold_bulk
        with pytest.raises(NodeAccountingError):
            cache.snapshot()
        counts.append((cache._memo.assembled_jobs, cache._memo.assembled_nodes))
    assert counts[0] == counts[1] and counts[0][1] == 1, counts
