"""`busched.scheduler.lifecycle.Lifecycle` alone: which attempts a suspend and a drain stop (no bus)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from busched.api.objects import NodeSpec, TaskSpec
from busched.bus import messages as m
from busched.scheduler.lifecycle import Lifecycle
from busched.scheduler.records import Binding


class FakeTable:
    def __init__(self, bindings: dict[str, Binding]) -> None:
        self.bindings = bindings
        self.stopped: list[tuple[str, str, str]] = []

    def stop_attempt(self, key: str, reason: str, why: str, *, bind_deleted: bool = False) -> None:
        self.stopped.append((key, reason, why))
        self.bindings[key].state = "evicting"


def part(bindings: dict[str, Binding], *, suspended: set[str], changed: set[str],
         nodes: dict[str, NodeSpec] | None = None, seqs: dict | None = None) -> tuple[Lifecycle, FakeTable, list[int]]:
    tasks = {f"t/{j}-{i}": TaskSpec(name=f"{j}-{i}", namespace="t", job=j) for j in ("a", "b") for i in range(2)}
    table = FakeTable(bindings)
    work: list[int] = []
    lc = Lifecycle(specs={"task": tasks, "node": nodes or {}}, seqs=seqs or {}, table=table,
                   effective=SimpleNamespace(suspended=suspended, suspend_changed=changed), lock=asyncio.Lock(),
                   new_work=lambda: work.append(1))
    return lc, table, work


def test_enforce_stops_the_live_attempts_of_newly_suspended_jobs_only():
    bindings = {"t/a-0": Binding(attempt=1, node="n1"), "t/a-1": Binding(attempt=2, node="n2", state="evicting"),
                "t/b-0": Binding(attempt=1, node="n1"), "t/b-1": Binding(attempt=1, node="n1", state="released")}
    changed = {"t/a", "t/b"}
    lc, table, _ = part(bindings, suspended={"t/a"}, changed=changed)  # b was resumed, a suspended
    assert lc.enforce() == ["t/a-0"]
    assert table.stopped == [("t/a-0", "suspended", "evict")]  # a-1 is already being stopped
    assert changed == set()  # taken
    assert lc.enforce() == []  # nothing new: nothing stopped again


async def test_drain_stops_every_live_attempt_on_a_cordoned_node():
    bindings = {"t/a-0": Binding(attempt=1, node="n1"), "t/a-1": Binding(attempt=1, node="n2"),
                "t/b-0": Binding(attempt=1, node="n1", state="evicting"), "t/b-1": Binding(attempt=1, node="n1",
                                                                                          state="done")}
    nodes = {"n1": NodeSpec(name="n1", unschedulable=True), "n2": NodeSpec(name="n2")}
    lc, table, work = part(bindings, suspended=set(), changed=set(), nodes=nodes, seqs={("node", "n1"): 7})
    reply = m.decode(await lc.serve_drain(m.encode(m.DrainRequest(node="n1", after=7))))
    assert reply.items == [{"node": "n1", "evicting": ["t/a-0", "t/b-0"]}] and not reply.error
    assert table.stopped == [("t/a-0", "drain", "evict")] and work == [1]
    reply = m.decode(await lc.serve_drain(m.encode(m.DrainRequest(node="n2"))))
    assert "not cordoned" in reply.error and table.stopped == [("t/a-0", "drain", "evict")]


async def test_drain_waits_for_the_cordon_it_follows(monkeypatch):
    from busched.scheduler import lifecycle

    monkeypatch.setattr(lifecycle, "CORDON_WAIT", 2.0)
    nodes = {"n1": NodeSpec(name="n1")}
    seqs = {("node", "n1"): 3}
    lc, table, _ = part({"t/a-0": Binding(attempt=1, node="n1")}, suspended=set(), changed=set(), nodes=nodes,
                        seqs=seqs)

    async def cordon_arrives() -> None:
        await asyncio.sleep(0.05)
        nodes["n1"] = NodeSpec(name="n1", unschedulable=True)
        seqs[("node", "n1")] = 9

    arriving = asyncio.ensure_future(cordon_arrives())
    reply = m.decode(await lc.serve_drain(m.encode(m.DrainRequest(node="n1", after=9))))
    await arriving
    assert reply.items[0]["evicting"] == ["t/a-0"] and table.stopped == [("t/a-0", "drain", "evict")]
