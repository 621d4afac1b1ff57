"""A sharded scheduler's node ledgers: their ``tasks`` fit the scheduler's ``max_event_bytes`` (the other shard's
feed takes them), and the task names cut from them are counted once per ledger written
(busched_writes_cut_total{message="ledger",field="tasks"}), however often a batch is tried."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.publish import Ack
from busched.scheduler import Scheduler, SchedulerSettings
from busched.scheduler.ledger import NodeLedgers
from busched.scheduler.write_bounds import MIN_EVENT_BYTES

CONFLICT = Ack(error="APIError: wrong last sequence", conflict=True)


def _cut(s: Any) -> float:
    return s.metrics.writes_cut.labels("ledger", "tasks")._value.get()


def _scheduler(shard: str, **kw: Any) -> Scheduler:
    return Scheduler(None, None, SchedulerSettings(require_heartbeat=False, shard=shard, **kw))  # type: ignore[arg-type]


def _ledgers(s: Scheduler) -> NodeLedgers:
    assert s.table.ledgers is not None
    return s.table.ledgers


def _items(node: str, n: int, name: str = "x" * 94) -> list[tuple[str, str, str, m.Msg, int]]:
    return [(f"t/{name}{i:04d}", node, f"busched.state.binding.t.{node}.{i}",
             m.BindingRecord(namespace="t", name=f"{node}-{i}", attempt=1, node=node), 0) for i in range(n)]


class _Bus:
    """Stores a batch unless ``refuse`` says it lost its condition; keeps the ledgers stored."""

    def __init__(self, refuse: Any) -> None:
        self.refuse = refuse
        self.calls = 0
        self.written: list[m.NodeLedger] = []

    async def publish_batches(self, bs: Any, timeout: float = 10.0) -> list[Ack]:
        self.calls += 1
        out = []
        for b in [list(x) for x in bs]:
            ledgers = [msg for _, msg, _ in b if isinstance(msg, m.NodeLedger)]
            if self.refuse(ledgers):
                out.append(CONFLICT)
            else:
                self.written.extend(ledgers)
                out.append(Ack(seq=len(b)))
        return out

    async def last_state(self, subject: str) -> None:
        return None


def test_a_ledger_retried_alone_after_a_shared_batch_lost_its_condition_counts_its_cut_names_once() -> None:
    # (the reviewer's reproduction: the shared batch of n1 and n2 loses, each is tried alone and stored)
    s = _scheduler("s1", max_event_bytes=32 * 1024)
    bus = _Bus(lambda ledgers: len(ledgers) > 1)
    _ledgers(s).snapshot_taken()
    asyncio.run(_ledgers(s).write(bus, _items("n1", 500) + _items("n2", 1)))  # type: ignore[arg-type]
    (n1,) = [x for x in bus.written if x.node == "n1"]
    assert bus.calls >= 2 and 0 < len(n1.tasks) < 500
    assert _cut(s) == 500 - len(n1.tasks)


def test_a_ledger_that_is_never_written_counts_no_cut_names() -> None:
    # n1's ledger moved (last_state: none, not the view's 7): shared, then alone, its batch loses every time
    s = _scheduler("s1", max_event_bytes=32 * 1024)
    bus = _Bus(lambda ledgers: any(x.node == "n1" for x in ledgers))
    _ledgers(s).seen["n1"] = 7
    _ledgers(s).snapshot_taken()
    acks = asyncio.run(_ledgers(s).write(bus, _items("n1", 500) + _items("n2", 1)))  # type: ignore[arg-type]
    assert [x.node for x in bus.written] == ["n2"] and not any(a.ok for a in acks[:500])
    assert _cut(s) == 0


@pytest.mark.parametrize("limit", [MIN_EVENT_BYTES, 16 * 1024])
@pytest.mark.parametrize("node", ["n1", "n" * 253])
def test_a_node_ledger_written_at_an_accepted_limit_is_taken_by_the_other_shards_readers(limit: int,
                                                                                       node: str) -> None:
    a = _scheduler("sa", max_event_bytes=limit)
    b = _scheduler("sb", max_event_bytes=limit)
    bus = _Bus(lambda ledgers: False)
    # one cycle binds 300 tasks with names of 60 characters on one node (a big node, small tasks)
    items = _items(node, 300, "w" * 56)
    _ledgers(a).snapshot_taken()
    asyncio.run(_ledgers(a).write(bus, items))  # type: ignore[arg-type]
    (ledger,) = bus.written
    data = m.encode(ledger)
    assert len(data) <= limit
    # as many names as fit: one more would not
    assert ledger.tasks and ledger.tasks == [key for key, *_ in items[:len(ledger.tasks)]]
    assert len(m.encode(m.NodeLedger(node=ledger.node, writer=ledger.writer, shard=ledger.shard,
                                     tasks=[key for key, *_ in items[:len(ledger.tasks) + 1]]))) > limit
    assert _cut(a) == 300 - len(ledger.tasks)
    got = b.feed.handle_decoded(S.ledger_subject(node), "ledger", node, data, 301)
    assert got == "applied" and _ledgers(b).seen.get(node) == 301, (got, len(data))


def test_a_ledger_of_the_widest_names_fits_the_floor() -> None:
    """At MIN_EVENT_BYTES a ledger whose node, writer and shard take 253 characters of 6 bytes each in JSON
    is still written, with what room is left for its tasks."""
    ledgers = NodeLedgers("\x01" * 253, "\x01" * 253, max_bytes=MIN_EVENT_BYTES)
    bus = _Bus(lambda ledgers: False)
    ledgers.snapshot_taken()
    asyncio.run(ledgers.write(bus, _items("\x01" * 253, 50, "\x01" * 20)))  # type: ignore[arg-type]
    (ledger,) = bus.written
    assert len(m.encode(ledger)) <= MIN_EVENT_BYTES
