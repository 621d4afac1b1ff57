"""The vectorised resource-fit kernel must answer exactly as the plain per-node loop."""

import random

import numpy as np
import pytest

from busched.api.node import NodeInfo
from busched.api.resource import Resource
from busched.api.task import TaskInfo, TaskStatus
from busched.fastpath.fit import FUTURE_IDLE, IDLE, NodeArrays, fit_mask, fit_mask_reference


def random_cluster(rng: random.Random, n: int) -> list[NodeInfo]:
    nodes = []
    for i in range(n):
        alloc = Resource(rng.choice([2000, 4000, 8000]), rng.choice([4, 8, 16]) * 2**30,
                         {"pods": 110.0, **({"nvidia.com/gpu": 4000.0} if rng.random() < 0.3 else {})})
        node = NodeInfo.new(f"n{i}", alloc)
        for k in range(rng.randint(0, 4)):
            req = Resource(rng.choice([500, 1000, 2000]), rng.choice([1, 2]) * 2**30)
            st = rng.choice([TaskStatus.Running, TaskStatus.Releasing, TaskStatus.Pipelined])
            node.add_task(TaskInfo(uid=f"t{i}-{k}", name=f"t{i}-{k}", namespace="ns", job="ns/j",
                                   resreq=req, init_resreq=req.clone(), status=st))
        nodes.append(node)
    return nodes


@pytest.mark.parametrize("seed", range(20))
def test_fit_mask_matches_reference(seed):
    rng = random.Random(seed)
    nodes = random_cluster(rng, rng.randint(1, 60))
    arr = NodeArrays(nodes)
    for _ in range(20):
        scal = {"nvidia.com/gpu": float(rng.choice([0, 1000, 2000]))} if rng.random() < 0.3 else {}
        req = Resource(rng.choice([0, 100, 1000, 3000, 9000]), rng.choice([0, 1, 4, 20]) * 2**30, scal)
        for which in (IDLE, FUTURE_IDLE):
            assert np.array_equal(fit_mask(arr, req, which), fit_mask_reference(nodes, req, which))


def test_arrays_follow_node_changes():
    rng = random.Random(7)
    nodes = random_cluster(rng, 10)
    arr = NodeArrays(nodes)
    req = Resource(1000, 2**30)
    t = TaskInfo(uid="x", name="x", namespace="ns", job="ns/j", resreq=req, init_resreq=req.clone())
    nodes[3].add_task(t)
    assert np.array_equal(fit_mask(arr, Resource(3000, 2**30)), fit_mask_reference(nodes, Resource(3000, 2**30)))
    nodes[3].remove_task(t)
    assert arr.idle[3, 0] == nodes[3].idle.cpu


def test_a_node_outside_the_arrays_sharing_their_listener_list_leaves_its_namesake_row_alone():
    """Lent nodes share one listener list (busched.fastpath.lending); a node the lending has let go of
    keeps that list, and its writes must not overwrite the row of the node of the same name that replaced it."""
    rng = random.Random(3)
    nodes = random_cluster(rng, 4)
    shared: list = []
    for n in nodes:
        n.listeners = shared
    arr = NodeArrays(nodes)
    assert shared == [arr]  # registered once with the one list
    orphan = NodeInfo.new(nodes[2].name, nodes[2].allocatable.clone())
    orphan.listeners = shared
    before = arr.idle.copy()
    req = Resource(1000, 2**30)
    orphan.add_task(TaskInfo(uid="o", name="o", namespace="ns", job="ns/j", resreq=req, init_resreq=req.clone()))
    assert np.array_equal(arr.idle, before)
    nodes[2].add_task(TaskInfo(uid="x", name="x", namespace="ns", job="ns/j", resreq=req, init_resreq=req.clone()))
    assert arr.idle[2, 0] == nodes[2].idle.cpu != before[2, 0]


def test_unknown_scalar_fits_nowhere():
    nodes = random_cluster(random.Random(1), 5)
    arr = NodeArrays(nodes)
    req = Resource(100, 0, {"example.com/fpga": 1000.0})
    assert not fit_mask(arr, req).any()
    assert not fit_mask_reference(nodes, req).any()
