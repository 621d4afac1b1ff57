"""The pod view's per-node sums (busched.framework.podsums.sum_pods) written out, against the
reference that adds each pod's `pod_requests` and `non_zero_requests`."""

from __future__ import annotations

import random

import pytest

from busched.api.resource import Resource
from busched.api.task import TaskInfo, TaskStatus
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


@pytest.mark.parametrize("seed", range(4))
def test_a_pod_added_again_moves_and_the_sums_follow(seed: int) -> None:
    """`SessionPods.add` of a pod the view holds (on its node, or on another one it was added to
    before): taken off first, so every node's sums (kept, and the arrays that listen) stay the sums
    of its pods."""
    from busched.fastpath.podview import pod_view_arrays
    from busched.plugins.predicates import non_zero_requests, pod_requests, session_pods
    from tests.fastpath.test_kernels_twins import session

    rng, ssn = session(seed)
    view = session_pods(ssn)
    pv = pod_view_arrays(view, ssn.arrays, pod_requests, non_zero_requests)
    names = [n.name for n in ssn.node_list]
    for name in names:
        view.requested(name)  # the sums kept, so that adds grow them
    tasks = [t for j in ssn.jobs.values() for t in j.tasks_in(TaskStatus.Pending)][:12]
    assert tasks
    for t in tasks:
        for _ in range(3):  # added, then added again on the same node or another
            t.node_name = rng.choice(names)
            view.add(t)
    for t in tasks:
        assert [n for n in names if t.uid in view.on(n)] == [t.node_name]
    for i, name in enumerate(names):
        want = podsums.sum_pods_plain(view.on(name))
        assert view.requested(name) == want
        assert (pv.count[i], pv.cpu[i], pv.mem[i], pv.nz_cpu[i], pv.nz_mem[i]) == (len(view.on(name)), *want[:4])
