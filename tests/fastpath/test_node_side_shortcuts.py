"""The node-side shortcuts of a session's open (issue 17, 50,000 nodes): the pod view's affinity
lists, image states and pod columns skip the nodes holding no pods (no images), and the values
carried per node (`NodeArrays.carried`: the stable filters of a plain task, nodeorder's taint
counts, the pod view's allocatable columns) are built column-wise, asking the per-node function
only of the nodes it can tell apart.  Each must equal its plain form over random clusters where
some nodes hold pods with (anti-)affinity, images, taints or a cordon and the others hold nothing."""

from __future__ import annotations

import math
import random
import struct

import msgspec
import numpy as np
import pytest

from busched.api import k8s
from busched.api.resource import Resource
from busched.builtin import open_session
from busched.fastpath import podview as fast_podview
from busched.fastpath.fit import NodeArrays
from busched.fastpath.nodeorder import taint_raw
from busched.fastpath.predicates import stable_mask
from busched.fastpath.sums import add_all
from busched.framework import podcolumns, podview
from busched.framework.config import DEFAULT_CONFIG, load_config
from busched.framework.podsums import sum_pods
from busched.plugins.predicates import PredicatesPlugin
from tests.kernel_cases import cache_of, random_cluster

AFFINITY = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": "zone"}]}}
ANTI = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "b"}}, "topologyKey": "kubernetes.io/hostname"}]}}
PREFERRED = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
    {"weight": 5, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": "zone"}}]}}


def _session(seed: int):
    rng = random.Random(7100 + seed)
    spec = random_cluster(rng, nodes=rng.choice([8, 40, 150]))
    # some running pods with pod (anti-)affinity, some nodes left empty (no pods, no images)
    tasks = [msgspec.structs.replace(t, affinity=rng.choice([AFFINITY, ANTI, PREFERRED]))
             if t.node and rng.random() < 0.3 else t for t in spec.tasks]
    spec = msgspec.structs.replace(spec, tasks=tasks)
    ssn = open_session(cache_of(spec).snapshot(), load_config(DEFAULT_CONFIG), seed=seed)
    return rng, ssn, list(ssn.node_list)


# -- the plain forms the shortcuts replace -------------------------------------------------------------
def _affinity_reference(nodes):
    affinity, anti, answers = [], [], []
    for n in nodes:
        has, has_anti = podview._node_affinity(n)
        answers.append((has, has_anti))
        if has:
            affinity.append(n.name)
        if has_anti:
            anti.append(n.name)
    return affinity, anti, answers


def _images_reference(nodes):
    seen: dict[str, int] = {}
    out = {}
    for n in sorted(nodes, key=lambda n: n.index):
        for image in n.images:
            seen[image] = seen.get(image, 0) + 1
        out[n.name] = {image: (int(size), seen[image]) for image, size in n.images.items()}
    return out


def _columns_reference(nodes):
    sums = [sum_pods(n.tasks) for n in nodes]
    cols = [np.array([len(n.tasks) for n in nodes], dtype=np.int64)]
    cols += [np.array([s[j] for s in sums], dtype=np.int64) for j in range(4)]
    names = {k for s in sums for k in s[4]}
    scalars = {k: np.array([s[4].get(k, 0) for s in sums], dtype=np.int64) for k in names}
    return cols, scalars


@pytest.mark.parametrize("seed", range(6))
def test_pod_view_open_equals_every_node_asked(seed: int) -> None:
    _, _, nodes = _session(seed)
    assert any(not n.tasks for n in nodes) or len(nodes) < 10  # some nodes are skipped
    assert podview._affinity_nodes(nodes) == _affinity_reference(nodes)
    ref = _images_reference(nodes)
    got = podview._image_states(nodes)
    assert set(got) <= set(ref)
    assert all(got.get(name, {}) == states for name, states in ref.items())
    cols, scalars = _columns_reference(nodes)
    got_cols = podcolumns.columns(nodes)
    for a, b in zip(got_cols[:5], cols):
        assert a.dtype == b.dtype and a.tolist() == b.tolist()
    got_scalars = got_cols[5]
    assert set(got_scalars) >= set(scalars)
    for name, col in got_scalars.items():
        assert col.tolist() == scalars.get(name, np.zeros(len(nodes), dtype=np.int64)).tolist()


def test_the_affinity_lists_name_the_nodes_holding_such_pods() -> None:
    _, _, nodes = _session(1)
    affinity, anti, _ = podview._affinity_nodes(nodes)
    assert affinity and anti  # the random cluster put pods with both on some nodes
    assert set(anti) <= {n.name for n in nodes if n.tasks}


def _plain_task(ssn, rng: random.Random, tolerations=()):
    t = rng.choice([t for job in ssn.jobs.values() for t in job.tasks.values()])
    t = t.copy()
    t.node_selector, t.affinity, t.tolerations = {}, None, list(tolerations)
    return t


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("switches", [{}, {"predicate.TaintTolerationEnable": False},
                                      {"predicate.NodeAffinityEnable": False}])
def test_stable_mask_of_a_plain_task_equals_every_node_asked(seed: int, switches: dict) -> None:
    rng, ssn, nodes = _session(seed)
    for n in rng.sample(nodes, k=len(nodes) // 4):  # more cordons and NoSchedule / NoExecute taints
        n.unschedulable = rng.random() < 0.5
        n.taints = [*n.taints, {"key": "k", "value": "v", "effect": rng.choice(["NoSchedule", "NoExecute"])}]
    plugin = PredicatesPlugin(switches)
    task = _plain_task(ssn, rng)
    got = stable_mask(plugin, task, NodeArrays(nodes))
    want = [not plugin._stable(task, n)[1] for n in nodes]
    assert got.tolist() == want
    assert not all(want)  # some nodes were refused


@pytest.mark.parametrize("seed", range(6))
def test_taint_counts_equal_every_node_asked(seed: int) -> None:
    rng, ssn, nodes = _session(seed)
    for n in rng.sample(nodes, k=len(nodes) // 3):
        n.taints = [*n.taints, {"key": "spot", "value": "y", "effect": "PreferNoSchedule"}]
    for tolerations in ([], [{"key": "spot", "operator": "Exists"}]):
        task = _plain_task(ssn, rng, tolerations)
        arrays = NodeArrays(nodes)
        got = taint_raw(None, task, arrays)
        row = arrays.carry[next(iter(arrays.carry))]  # (the only value carried)
        assert row[0] is got
        want = [sum(1 for taint in n.taints if taint.get("effect") == "PreferNoSchedule"
                    and not any(k8s.tolerates(t, taint) for t in tolerations)) for n in nodes]
        assert got.tolist() == want


@pytest.mark.parametrize("seed", range(4))
def test_allocatable_columns_equal_every_node_asked(seed: int) -> None:
    _, _, nodes = _session(seed)
    for name, to_int, row in (("max_task_num", False, fast_podview._max_tasks),
                              ("cpu", True, fast_podview._alloc_cpu), ("memory", True, fast_podview._alloc_mem)):
        got = fast_podview._column(name, to_int)(nodes)
        assert got.dtype == np.int64
        assert got.tolist() == [row(n) for n in nodes]


def test_a_fresh_build_and_a_row_function_agree_through_carried() -> None:
    """`NodeArrays.carried` with a build gives the build's array, and a later session's arrays seeded
    from it compute the changed rows with the row function."""
    _, _, nodes = _session(2)
    first = NodeArrays(nodes)
    built = first.carried("k", lambda n: len(n.name), np.int64, lambda ns: np.array([len(n.name) for n in ns]))
    assert built.tolist() == [len(n.name) for n in nodes]
    again = NodeArrays(nodes, like=first)
    assert again.carried("k", lambda n: -1, np.int64).tolist() == built.tolist()  # nothing changed: kept


def _bits(x: float) -> bytes:
    return struct.pack("<d", x)


def _random_value(rng: random.Random) -> float:
    if rng.random() < 0.01:
        return math.inf
    return rng.choice([0.0, -0.0, 1.0, 0.1, 2.0**62, 3.0 * 2**40, 1e-300, -7.5, rng.random() * 1e9,
                       float(rng.randint(0, 2**55)), rng.random()])


@pytest.mark.parametrize("seed", range(10))
def test_add_all_equals_adding_part_by_part(seed: int) -> None:
    rng = random.Random(8800 + seed)
    names = ["pods", "nvidia.com/gpu", "ephemeral-storage", "x/y"]
    parts = []
    for _ in range(rng.choice([0, 1, 5, 60])):
        scalars = {n: _random_value(rng) for n in rng.sample(names, k=rng.randint(0, 3))} if rng.random() < 0.6 else {}
        parts.append(Resource(_random_value(rng), _random_value(rng), scalars))
    start = Resource(rng.choice([0.0, 5.0]), 0.0, {"pods": 3.0} if seed % 3 == 0 else None)
    want, got = start.clone(), start.clone()
    for p in parts:
        want.add(p)
    add_all(got, parts)
    assert _bits(got.cpu) == _bits(want.cpu) and _bits(got.memory) == _bits(want.memory)
    assert list(got.scalars) == list(want.scalars)  # the same names in the same order
    assert [_bits(v) for v in got.scalars.values()] == [_bits(v) for v in want.scalars.values()]
