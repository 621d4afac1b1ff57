"""The row scorers with the task's part read once (busched.fastpath.rowscores, fastpath.binpack.binpack_row)
against the plugins' own per-node scorers, node by node.

Random clusters (some nodes running tasks, some GPU nodes, some overfull), a session opened over each,
a few placements made through a statement (so the pod view and the nodes' accounting have moved on),
then for every pending task and for made-up shapes (zero requests, extended resources, requests
larger than any node): every row's value equals the plugin's weighted sum exactly (integers, and
floats bit for bit).
"""

from __future__ import annotations

import random

import pytest

from busched.api.resource import GPU, Resource
from busched.api.task import TaskInfo, TaskStatus
from busched.builtin import open_session
from busched.fastpath import FastPathSettings, rowscores
from busched.fastpath import binpack as binpack_kernel
from busched.framework.config import DEFAULT_CONFIG, load_config
from busched.framework.statement import Statement
from busched.plugins import binpack as binpack_plugin
from busched.plugins import nodeorder as nodeorder_plugin
from tests.kernel_cases import cache_of, random_cluster


def _session(seed: int):
    rng = random.Random(700 + seed)
    spec = random_cluster(rng, nodes=rng.choice([8, 40, 120]), fancy=seed % 2 == 0)
    ssn = open_session(cache_of(spec, FastPathSettings(kernels=True)).snapshot(), load_config(DEFAULT_CONFIG))
    return rng, ssn


def _place_some(rng: random.Random, ssn) -> int:
    """Put some pending tasks on random nodes they fit (idle), as allocate would: the pod view and
    the nodes' sums change."""
    stmt = Statement(ssn)
    placed = 0
    pending = [t for j in ssn.jobs.values() for t in j.tasks_in(TaskStatus.Pending)]
    rng.shuffle(pending)
    for t in pending[:30]:
        fits = [n for n in ssn.node_list if t.resreq.less_equal(n.idle)]
        if fits:
            stmt.allocate(t, rng.choice(fits).name)
            placed += 1
    return placed


def _shapes(ssn) -> list[TaskInfo]:
    base = next(t for j in ssn.jobs.values() for t in j.tasks.values())
    out = [t for j in ssn.jobs.values() for t in j.tasks_in(TaskStatus.Pending)]
    for req in ({}, {"cpu": 0.0, "memory": 0.0}, {"cpu": 250.0}, {"memory": 3e9},
                {"cpu": 2000.0, "memory": 4e9, "scalars": {GPU: 1000.0}}, {"cpu": 1e9, "memory": 1e15}):
        t = base.copy()
        t.uid = f"made-{len(out)}"
        t.resreq = Resource(req.get("cpu", 0.0), req.get("memory", 0.0), dict(req.get("scalars", {})))
        t.init_resreq = t.resreq.clone()
        out.append(t)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_resource_row_equals_the_nodeorder_scorers(seed):
    rng, ssn = _session(seed)
    assert _place_some(rng, ssn) > 0
    plugin = ssn.plugins["nodeorder"]
    view, nodes = plugin.view, ssn.arrays.nodes
    checked = 0
    for task in _shapes(ssn):
        for wl, wm, wb in ((1, 0, 1), (3, 0, 2), (2, 3, 5), (0, 1, 0), (0, 0, 4)):
            fast = rowscores.resource_row(view, nodes, task, wl, wm, wb)
            if fast is None:
                continue  # extended resources: the caller keeps the plugin's scorers
            for r, n in enumerate(nodes):
                want = ((nodeorder_plugin.least_allocated(view, task, n) * wl if wl else 0)
                        + (nodeorder_plugin.most_allocated(view, task, n) * wm if wm else 0)
                        + (nodeorder_plugin.balanced_allocation(view, task, n) * wb if wb else 0))
                assert fast(r) == want, (task.resreq, n.name, (wl, wm, wb))
                checked += 1
    assert checked > 100


@pytest.mark.parametrize("seed", range(3))
def test_resource_row_equals_the_scorers_on_odd_nodes(seed):
    """Nodes without cpu or memory allocatable (the default weights' row takes its general branch
    for them): still the plugin's sum, row by row."""
    rng, ssn = _session(seed)
    _place_some(rng, ssn)
    plugin = ssn.plugins["nodeorder"]
    view, nodes = plugin.view, ssn.arrays.nodes
    odd = nodes[: max(3, len(nodes) // 4)]
    for i, n in enumerate(odd):  # (the scorers and the rows both read the node's allocatable as it is now)
        a = n.allocatable
        n.allocatable = Resource(0.0 if i % 3 != 1 else a.cpu, 0.0 if i % 3 != 0 else a.memory, dict(a.scalars))
    checked = 0
    for task in _shapes(ssn):
        for wl, wm, wb in ((1, 0, 1), (4, 0, 3)):
            fast = rowscores.resource_row(view, nodes, task, wl, wm, wb)
            if fast is None:
                continue
            for r, n in enumerate(odd):
                want = (nodeorder_plugin.least_allocated(view, task, n) * wl
                        + nodeorder_plugin.balanced_allocation(view, task, n) * wb)
                assert fast(r) == want, (task.resreq, n.allocatable, (wl, wm, wb))
                checked += 1
    assert checked > 20


@pytest.mark.parametrize("seed", range(6))
def test_binpack_row_equals_binpack_score(seed):
    rng, ssn = _session(seed)
    assert _place_some(rng, ssn) > 0
    nodes = ssn.arrays.nodes
    args = [{}, {"binpack.weight": 3, "binpack.cpu": 2, "binpack.memory": 0},
            {"binpack.resources": GPU, f"binpack.resources.{GPU}": 4}]
    zero = 0
    for a in args:
        weights = binpack_plugin.BinpackWeights(a)
        for task in _shapes(ssn):
            fast = binpack_kernel.binpack_row(task, nodes, weights, binpack_plugin.MAX_NODE_SCORE)
            for r, n in enumerate(nodes):
                want = binpack_plugin.binpack_score(task, n, weights)
                got = fast(r)
                assert got == want and repr(got) == repr(want), (task.resreq, n.name, a)
                zero += want == 0.0
    assert zero  # some node could not hold some request: the early 0.0 was checked too
