"""`busched get KIND NAME` and `busched describe KIND NAME` over a real nats-server (issue 11, item 9)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

from busched.agent import Reject, fleet_nodes
from busched.api.objects import ClusterSpec, JobSpec, QueueSpec, TaskSpec
from busched.bus import messages as m
from busched.bus.apply import apply_cluster
from busched.cli.get import lookup
from busched.cli.main import main
from busched.scheduler import events_log
from tests.nats_fixture import held_by_node, wait_until


def one_job(n: int = 1) -> ClusterSpec:
    return ClusterSpec(queues=[QueueSpec(name="default")], jobs=[JobSpec(name="j", namespace="t", min_member=1)],
                       tasks=[TaskSpec(name=f"j-{i}", namespace="t", job="j", requests={"cpu": "1"},
                                       node_selector={"kubernetes.io/hostname": "node-00"}) for i in range(n)])


async def refused_then_bound(harness: Any) -> tuple[Any, Any, Any]:
    sched = await harness.scheduler(exclusion_ttl=0.3)
    refusals: list[int] = []

    def on_bind(node: str, bind: m.BindDecision) -> None:
        if not refusals:
            refusals.append(bind.attempt)
            raise Reject("disk full")

    agent = await harness.agent(fleet_nodes(2, cpu="4", memory="8Gi"), on_bind=on_bind)
    await apply_cluster(await harness.bus(), one_job())
    await wait_until(lambda: held_by_node(agent)["node-00"].get("t/j-0") == 2, timeout=5, what="bound again")
    return sched, agent, await harness.bus()


async def test_get_one_object_by_name(harness):
    sched, agent, bus = await refused_then_bound(harness)
    await wait_until(lambda: sched.task_status("t/j-0") == "Running", what="running")
    task = await lookup(bus, "get", "tasks", "t/j-0")
    assert (task["name"], task["node"], task["attempt"], task["status"]) == ("j-0", "node-00", 2, "Running")
    assert task["exitCode"] is None
    assert (await lookup(bus, "get", "jobs", "t/j"))["queue"] == "default"
    assert (await lookup(bus, "get", "queues", "default"))["jobs"] == 1
    assert (await lookup(bus, "get", "nodes", "node-00"))["tasks"] == 1
    for kind, name, err in (("tasks", "t/nope", "no task 't/nope'"), ("things", "x", "unknown kind 'things'")):
        try:
            await lookup(bus, "get", kind, name)
        except RuntimeError as e:
            assert err in str(e)
        else:
            raise AssertionError(f"get {kind} {name} should fail")


async def test_describe_shows_spec_events_and_exit_code(harness):
    sched, agent, bus = await refused_then_bound(harness)
    await wait_until(lambda: sched.task_status("t/j-0") == "Running", what="running")
    await agent.report_phase("node-00", "t/j-0", "Failed", reason="Error", exit_code=3)
    await wait_until(lambda: sched.task_status("t/j-0") == "Failed", what="failed")
    d = await lookup(bus, "describe", "tasks", "t/j-0")
    assert d["status"] == "Failed" and d["exitCode"] == 3
    assert d["spec"]["requests"] == {"cpu": "1"} and d["spec"]["job"] == "j"
    events = [(e["event"], e["node"], e["attempt"]) for e in d["events"]]
    assert events == [("bind", "node-00", 1), ("release", "node-00", 1), ("bind", "node-00", 2)]
    assert d["events"][1]["reason"] == "rejected by node-00: disk full"
    # the job, its node and its queue show the same recent events
    for kind, name in (("jobs", "t/j"), ("nodes", "node-00"), ("queues", "default")):
        got = await lookup(bus, "describe", kind, name)
        assert [e["event"] for e in got["events"]] == ["bind", "release", "bind"], kind
        assert "spec" in got
    assert (await lookup(bus, "describe", "nodes", "node-01"))["events"] == []
    job = await lookup(bus, "describe", "jobs", "t/j")
    assert isinstance(job["conditions"], list)


async def test_describe_get_and_explain_commands(harness, capsys):
    await refused_then_bound(harness)
    url = harness.url
    assert await asyncio.to_thread(main, ["get", "tasks", "t/j-0", "--nats", url]) == 0
    out = capsys.readouterr().out
    assert "j-0" in out.splitlines()[1] and "node-00" in out
    assert await asyncio.to_thread(main, ["describe", "task", "t/j-0", "--nats", url]) == 0
    out = capsys.readouterr().out
    assert "events:" in out and "release  t/j-0 -> node-00 (attempt 1)  rejected by node-00: disk full" in out
    assert await asyncio.to_thread(main, ["describe", "jobs", "t/j", "-o", "json", "--nats", url]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "j"
    assert await asyncio.to_thread(main, ["explain", "t/j-0", "--json", "--nats", url]) == 0
    got = json.loads(capsys.readouterr().out)
    assert set(got) >= {"reason", "message", "nodes", "scores"} and got["reason"] in ("Running", "Placed")
    assert await asyncio.to_thread(main, ["describe", "tasks", "t/none", "--nats", url]) == 1
    assert "no task 't/none'" in capsys.readouterr().err


def test_the_event_ring_is_bounded():
    sched = SimpleNamespace(wall_clock=lambda: 1.0, cycle=7, specs={"task": {"t/a": 1, "t/b": 1}})
    b = SimpleNamespace(node="n", attempt=1, evict_reason="preempted")
    for _ in range(150):
        events_log.binds(sched, [("t/a", b), ("t/b", b)])
    events_log.evicts(sched, [("t/a", b, "evict")])
    assert len(events_log.of_task(sched, "t/a")) == events_log.PER_TASK
    assert events_log.of_task(sched, "t/a")[-1] == {"time": 1.0, "cycle": 7, "event": "evict", "task": "t/a",
                                                    "node": "n", "attempt": 1, "reason": "preempted"}
    assert len(events_log.recent(sched, lambda e: True)) == events_log.OVERALL
    # the lists of deleted tasks go once the map outgrows the tasks
    for i in range(1100):
        events_log.note(sched, "release", f"t/gone-{i}", None, "")
    assert len(sched._events_ring.by_task) < 1100
    assert events_log.of_task(sched, "t/a")
