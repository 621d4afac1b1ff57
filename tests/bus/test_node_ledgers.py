"""Atomic batches (`Bus.publish_batches`) and the node ledgers written with them
(`busched.scheduler.ledger.NodeLedgers`), on a real nats-server."""

from __future__ import annotations

from nats.js import api

from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.publish import MAX_BATCH
from busched.scheduler.ledger import NodeLedgers


def record(i: int, node: str = "n1") -> m.BindingRecord:
    return m.BindingRecord(namespace="t", name=f"x{i}", attempt=1, node=node)


def item(i: int, node: str) -> tuple[str, str, str, m.Msg, int]:
    return (f"t/x{i}", node, S.binding_subject(f"t/x{i}"), record(i, node), 0)


async def stored(bus, subject: str) -> int:
    last = await bus.last_state(subject)
    return last[0] if last is not None else 0


async def test_a_batch_is_stored_whole_or_not_at_all(harness):
    bus = await harness.bus()
    await bus.ensure_streams()
    ok, = await bus.publish_batches([[(S.binding_subject("t/x1"), record(1), 0),
                                      (S.ledger_subject("n1"), m.NodeLedger(node="n1"), 0)]])
    assert ok.ok and await stored(bus, S.ledger_subject("n1")) == ok.seq
    assert await stored(bus, S.binding_subject("t/x1")) == ok.seq - 1  # consecutive, the last one acknowledged
    # the ledger has moved past 0: the whole second batch is refused, its first record too
    lost, = await bus.publish_batches([[(S.binding_subject("t/x2"), record(2), 0),
                                        (S.ledger_subject("n1"), m.NodeLedger(node="n1"), 0)]])
    assert lost.conflict and not lost.ok
    assert await stored(bus, S.binding_subject("t/x2")) == 0


async def test_ledgers_write_each_nodes_records_with_its_ledger_on_the_snapshots_condition(harness):
    bus = await harness.bus()
    await bus.ensure_streams()
    mine = NodeLedgers("s1", "me")
    mine.snapshot_taken()  # both ledgers empty in the view
    # another scheduler places on n2 meanwhile
    theirs = NodeLedgers("s2", "them")
    theirs.snapshot_taken()
    assert all(a.ok for a in await theirs.write(bus, [item(9, "n2")]))
    acks = await mine.write(bus, [item(1, "n1"), item(2, "n2"), item(3, "n1")])
    assert acks[0].ok and acks[2].ok and acks[1].conflict
    assert await stored(bus, S.binding_subject("t/x1")) == acks[0].seq
    assert await stored(bus, S.binding_subject("t/x3")) == acks[2].seq
    assert await stored(bus, S.binding_subject("t/x2")) == 0  # not written: it stays Pending
    assert mine.lost == 1 and mine.seen["n1"] == acks[2].seq + 1  # the ledger follows its records
    # once the view has the other's ledger, the same node takes our batch
    mine.heard("n2", theirs.seen["n2"])
    mine.snapshot_taken()
    again, = await mine.write(bus, [item(2, "n2")])
    assert again.ok


async def test_more_binds_on_a_node_than_one_batch_holds_go_in_rounds_each_on_the_last(harness):
    bus = await harness.bus()
    await bus.ensure_streams()
    ledgers = NodeLedgers("s1", "me")
    ledgers.snapshot_taken()
    n = MAX_BATCH + 10
    acks = await ledgers.write(bus, [item(i, "n1") for i in range(n)])
    assert all(a.ok for a in acks)
    history = await bus.subject_history(S.ledger_subject("n1"))
    assert len(history) == 2
    assert [len(m.decode(data).tasks) for _, data in history] == [MAX_BATCH - 1, n - MAX_BATCH + 1]


async def test_a_state_stream_made_without_atomic_batches_is_given_them(harness):
    bus = await harness.bus()
    await bus.js.add_stream(api.StreamConfig(name=S.STATE_STREAM, subjects=[f"{S.STATE_PREFIX}.>"]))
    assert not (await bus.js.stream_info(S.STATE_STREAM)).config.allow_atomic
    await bus.allow_atomic()
    assert (await bus.js.stream_info(S.STATE_STREAM)).config.allow_atomic


async def test_a_task_another_writer_bound_loses_alone_its_node_takes_the_others(harness):
    bus = await harness.bus()
    await bus.ensure_streams()
    other, = await bus.publish_all([(S.binding_subject("t/x2"), record(2, "n9"), None, 0)])
    ledgers = NodeLedgers("s1", "me")
    ledgers.snapshot_taken()
    acks = await ledgers.write(bus, [item(1, "n1"), item(2, "n1"), item(3, "n1"), item(4, "n2")])
    assert [a.ok for a in acks] == [True, False, True, True] and acks[1].conflict
    assert await stored(bus, S.binding_subject("t/x2")) == other.seq  # the other writer's record stands
    assert await stored(bus, S.binding_subject("t/x3")) == acks[2].seq
    assert ledgers.lost == 0  # no node was taken: the ledger had not moved
    ledger = m.decode((await bus.last_state(S.ledger_subject("n1")))[1])
    assert ledger.tasks == ["t/x1", "t/x3"]


async def test_a_fenced_writer_sends_no_batch(harness):
    """The write fence (a scheduler that lost its lease) is checked before each batch, as before each message."""
    from busched.bus.publish import FENCED

    bus = await harness.bus()
    await bus.ensure_streams()
    bus.fence = lambda: False
    fenced, = await bus.publish_batches([[(S.binding_subject("t/x1"), record(1), 0)]])
    assert fenced.error == FENCED and not fenced.ok
    bus.fence = None
    assert await stored(bus, S.binding_subject("t/x1")) == 0
