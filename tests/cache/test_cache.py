"""The cache: events in, snapshots out, with Volcano's accounting rules."""

import pytest

from busched.api.build import SpecError
from busched.api.task import TaskStatus
from busched.cache.cache import Cache
from tests.helpers import cluster


def spec():
    return cluster(
        nodes=[("n1", "4", "8Gi")],
        tasks=[{"name": "done", "namespace": "ns", "job": "j", "node": "n1", "phase": "Succeeded",
                "requests": {"cpu": "2"}},
               {"name": "failed", "namespace": "ns", "job": "j", "node": "n1", "phase": "Failed",
                "requests": {"cpu": "1"}},
               {"name": "run", "namespace": "ns", "job": "j", "node": "n1", "phase": "Running",
                "requests": {"cpu": "1"}},
               {"name": "gone", "namespace": "ns", "job": "j", "node": "n1", "phase": "Running", "deleting": True,
                "requests": {"cpu": "1"}}],
        jobs=[{"name": "j", "namespace": "ns", "queue": "q1", "minMember": 1, "phase": "Running"}],
    )


@pytest.mark.parametrize("memo", [True, False])
def test_finished_tasks_do_not_hold_their_node(memo):
    c = Cache()
    c.load(spec())
    snap = c.snapshot(memo=memo)
    n1 = snap.nodes[0]
    assert n1.used.cpu == 2000  # running + releasing; succeeded and failed are not counted
    assert n1.releasing.cpu == 1000
    assert n1.idle.cpu == 2000
    job = snap.jobs["ns/j"]
    assert job.count(TaskStatus.Succeeded) == 1 and job.count(TaskStatus.Failed) == 1
    assert job.count(TaskStatus.Releasing) == 1


def test_jobs_without_queue_are_left_out_and_deletes_apply():
    c = Cache()
    c.load(spec())
    c.delete("queue", "q1")
    assert "ns/j" not in c.snapshot().jobs
    assert c.delete("task", "ns/run") and not c.delete("task", "ns/run")


def test_bad_objects_are_refused_with_their_name():
    c = Cache()
    from busched.api.objects import NodeSpec

    with pytest.raises(SpecError, match=r"node bad: allocatable.cpu"):
        c.upsert("node", NodeSpec(name="bad", allocatable={"cpu": "lots"}))
    assert not c.objects["node"]


def test_parsed_resource_lists_are_copies_and_errors_stay() -> None:
    """A resource list parsed before is handed out as a fresh copy (a caller may change it), equal
    values of other types are parsed apart, and a bad value is still reported where it is."""
    from busched.api import build

    a = build.resources({"cpu": "1", "memory": "4Gi"}, "x")
    b = build.resources({"cpu": "1", "memory": "4Gi"}, "y")
    assert a is not b and a.to_dict() == b.to_dict()
    b.add_scalar("pods", 1.0)
    assert "pods" not in build.resources({"cpu": "1", "memory": "4Gi"}, "z").scalars
    assert build.resources({"cpu": 2}, "x").cpu == build.resources({"cpu": 2.0}, "x").cpu == 2000.0
    with pytest.raises(build.SpecError, match="task t: requests.cpu"):
        build.resources({"cpu": "lots"}, "task t: requests")
    with pytest.raises(build.SpecError, match="task u: requests.cpu"):
        build.resources({"cpu": "lots"}, "task u: requests")
