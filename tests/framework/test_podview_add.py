"""`SessionPods.add` (written out for a pod the view does not hold yet) against `add_plain`, its
reference: two views of one random session take the same random adds (new pods, pods added again on
their node or another, pods removed, nodes the view does not know, pods with and without scalars,
some nodes' sums kept and some not) and must hold the same pods in the same order, the same moves,
the same kept sums, and tell their listeners the same things in the same order."""

from __future__ import annotations

import pytest

from busched.api.resource import Resource
from busched.api.task import TaskStatus
from busched.framework.podview import SessionPods
from tests.fastpath.test_kernels_twins import session


class _Ear:
    def __init__(self) -> None:
        self.heard: list[tuple] = []

    def pod_added(self, node, task, part=None):  # type: ignore[no-untyped-def]
        self.heard.append(("+", node, task.uid, part))

    def pod_removed(self, node, task):  # type: ignore[no-untyped-def]
        self.heard.append(("-", node, task.uid))


def _state(view: SessionPods, names: list[str]) -> str:
    return repr(([(n, list(view.on(n))) for n in names], list(view._moved.items()), sorted(view._sums.items()),
                 view.pods.changed_nodes(), [l.heard for l in view.listeners]))


@pytest.mark.parametrize("seed", range(16))
def test_add_is_add_plain(seed):
    rng, ssn = session(seed)
    fast, plain = SessionPods(ssn), SessionPods(ssn)
    listen = rng.random() < 0.7
    for v in (fast, plain):
        if listen:
            v.listeners.append(_Ear())
    names = [n.name for n in ssn.node_list]
    for name in rng.sample(names, len(names) // 2):  # some nodes' sums kept (adds grow them), some not
        assert fast.requested(name) == plain.requested(name)
    tasks = [t for j in ssn.jobs.values() for t in j.tasks_in(TaskStatus.Pending)]
    placed = [t for j in ssn.jobs.values() for t in j.tasks.values() if t.node_name][:10]
    assert tasks
    for t in rng.sample(tasks, min(6, len(tasks))):  # pods with scalars other than the pod count
        t.resreq = Resource(t.resreq.cpu, t.resreq.memory, {**t.resreq.scalars, "nvidia.com/gpu": 1000.0})
    for t in rng.sample(tasks, min(3, len(tasks))):  # one scalar, not the pod count (a task built by hand)
        t.resreq = Resource(t.resreq.cpu, t.resreq.memory, {"nvidia.com/gpu": 2000.0})
    for _ in range(200):
        t = rng.choice(tasks + placed)
        if rng.random() < 0.15:
            fast.remove(t)
            plain.remove(t)
            continue
        t.node_name = rng.choice(names + ["no-such-node"]) if rng.random() < 0.6 or not t.node_name else t.node_name
        fast.add(t)
        plain.add_plain(t)
        assert _state(fast, names) == _state(plain, names)
    for name in names:
        assert fast.requested(name) == plain.requested(name)


def test_add_of_a_pod_with_one_scalar_that_is_not_the_pod_count():
    """The written-out add's common case is cpu, memory and at most the pod count: a pod whose one
    scalar is another goes to `add_plain`, and its part says so (review of tp9: a mutant that kept only
    the length test survived)."""
    rng, ssn = session(0)
    fast, plain = SessionPods(ssn), SessionPods(ssn)
    for v in (fast, plain):
        v.listeners.append(_Ear())
    node = ssn.node_list[0].name
    for v in (fast, plain):
        v.requested(node)
    t = next(t for j in ssn.jobs.values() for t in j.tasks.values() if not t.node_name)
    t.resreq = Resource(500.0, 2.0**20, {"nvidia.com/gpu": 2000.0})
    t.node_name = node
    fast.add(t)
    plain.add_plain(t)
    assert fast.listeners[0].heard == plain.listeners[0].heard
    assert fast.listeners[0].heard[0][3][4] == {"nvidia.com/gpu": 2}
    assert fast.requested(node) == plain.requested(node)
