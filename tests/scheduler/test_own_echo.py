"""The echo of our own binding record known by its bytes (busched.scheduler.binding_feed.BindingFeed.own_echo).

A binding record's echo on the state feed mostly comes before its acknowledgement.  Then the feed no longer
decodes it: the very bytes we wrote for the attempt we hold, on that task's subject, are noted stored at the
echo's sequence.  Here on a real nats-server: the table's records are written through a real `Bus`, and each
echo is handed to the feed as the stream stored it, between the server's acknowledgement and the table's
reading of it (the order the watch mostly sees).  Anything that is not exactly our record still goes
through the decoding and every check: another writer's record on the subject, our bytes on another task's
subject, our record after a newer leader's epoch, a record of an attempt we no longer hold."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from busched.api import objects as o
from busched.bus import Bus
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.cache.cache import Cache
from busched.framework.decision import Decision
from busched.metrics import SchedulerMetrics
from busched.scheduler import events
from busched.scheduler.bindings import BindingTable
from busched.scheduler.effective import EffectiveObjects
from busched.scheduler.events import StateFeed
from busched.scheduler.records import NodeLive, SchedulerSettings

A, B = "t/a", "t/b"


class World:
    """A binding table and a state feed over a real bus; ``decoded`` counts the feed's decodings."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        st = SchedulerSettings()
        self.specs: dict[str, dict[str, Any]] = {k: {} for k in m.UPSERTS}
        self.specs["task"].update({A: o.TaskSpec(name="a", namespace="t", job="j"),
                                   B: o.TaskSpec(name="b", namespace="t", job="j")})
        self.specs["node"].update({"n1": o.NodeSpec(name="n1"), "n2": o.NodeSpec(name="n2")})
        self.live = {"n1": NodeLive(state="alive"), "n2": NodeLive(state="alive")}
        self.outbox: dict[str, tuple[m.Msg, str | None]] = {}
        self.version = 0
        metrics = SchedulerMetrics()

        def next_version() -> int:
            self.version += 1
            return self.version

        self.table = BindingTable(st, lambda: 10.0, bus, boot="me", metrics=metrics, next_version=next_version,
                                  task_specs=self.specs["task"], node_specs=self.specs["node"], live=self.live,
                                  outbox=self.outbox, refresh_task=lambda key: None, new_work=lambda: None,
                                  finish_delete=lambda key: None, purge_object=lambda kind, key: None,
                                  reject=lambda r, k, t: self.feed.reject(r, k, t),
                                  count=lambda k, w: self.feed.count(k, w), ready=lambda: True, journal=self)
        effective = EffectiveObjects(st, Cache(), self.specs, table=self.table, live=self.live, pg_status={})
        self.feed = StateFeed(st, lambda: 10.0, bus, cache=Cache(), specs=self.specs, table=self.table,
                              effective=effective, live=self.live, pg_status={}, outbox=self.outbox,
                              new_work=lambda: None, metrics=metrics)
        self.table.caught_up = True
        self.decoded = 0

    def wall_clock(self) -> float:  # the journal's (events_log)
        return 1.0e9

    def heard(self, subject: str, data: bytes, seq: int) -> str:
        """The feed handed one state message, its decodings counted."""
        decode = events._DECODE

        def counted(b: bytes) -> Any:
            self.decoded += 1
            return decode(b)

        events._DECODE = counted
        try:
            return self.feed.handle_state(subject, data, seq)
        finally:
            events._DECODE = decode

    async def write(self, keys: list[str], node: str, before_ack: Callable[[list[tuple[int, bytes]]], Awaitable[None]]
                    ) -> None:
        """Write ``keys``' binds (records only) through the real bus; ``before_ack`` gets each record as the stream
        stored it (sequence, bytes) after the server acknowledged it and before the table reads the acknowledgement."""
        publish_all = self.bus.publish_all

        async def spied(items: Any) -> Any:
            items = list(items)
            acks = await publish_all(items)
            stored = []
            for subject, *_ in items:
                found = await self.bus.last_state(subject)
                assert found is not None
                stored.append(found)
            await before_ack(stored)
            return acks

        self.bus.publish_all = spied  # type: ignore[method-assign]
        try:
            await self.table.record_binds(self.table.take_binds([Decision("bind", k, node) for k in keys]))
        finally:
            self.bus.publish_all = publish_all  # type: ignore[method-assign]


@pytest.fixture
async def world(nats_server) -> Any:
    bus = await Bus.connect(nats_server.url)
    await bus.ensure_streams()
    try:
        yield World(bus)
    finally:
        await bus.close()


