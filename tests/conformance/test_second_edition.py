"""The second edition of the scenario format: times, task status, node usage, test-rejecter."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from busched.api import build
from busched.api import objects as o
from busched.api.task import TaskStatus
from busched.api.timestamp import TimeError, parse_time
from busched.scenario.runner import ScenarioError, load_scenario, run_scenario


@pytest.mark.parametrize("text,want", [
    ("1970-01-01T00:00:00Z", 0.0),
    ("2026-03-01T10:30:00Z", 1772361000.0),
    ("2026-03-01T11:30:00+01:00", 1772361000.0),
    ("2026-03-01T10:30:00.25Z", 1772361000.25),
    ("2026-03-01t10:30:00.000000001z", 1772361000.000000001),
    (1772361000, 1772361000.0),
    (12.5, 12.5),
    (None, 0.0),
])
def test_parse_time(text, want) -> None:
    assert parse_time(text) == pytest.approx(want, abs=1e-9)


@pytest.mark.parametrize("bad", ["", "yesterday", "2026-03-01", "2026-03-01T10:30:00", "2026-02-30T00:00:00Z",
                                 True, float("nan")])
def test_parse_time_rejects(bad) -> None:
    with pytest.raises(TimeError, match="created"):
        parse_time(bad, "created")


def _task(**kw) -> o.TaskSpec:
    return msgspec.convert({"name": "p1", "namespace": "c1", "job": "pg1", **kw}, o.TaskSpec)


def test_task_times_and_status() -> None:
    t = build.task_info(_task(created="2026-03-01T10:00:01Z", startTime=60, node="n1", phase="Running",
                              status="Pipelined"), {})
    assert (t.created, t.start_time) == (parse_time("2026-03-01T10:00:01Z"), 60.0)
    assert t.status == TaskStatus.Pipelined and t.node_name == "n1"  # status wins over phase
    plain = build.task_info(_task(), {})
    assert (plain.created, plain.start_time, plain.status) == (0.0, 0.0, TaskStatus.Pending)


def test_bad_time_and_status_name_the_field() -> None:
    with pytest.raises(build.SpecError, match="task c1/p1: created"):
        build.task_info(_task(created="soon"), {})
    with pytest.raises(build.SpecError, match="task c1/p1: status: unknown task status 'Sleeping'"):
        build.task_info(_task(status="Sleeping"), {})


def test_job_queue_node_fields() -> None:
    job = build.job_info(msgspec.convert({"name": "pg1", "created": 5}, o.JobSpec), {})
    queue = build.queue_info(msgspec.convert({"name": "q1", "created": "1970-01-01T00:00:07Z"}, o.QueueSpec))
    node = build.node_info(msgspec.convert({"name": "n1", "allocatable": {"cpu": "1"}, "usage": {
        "time": "1970-01-01T00:01:00Z", "cpu": {"5m": 40.0}, "memory": {"5m": 55.5}}}, o.NodeSpec))
    assert (job.created, queue.created) == (5.0, 7.0)
    assert (node.usage.time, node.usage.cpu, node.usage.memory) == (60.0, {"5m": 40.0}, {"5m": 55.5})
    assert node.clone().usage == node.usage


CASE = """
now: {now}
config:
  actions: enqueue
  tiers:
  - plugins: [{{name: test-rejecter, arguments: {{job: pg1}}}}]
cluster:
  queues: [{{name: q1, created: 0}}]
  jobs: [{{name: pg1, queue: q1, minMember: 1}}, {{name: pg2, queue: q1, minMember: 1}}]
  tasks: [{{name: p1, job: pg1}}, {{name: p2, job: pg2}}]
"""


def test_now_and_test_rejecter(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(CASE.format(now="'2026-03-01T10:30:00Z'"))
    sc = load_scenario(f)
    assert sc.now == parse_time("2026-03-01T10:30:00Z")
    assert run_scenario(sc)["jobEnqueueable"] == {"default/pg1": False, "default/pg2": True}
    f.write_text(CASE.format(now="tomorrow"))
    with pytest.raises(ScenarioError, match="now: expected an RFC 3339 time"):
        load_scenario(f)


def test_created_breaks_job_order_ties(tmp_path: Path) -> None:
    """Two equal jobs, one node with room for one: the earlier created goes first, whatever its name."""
    f = tmp_path / "c.yaml"
    f.write_text("""
config: {actions: 'enqueue, allocate', tiers: [{plugins: [{name: priority}, {name: gang}]}]}
cluster:
  queues: [{name: q1}]
  nodes: [{name: n1, allocatable: {cpu: '1', pods: '10'}}]
  jobs: [{name: a, queue: q1, minMember: 1, phase: Inqueue, created: '2026-03-01T10:00:02Z'},
         {name: b, queue: q1, minMember: 1, phase: Inqueue, created: '2026-03-01T10:00:01Z'}]
  tasks: [{name: pa, job: a, requests: {cpu: '1'}}, {name: pb, job: b, requests: {cpu: '1'}}]
""")
    assert run_scenario(load_scenario(f))["binds"] == {"default/pb": "n1"}
