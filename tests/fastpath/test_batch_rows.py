"""The kept fit parts' row functions (busched.fastpath.batch._fit_part) against `fit_mask`.

A template's fit on idle and on future idle is refreshed row by row after each placement with the
part's own comparison (written out for requests of two or three dimensions, cpu, memory and one
more, pods most often).  Here every row of idle and future idle is set to values about the request
(equal, within MIN_RESOURCE either way, above, below, zero, NaN, infinite) in every dimension, and
the row function must give `fit_mask`'s answer for each, for requests of every width.
"""

from __future__ import annotations

import math
import random

import pytest

from busched.api.resource import GPU, MIN_RESOURCE, PODS, Resource
from busched.builtin import open_session
from busched.fastpath import FastPathSettings, batch
from busched.fastpath.fit import FUTURE_IDLE, IDLE, fit_mask
from busched.framework.config import DEFAULT_CONFIG, load_config
from tests.kernel_cases import cache_of, random_cluster

REQUESTS = [
    Resource(3000.0, 2e9),
    Resource(0.0, 0.0),  # (a difference of exactly MIN_RESOURCE, from -MIN_RESOURCE)
    Resource(3000.0, 2e9, {PODS: 1.0}),
    Resource(0.0, 0.0, {PODS: 1.0}),
    Resource(500.0, 1e9, {GPU: 1000.0}),
    Resource(500.0, 1e9, {GPU: 1000.0, PODS: 1.0}),
    Resource(500.0, 1e9, {"example.com/none": 1.0}),  # a resource no node has: fits nowhere
]


def _near(rng: random.Random, q: float) -> float:
    if rng.random() < 0.5:
        return q * 2 + 1  # fits
    return rng.choice([q, q - MIN_RESOURCE, q - MIN_RESOURCE / 2, q + MIN_RESOURCE / 2, q - 2 * MIN_RESOURCE,
                       q + 2 * MIN_RESOURCE, q * 2 + 1, q / 2, 0.0, -1.0, math.nan, math.inf])


@pytest.mark.parametrize("seed", range(4))
def test_fit_rows_equal_fit_mask(seed):
    rng = random.Random(300 + seed)
    spec = random_cluster(rng, nodes=rng.choice([8, 40]), fancy=True)
    ssn = open_session(cache_of(spec, FastPathSettings(kernels=True)).snapshot(), load_config(DEFAULT_CONFIG))
    arrays = ssn.arrays
    checked = passed = 0
    for req in REQUESTS:
        v, _ = arrays.request(req)
        for which in (IDLE, FUTURE_IDLE):
            avail = arrays.available(which)
            for r in range(avail.shape[0]):
                for j in range(avail.shape[1]):
                    avail[r, j] = _near(rng, float(v[j]))
            part = batch._fit_part(arrays, req, which)
            assert part.local.one is not None
            want = fit_mask(arrays, req, which).tolist()
            assert [part.local.one(r) for r in range(len(want))] == want, (req, which)
            passed += sum(want)
            checked += len(want)
    assert 0 < passed < checked