async def test_our_record_heard_before_its_acknowledgement_is_known_by_its_bytes(world: World) -> None:
    outcomes: list[str] = []

    async def echo(stored: list[tuple[int, bytes]]) -> None:
        for key, (seq, data) in zip((A, B), stored):
            assert key in world.table.in_flight  # on its way: its bytes are kept
            outcomes.append(world.heard(S.binding_subject(key), data, seq))
            assert world.table.bindings[key].rec_seq == seq  # noted stored at the echo's sequence

    await world.write([A, B], "n1", echo)
    assert outcomes == ["own", "own"] and world.decoded == 0
    assert not world.table.in_flight  # dropped with the acknowledgements
    for key in (A, B):  # the stored record is ours, and the next record is conditional on it
        seq, data = await world.bus.last_state(S.binding_subject(key))  # type: ignore[misc]
        rec = m.decode(data)
        assert isinstance(rec, m.BindingRecord) and rec.writer == "me" and rec.node == "n1"
        assert world.table.bindings[key].rec_seq == seq
    # heard again (a redelivery, or after the acknowledgement): already known, nothing decoded either
    seq, data = await world.bus.last_state(S.binding_subject(A))  # type: ignore[misc]
    assert world.heard(S.binding_subject(A), data, seq) == "own" and world.decoded == 0


async def test_another_writers_record_on_the_subject_is_decoded_and_holds(world: World, nats_server) -> None:
    """The forgery the bytes must not pass: a record of the same attempt by another writer, stored on the task's
    subject after ours (conditional on ours, as a scheduler racing us would write it)."""
    other = await Bus.connect(nats_server.url)
    outcomes: list[str] = []
    try:
        async def forge(stored: list[tuple[int, bytes]]) -> None:
            (seq, data), = stored
            ours = m.decode(data)
            assert isinstance(ours, m.BindingRecord)
            theirs = m.BindingRecord(version=ours.version + 1, namespace="t", name="a", attempt=ours.attempt,
                                     node="n2", state="binding", writer="other", boot="")
            ack, = await other.publish_all([(S.binding_subject(A), theirs, None, seq)])
            assert ack.ok
            found = await world.bus.last_state(S.binding_subject(A))
            assert found is not None and found[0] == ack.seq
            outcomes.append(world.heard(S.binding_subject(A), found[1], found[0]))

        await world.write([A], "n1", forge)
    finally:
        await other.close()
    assert outcomes == ["applied"] and world.decoded == 1  # decoded and judged: another scheduler's record holds
    b = world.table.bindings[A]
    assert b.node == "n2" and b.published


async def test_our_bytes_on_another_tasks_subject_are_refused(world: World) -> None:
    outcomes: list[str] = []

    async def misplace(stored: list[tuple[int, bytes]]) -> None:
        (seq_a, data_a), (seq_b, _) = stored
        # A's record as if heard on B's subject, at B's sequence: not B's bytes, so decoded and found out
        outcomes.append(world.heard(S.binding_subject(B), data_a, seq_b + 1))

    await world.write([A, B], "n1", misplace)
    assert outcomes == ["mismatch"] and world.decoded == 1
    assert world.table.bindings[B].node == "n1" and world.table.bindings[B].rec_seq > 0


async def test_our_record_behind_a_newer_leaders_epoch_is_judged_as_every_record(world: World) -> None:
    outcomes: list[str] = []

    async def deposed(stored: list[tuple[int, bytes]]) -> None:
        (seq, data), = stored
        world.table.fence_epoch = world.table.epoch + 1  # a newer leader's epoch came before the echo
        outcomes.append(world.heard(S.binding_subject(A), data, seq))

    await world.write([A], "n1", deposed)
    assert outcomes == ["fenced"] and world.decoded == 1


async def test_a_record_of_an_attempt_we_no_longer_hold_is_decoded(world: World) -> None:
    outcomes: list[str] = []

    async def replaced(stored: list[tuple[int, bytes]]) -> None:
        (seq, data), = stored
        # the attempt was replaced meanwhile (e.g. released): the bytes are no longer those of what we hold
        world.table.bindings[A] = world.table.bindings[A].__class__(attempt=9, node="n2")
        outcomes.append(world.heard(S.binding_subject(A), data, seq))

    await world.write([A], "n1", replaced)
    assert world.decoded == 1 and outcomes == ["own"]  # decoded, and judged by its writer as before
