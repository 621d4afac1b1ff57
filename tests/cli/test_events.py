"""`busched events [KIND/NAME] [--follow] [-o json] [--since]` over a real nats-server, and the events
stream's bounds (issue 14)."""

from __future__ import annotations

import asyncio
import json

import pytest
from nats.js import api

from busched.agent import fleet_nodes
from busched.api.objects import ClusterSpec, JobSpec, QueueSpec, TaskSpec
from busched.bus import subjects as S
from busched.bus.apply import apply_cluster
from busched.cli.events import age, parse_object
from busched.cli.main import main
from busched.scheduler.sched_events import EventSettings
from tests.nats_fixture import wait_until
from tests.scheduler.test_sched_events import alive, fit_and_misfit, held_events


def one_task(job: str) -> ClusterSpec:
    return ClusterSpec(jobs=[JobSpec(name=job, namespace="t", min_member=1)],
                       tasks=[TaskSpec(name=f"{job}-0", namespace="t", job=job, requests={"cpu": "1"})])


async def running_with_events(harness):
    sched = await harness.scheduler()
    await harness.agent(fleet_nodes(2, cpu="4", memory="8Gi"))
    bus = await harness.bus()
    await alive(sched, 2)  # (so that every cycle after the apply sees the same nodes: one message per series)
    await apply_cluster(bus, fit_and_misfit())

    async def both() -> bool:
        reasons = {e.reason for e in await held_events(bus, "task")}
        return {"Scheduled", "FailedScheduling"} <= reasons
    await wait_until(both, what="Scheduled and FailedScheduling on the stream")
    return bus


async def test_events_lists_the_latest_series_filtered_by_object(harness, capsys):
    await running_with_events(harness)
    url = harness.url
    assert await asyncio.to_thread(main, ["events", "task/t/a-0", "--nats", url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "COUNT", "MESSAGE"]
    assert len(lines) == 2, lines  # one object's one series
    assert lines[1].split()[1:5] == ["Normal", "Scheduled", "task/t/a-0", "1"]
    assert "Successfully assigned t/a-0 to node-0" in lines[1]

    assert await asyncio.to_thread(main, ["events", "podgroup/t/b", "-o", "json", "--nats", url]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [(e["reason"], e["type"], e["involvedObject"]) for e in got] == [
        ("Unschedulable", "Warning", {"kind": "job", "namespace": "t", "name": "b"})]
    assert got[0]["count"] >= 1 and got[0]["firstTimestamp"] <= got[0]["lastTimestamp"]

    # every task's events, sorted by when they were last seen; --since leaves out what is older
    assert await asyncio.to_thread(main, ["events", "task", "-o", "json", "--nats", url]) == 0
    got = json.loads(capsys.readouterr().out)
    assert {e["reason"] for e in got} == {"Scheduled", "FailedScheduling"}
    assert [e["lastTimestamp"] for e in got] == sorted(e["lastTimestamp"] for e in got)
    assert await asyncio.to_thread(main, ["events", "queue/default", "--since", "1h", "--nats", url]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "No events found." in captured.err
    assert await asyncio.to_thread(main, ["events", "frob/x", "--nats", url]) == 2
    assert "unknown kind 'frob'" in capsys.readouterr().err


async def test_events_follow_prints_new_events_until_it_exits(harness, capsys):
    bus = await running_with_events(harness)
    out: list[str] = []

    def printed() -> str:
        out.append(capsys.readouterr().out)
        return "".join(out)

    run = asyncio.ensure_future(asyncio.to_thread(
        main, ["events", "task", "--follow", "--exit-after", "4", "--nats", harness.url]))
    await wait_until(lambda: "LAST SEEN" in printed(), what="the held events printed")
    held = printed()
    assert "task/t/a-0" in held and "task/t/c-0" not in held
    await apply_cluster(bus, one_task("c"))
    await wait_until(lambda: "task/t/c-0" in printed()[len(held):], what="the new event followed")
    assert await run == 0
    follow = printed()[len(held):]
    assert "Scheduled" in follow and "Successfully assigned t/c-0 to node-0" in follow


async def test_the_events_stream_is_bounded(harness):
    sched = await harness.scheduler(run=False)
    bus = await harness.bus()
    cfg = (await bus.js.stream_info(S.EVENT_STREAM)).config
    st = sched.settings.streams
    assert (cfg.subjects, cfg.max_msgs_per_subject) == ([f"{S.EVENT_PREFIX}.>"], 1)
    assert cfg.max_age == st.events_max_age == 3600.0
    assert (cfg.max_msgs, cfg.max_bytes) == (st.events_max_msgs, st.events_max_bytes)
    assert cfg.max_msgs > 0 and cfg.max_bytes > 0
    assert api.DiscardPolicy(cfg.discard) is api.DiscardPolicy.OLD
    assert api.RetentionPolicy(cfg.retention) is api.RetentionPolicy.LIMITS


async def test_a_lost_publish_is_counted_and_the_cycle_goes_on(harness):
    # events wait at most publish_timeout for a stream that does not answer (10 s by default)
    sched = await harness.scheduler(run=False, events=EventSettings(publish_timeout=0.5))
    agent = await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi"))
    bus = await harness.bus()
    await bus.js.delete_stream(S.EVENT_STREAM)  # no stream takes the events now
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="default")]))
    await apply_cluster(bus, one_task("x"))

    async def placed() -> bool:
        await sched.run_once(force=True)
        return "t/x-0" in agent.running()["node-00"]
    await wait_until(placed, what="placed without an events stream")
    errors = sched.metrics.publish_errors.labels("events")
    # counted once the publish's 0.5 s ran out (well before the 10 s default would)
    await wait_until(lambda: errors._value.get() >= 1, timeout=5.0, what="the lost event counted")
    assert sched.metrics.sched_events.labels("Scheduled")._value.get() >= 1


def test_object_arguments_and_ages():
    assert parse_object("task/t/a-0") == ("task", "t/a-0")
    assert parse_object("pod/a-0") == ("task", "default/a-0")
    assert parse_object("podgroup/t/b") == ("job", "t/b")
    assert parse_object("queue/q") == ("queue", "q")
    assert parse_object("nodes") == ("node", "")
    assert parse_object("") == ("", "")
    with pytest.raises(ValueError):
        parse_object("queue/ns/q")
    assert S.events_filter("task", "t/a.0") == "busched.events.task.t.a%2E0.*"
    assert [age(s) for s in (5, 130, 900, 4 * 3600, 3 * 86400)] == ["5s", "2m10s", "15m", "4h", "3d"]
