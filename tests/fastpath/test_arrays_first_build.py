"""`NodeArrays`' first build fills its matrices column by column (future idle from `_plain_future`
where it answers, without a Resource per node): every matrix must equal what `_fill` writes row by
row, the reference the arrays are refreshed with as tasks are placed, bit for bit (NaN included)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from busched.api.resource import Resource
from busched.builtin import open_session
from busched.fastpath.fit import NodeArrays
from busched.framework.config import DEFAULT_CONFIG, load_config
from tests.kernel_cases import cache_of, random_cluster


def _row_by_row(arrays: NodeArrays) -> tuple[np.ndarray, ...]:
    ref = NodeArrays.__new__(NodeArrays)
    ref.columns, ref._scalar_columns = arrays.columns, arrays._scalar_columns
    shape = arrays.idle.shape
    ref.allocatable, ref.idle, ref.used, ref.future = (np.full(shape, -7.0, order="F") for _ in range(4))
    for i, n in enumerate(arrays.nodes):
        for m in (ref.allocatable, ref.idle, ref.used, ref.future):
            m[i, :] = 0.0
        ref._put(ref.allocatable, i, n.allocatable)
        ref._fill(i, n)
    return ref.allocatable, ref.idle, ref.used, ref.future


@pytest.mark.parametrize("seed", range(8))
def test_first_build_equals_the_rows(seed):
    rng = random.Random(3100 + seed)
    spec = random_cluster(rng, nodes=rng.choice([3, 40, 150]))
    ssn = open_session(cache_of(spec).snapshot(), load_config(DEFAULT_CONFIG), seed=seed)
    nodes = ssn.node_list
    for n in rng.sample(nodes, k=len(nodes) // 3):  # releasing and pipelined parts, some naming scalars
        # (fractions and -0.0 too: the operations' order shows in the last bit, as whole numbers never do)
        n.releasing = n.releasing.clone().add(Resource(rng.choice([0.0, 500.0, 0.1, 0.3, 1 / 3]),
                                                       rng.choice([0.0, 2.0**30, 0.7])))
        n.pipelined = n.pipelined.clone().add(Resource(rng.choice([0.0, 250.0, 0.2, -0.0, 2 / 3]),
                                                       rng.choice([0.0, 0.1])))
        if rng.random() < 0.3:  # (0.1 + 0.2) - 0.3 is not 0.1 + (0.2 - 0.3)
            n.idle = n.idle.clone()
            n.idle.cpu, n.releasing.cpu, n.pipelined.cpu = 0.1, 0.2, 0.3
        if seed % 2 and rng.random() < 0.3:
            n.pipelined.scalars["nvidia.com/gpu"] = 1000.0
    arrays = NodeArrays(nodes)
    got = (arrays.allocatable, arrays.idle, arrays.used, arrays.future)
    for a, b in zip(got, _row_by_row(arrays)):
        assert a.shape == b.shape
        assert a.tobytes() == b.tobytes()
