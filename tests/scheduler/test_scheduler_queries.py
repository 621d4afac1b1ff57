"""The answers alone (busched.scheduler.queries.Queries): specs and a binding table as plain objects, the
effective objects as small functions; no bus and no scheduler."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from busched.api import objects as o
from busched.bus import messages as m
from busched.metrics import SchedulerMetrics
from busched.scheduler.queries import Queries
from busched.scheduler.records import Binding, NodeLive, Result


@dataclass
class Table:
    bindings: dict[str, Binding] = field(default_factory=dict)
    results: dict[str, Result] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    backoff_until: dict[str, float] = field(default_factory=dict)


class Journal:
    """What events_log keeps its ring on."""


def queries(n_tasks: int = 3, max_payload: int = 1 << 20) -> tuple[Queries, Table, SchedulerMetrics]:
    specs: dict[str, dict[str, Any]] = {
        "task": {f"p/t{i}": o.TaskSpec(name=f"t{i}", namespace="p", job="j") for i in range(n_tasks)},
        "job": {"p/j": o.JobSpec(name="j", namespace="p", queue="q")},
        "queue": {"q": o.QueueSpec(name="q")},
        "node": {"n1": o.NodeSpec(name="n1")},
    }
    table = Table()
    metrics = SchedulerMetrics()

    def task_status(key: str) -> str:
        b = table.bindings.get(key)
        return "Pending" if b is None else "Binding"

    q = Queries(specs=specs, table=table, live={"n1": NodeLive(state="alive")},
                pg_status={"p/j": m.PodGroupStatus(version=1, namespace="p", name="j", phase="Inqueue")},
                refused={("queue", "q"): "invalid: bad"}, effective_task=lambda key, spec: spec,
                task_status=task_status, snapshot=lambda: None, gather=lambda name: None, metrics=metrics,
                max_payload=lambda: max_payload, lock=asyncio.Lock(), in_thread=False, journal=Journal())
    return q, table, metrics


def test_views_read_the_table_and_the_specs() -> None:
    q, table, _ = queries()
    table.bindings["p/t0"] = Binding(attempt=2, node="n1")
    table.reasons["p/t1"] = "rejected by n1"
    table.backoff_until["p/t1"] = 10.0
    rows = {r["name"]: r for r in q.view("tasks")}
    assert (rows["t0"]["node"], rows["t0"]["attempt"], rows["t0"]["status"]) == ("n1", 2, "Binding")
    assert rows["t1"]["reason"] == "rejected by n1" and rows["t1"]["backoff"]
    (job,) = q.view("jobs")
    assert job["phase"] == "Inqueue" and job["tasks"] == {"Binding": 1, "Pending": 2}
    (queue,) = q.view("queues")
    assert queue["jobs"] == 1 and queue["refused"] == "invalid: bad"


def test_a_table_replaced_wholesale_is_read_anew() -> None:
    q, table, _ = queries()
    table.backoff_until = {"p/t2": 1.0}  # as the replayer does
    assert [r["name"] for r in q.view("tasks") if r["backoff"]] == ["t2"]


def test_lookup_by_name_and_its_errors() -> None:
    q, _, _ = queries()
    assert q.lookup("jobs", "p/j")["name"] == "j"
    out = q.lookup("tasks", "p/t0", describe=True)
    assert out["spec"]["name"] == "t0" and out["events"] == []
    for kind, name, err in (("tasks", "p/nope", KeyError), ("pods", "x", ValueError)):
        try:
            q.lookup(kind, name)
        except err:
            continue
        raise AssertionError(f"{kind} {name}: no {err.__name__}")


async def test_get_pages_fit_the_payload_limit() -> None:
    q, _, _ = queries(n_tasks=200, max_payload=1024 + 2000)
    reply = m.decode(await q.serve_get(m.encode(m.GetRequest(kind="tasks", limit=200))))
    assert isinstance(reply, m.GetReply) and 0 < len(reply.items) < 200 and reply.next == len(reply.items)
    bad = m.decode(await q.serve_get(m.encode(m.GetRequest(kind="pods"))))
    assert isinstance(bad, m.GetReply) and "unknown kind" in bad.error


def test_gauges_count_tasks_nodes_and_jobs() -> None:
    q, table, metrics = queries()
    table.bindings["p/t0"] = Binding(attempt=1, node="n1")
    q.update_gauges()
    assert metrics.tasks.labels("Pending")._value.get() == 2
    assert metrics.tasks.labels("Binding")._value.get() == 1
    assert metrics.nodes.labels("alive")._value.get() == 1
    assert metrics.jobs.labels("Inqueue")._value.get() == 1
