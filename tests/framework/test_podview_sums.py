"""The pod view's per-node sums (busched.framework.podsums.sum_pods) written out, against the
reference that adds each pod's `pod_requests` and `non_zero_requests`."""

from __future__ import annotations

import random

import pytest

from busched.api.resource import Resource
from busched.api.task import TaskInfo
from busched.framework import podsums

_SCALARS = ("pods", "nvidia.com/gpu", "example.com/fpga", "hugepages-2Mi")


def _pods(rng: random.Random) -> dict[str, TaskInfo]:
    out = {}
    for i in range(rng.randrange(0, 30)):
        names = rng.sample(_SCALARS, rng.randrange(len(_SCALARS) + 1))
        scalars = {n: rng.choice((0.0, 1000.0, 500.0, 2500.0, 1.0, 4000.0)) for n in names}
        r = Resource(rng.choice((0.0, 100.0, 1000.0, 250.5, 4000.0)), rng.choice((0.0, 2.0**30, 1e9 + 0.5)), scalars)
        out[f"t{i}"] = TaskInfo(uid=f"t{i}", name=f"t{i}", namespace="ns", job="ns/j", resreq=r, init_resreq=r)
    return out


@pytest.mark.parametrize("seed", range(60))
def test_sum_pods_is_the_plain_sum(seed: int) -> None:
    pods = _pods(random.Random(seed))
    assert podsums.sum_pods(pods) == podsums.sum_pods_plain(pods)
