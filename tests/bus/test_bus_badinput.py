"""Malformed, oversized and invalid payloads are refused with a log line and a metric; scheduling goes on."""

from __future__ import annotations

import logging

import aiohttp

from busched.agent import fleet_nodes
from busched.api.objects import ClusterSpec, JobSpec, QueueSpec, TaskSpec
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.apply import apply_cluster
from busched.web import start_http
from tests.nats_fixture import held_by_node, wait_until


def rejected(sched, reason: str, kind: str) -> float:  # noqa: ANN001
    return sched.metrics.events_rejected.labels(reason, kind)._value.get()


async def test_bad_payloads_are_rejected_logged_counted_and_the_scheduler_keeps_running(harness, caplog):
    caplog.set_level(logging.WARNING, logger="busched.scheduler")
    sched = await harness.scheduler(max_event_bytes=64 * 1024)
    http = await start_http("127.0.0.1", 0, sched.metrics.registry, ready=lambda: sched.ready)
    agent = await harness.agent(fleet_nodes(1))
    bus = await harness.bus()
    task_subject = S.state_subject("task", "bad/t")
    bad = [
        # not JSON at all
        (task_subject, b"{this is not json"),
        # a field of the wrong type
        (S.state_subject("task", "bad/typed"),
         b'{"type":"task.upsert","version":1,"task":{"name":"typed","namespace":"bad","priority":"high"}}'),
        # an unknown field inside a spec
        (S.state_subject("node", "n-extra"),
         b'{"type":"node.upsert","version":1,"node":{"name":"n-extra","allocatable":{},"colour":"red"}}'),
        # bigger than the scheduler accepts (well under the server's own limit)
        (S.state_subject("job", "bad/huge"), m.encode(m.JobUpsert(version=1, job=JobSpec(
            name="huge", namespace="bad", annotations={"blob": "x" * 100_000})))),
        # decodes, but the object is invalid: Cache.upsert raises SpecError
        (S.state_subject("task", "bad/quantity"), m.encode(m.TaskUpsert(version=1, task=TaskSpec(
            name="quantity", namespace="bad", job="j", requests={"cpu": "lots"})))),
        # a payload about another object than its subject names
        (S.state_subject("task", "bad/other"), m.encode(m.TaskUpsert(version=1, task=TaskSpec(
            name="someone-else", namespace="bad")))),
    ]
    acks = await bus.publish_all((subj, data, None) for subj, data in bad)
    assert all(a.ok for a in acks)

    await wait_until(lambda: sum(rejected(sched, r, k) for r, k in [
        ("malformed", "task"), ("malformed", "node"), ("oversized", "job"), ("invalid", "task"),
        ("mismatch", "task")]) == 6, what="six rejections counted")
    assert rejected(sched, "malformed", "task") == 2
    assert rejected(sched, "malformed", "node") == 1
    assert rejected(sched, "oversized", "job") == 1
    assert rejected(sched, "invalid", "task") == 1
    assert rejected(sched, "mismatch", "task") == 1
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "task bad/t: payload:" in text
    assert "task bad/typed: task.priority: expected `int | null`, got `str`" in text
    assert "node n-extra: node: object contains unknown field `colour`" in text
    assert "job bad/huge: payload of" in text and "exceeds the limit of 65536" in text
    assert "task bad/quantity: requests.cpu" in text
    assert "task bad/other: payload is a TaskUpsert for task bad/someone-else" in text
    assert not sched.specs["task"] and "n-extra" not in sched.specs["node"]

    # the stream orders an object's changes, not the publisher's version: a publisher writing the largest
    # version cannot freeze an object (issue 10, item 3), and a version past 2^63-1 is refused outright
    huge = m.encode(m.TaskUpsert(version=2**63 - 1, task=TaskSpec(name="ok-0", namespace="g", job="ok",
                                                                  requests={"cpu": "9999"})))
    await bus.publish(S.state_subject("task", "g/ok-0"), huge)
    await bus.publish(S.state_subject("task", "g/over"), huge.replace(b'"version":9223372036854775807',
                                                                       b'"version":18446744073709551621'))
    await wait_until(lambda: rejected(sched, "malformed", "task") == 3, what="the version past 2^63-1 refused")
    good = ClusterSpec(queues=[QueueSpec(name="default")], jobs=[JobSpec(name="ok", namespace="g", min_member=1)],
                       tasks=[TaskSpec(name="ok-0", namespace="g", job="ok", requests={"cpu": "1"})])
    await apply_cluster(bus, good)  # a lower version, later on the stream: it wins
    # ... and the scheduler is still scheduling
    await wait_until(lambda: held_by_node(agent)["node-00"].get("g/ok-0") == 1, what="a good task placed")
    assert sched.specs["task"]["g/ok-0"].requests == {"cpu": "1"}
    assert rejected(sched, "stale", "task") == 0

    async with aiohttp.ClientSession() as s:
        async with s.get(f"{http.url}/metrics") as r:
            body = await r.text()
        assert 'busched_state_events_rejected_total{kind="task",reason="malformed"} 3.0' in body
        assert 'busched_state_events_rejected_total{kind="job",reason="oversized"} 1.0' in body
        for path, want in (("/healthz", 200), ("/readyz", 200)):
            async with s.get(f"{http.url}{path}") as r:
                assert r.status == want
    await http.stop()
