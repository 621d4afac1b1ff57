"""What a record leaves out so that its readers take it is counted, not only logged: an operator scraping
/metrics sees ``busched_writes_cut_total{message,field}`` grow by the parts left out (the conditions a podgroup
status could not hold, `busched.scheduler.statuses.fit_conditions`; the task names a node ledger's informational
``tasks`` could not hold, `busched.scheduler.ledger`).  Through a `Scheduler` (no bus: nothing is published), so
the wiring to its registry is what is tested."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from busched.api import objects as o
from busched.bus import messages as m
from busched.bus.publish import Ack
from busched.scheduler import Scheduler, SchedulerSettings


def _cut(s: Any, message: str, field: str) -> float:
    return s.metrics.writes_cut.labels(message, field)._value.get()


def _conditions(n: int) -> list[dict[str, str]]:
    return [{"type": f"C{i}", "status": "True", "reason": "r", "message": "m" * 300, "transitionID": ""}
            for i in range(n)]


def test_the_conditions_a_status_leaves_out_are_counted_once() -> None:
    s = Scheduler(None, None, SchedulerSettings(require_heartbeat=False, max_event_bytes=30_000))  # type: ignore
    s.specs["job"]["t/j"] = o.JobSpec(name="j", namespace="t")
    s.specs["job"]["t/k"] = o.JobSpec(name="k", namespace="t")
    own = {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources", "message": "no",
           "transitionID": "s1"}
    big = SimpleNamespace(has_podgroup=True, conditions=[own, *_conditions(1000)], phase="Pending")
    small = SimpleNamespace(has_podgroup=True, conditions=_conditions(3), phase="Pending")
    asyncio.run(s.statuses.collect(SimpleNamespace(jobs={"t/j": big, "t/k": small})))
    kept = len(s.statuses.recorded["t/j"].conditions)
    assert 1 < kept < 1001 and len(s.statuses.recorded["t/k"].conditions) == 3
    assert _cut(s, "podgroup.status", "conditions") == 1001 - kept
    # the same conditions again write no status: nothing more is counted
    asyncio.run(s.statuses.collect(SimpleNamespace(jobs={"t/j": big, "t/k": small})))
    assert _cut(s, "podgroup.status", "conditions") == 1001 - kept
    # one condition more: a new status, as many left out again (one more)
    big.conditions = [*big.conditions, *_conditions(1001)[1000:]]
    asyncio.run(s.statuses.collect(SimpleNamespace(jobs={"t/j": big})))
    assert len(s.statuses.recorded["t/j"].conditions) == kept
    assert _cut(s, "podgroup.status", "conditions") == 2 * (1001 - kept) + 1


def test_the_task_names_a_ledger_leaves_out_are_counted() -> None:
    s = Scheduler(None, None, SchedulerSettings(require_heartbeat=False, shard="s1"))  # type: ignore[arg-type]
    ledgers = s.table.ledgers
    assert ledgers is not None
    found: list[m.NodeLedger] = []

    class Bus:
        async def publish_batches(self, bs: Any, timeout: float = 10.0) -> list[Ack]:
            bs = [list(b) for b in bs]
            found.extend(msg for b in bs for _, msg, _ in b if isinstance(msg, m.NodeLedger))
            return [Ack(seq=len(b)) for b in bs]

        async def last_state(self, subject: str) -> None:
            return None

    def items(n: int, name_len: int) -> list[tuple[str, str, str, m.Msg, int]]:
        return [(f"t/{'x' * name_len}{i:04d}", "n1", f"busched.state.binding.t.{i}",
                 m.BindingRecord(namespace="t", name=str(i), attempt=1, node="n1"), 0) for i in range(n)]

    ledgers.snapshot_taken()
    asyncio.run(ledgers.write(Bus(), items(10, 20)))  # type: ignore[arg-type]
    assert len(found[-1].tasks) == 10 and _cut(s, "ledger", "tasks") == 0
    # 999 names of 300 characters: the default max_event_bytes (256 KiB) holds about 870 of them
    asyncio.run(ledgers.write(Bus(), items(999, 294)))  # type: ignore[arg-type]
    kept = len(found[-1].tasks)
    assert 0 < kept < 999
    assert _cut(s, "ledger", "tasks") == 999 - kept
