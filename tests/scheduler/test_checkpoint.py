"""Restart from a checkpoint (issue 17, busched.scheduler.checkpoint): a scheduler started from the stored
checkpoint and the tail after it knows exactly what one that read the whole state stream knows (specs, the
cache and its order, binding records, results, epochs, statuses), and a checkpoint that cannot be trusted
is ignored for the full read.  Over a real nats-server; the format's own checks without one."""

from __future__ import annotations

import asyncio
import dataclasses
import zlib
from typing import Any

import msgspec
import pytest

from busched.agent import fleet_nodes
from busched.api.objects import ClusterSpec
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.apply import apply_cluster
from busched.bus.checkpoints import StreamFacts
from busched.scheduler import checkpoint as C
from busched.scheduler import checkpoint_writer
from tests.nats_fixture import wait_until
from tests.scheduler.test_trust import known_state, tasks


# -- the format --------------------------------------------------------------------------------------------------
def sample(seq: int = 9, n: int = 50) -> C.Checkpoint:
    subjects = [f"busched.state.task.ns.t{i}" for i in range(n)]
    return C.Checkpoint(stream=S.STATE_STREAM, created="2026-01-01T00:00:00Z", seq=seq, subjects=subjects,
                        seqs=list(range(1, n + 1)), data=[b'{"kind":"x","spec":"' + b"y" * 40 + b'"}'] * n)


def test_a_checkpoint_decodes_to_what_was_encoded_and_is_compressed_when_that_pays():
    ck = sample()
    blob = C.encode(ck)
    assert blob[:4] == C.MAGIC and blob[6:7] == b"z"  # repetitive JSON shrinks
    assert C.decode(blob) == ck
    small = C.Checkpoint(stream=S.STATE_STREAM, created="c", seq=0, subjects=[], seqs=[], data=[])
    assert C.decode(C.encode(small)) == small


@pytest.mark.parametrize("blob, why", [
    (b"", "corrupt"),
    (b"XXXX\x00\x01r", "corrupt"),
    (C.MAGIC + b"\x00\x01z" + b"not zlib at all", "corrupt"),
    (C.MAGIC + b"\x00\x01r" + b"\x93\x01\x02", "corrupt"),
    (C.MAGIC + (C.FORMAT + 1).to_bytes(2, "big") + b"r", "newer"),
])
def test_a_corrupt_or_newer_checkpoint_is_refused(blob, why):
    with pytest.raises(C.CheckpointError, match=why):
        C.decode(blob)


def test_a_truncated_or_oversized_body_is_refused():
    blob = C.encode(sample(n=500))
    with pytest.raises(C.CheckpointError, match="corrupt"):
        C.decode(blob[:len(blob) // 2])
    with pytest.raises(C.CheckpointError, match="corrupt"):
        C.decode(blob, max_bytes=100)  # inflates past the bound: refused, not held in memory
    raw = msgspec.msgpack.encode(msgspec.structs.replace(sample(), seqs=[1]))
    with pytest.raises(C.CheckpointError, match="columns"):
        C.decode(C.MAGIC + C.FORMAT.to_bytes(2, "big") + b"z" + zlib.compress(raw))


def test_merge_keeps_the_last_message_per_subject_in_stream_order():
    ck = C.Checkpoint(stream=S.STATE_STREAM, created="c", seq=5, subjects=["a", "b", "c"], seqs=[1, 4, 5],
                      data=[b"a1", b"b4", b"c5"])
    tail = [("a", 6, b"a6"), ("d", 7, b"d7"), ("a", 8, b"a8")]
    assert C.merge(ck, tail) == [("b", b"b4", 4), ("c", b"c5", 5), ("d", b"d7", 7), ("a", b"a8", 8)]


def _batches_plain(merged: C.Merged, size: int, release: bool) -> list[list[tuple[str, bytes, int]]]:
    """`Merged.batches` entry by entry (the reference of the sliced one)."""
    over, keep, ck = {it[0] for it in merged.tail}, merged.keep, merged.ck
    out: list[tuple[str, bytes, int]] = []
    got = []
    assert ck is not None
    for i, subject in enumerate(ck.subjects):
        if subject not in over and (keep is None or subject in keep):
            out.append((subject, ck.data[i], ck.seqs[i]))
            if len(out) >= size:
                got.append(out)
                out = []
        if release:
            ck.data[i] = b""
    for it in merged.tail:
        if keep is None or it[0] in keep:
            out.append(it)
            if len(out) >= size:
                got.append(out)
                out = []
    return got + [out] if out else got


@pytest.mark.parametrize("seed", range(8))
def test_batches_hand_over_what_the_plain_walk_does_and_let_the_checkpoint_go(seed):
    import random

    rng = random.Random(seed)
    n = rng.randint(0, 60)
    subjects = [f"s{i}" for i in range(n)]
    tail = [(f"s{rng.randint(0, n + 2)}", n + 1 + i, b"t%d" % i) for i in range(rng.randint(0, 12))]

    def merged() -> C.Merged:
        if n and rng.random() < 0.3:  # (a forged one: a subject twice)
            subjects[rng.randrange(n)] = subjects[rng.randrange(n)]
        ck = C.Checkpoint(stream=S.STATE_STREAM, created="c", seq=n, subjects=list(subjects),
                          seqs=list(range(1, n + 1)), data=[b"d%d" % i for i in range(n)])
        mg = C.Merged(ck, tail)
        if rng.random() < 0.4:
            mg.keep = {f"s{i}" for i in range(n + 11) if rng.random() < 0.7}
        return mg

    for size in (1, 3, 7, 64):
        for release in (False, True):
            state = rng.getstate()
            a = merged()
            rng.setstate(state)
            b = merged()
            assert len(a) == sum(1 for _ in b._subjects())  # (before the batches: they let the checkpoint go)
            assert list(a.batches(size, release=release)) == _batches_plain(b, size, release)
            assert a.ck is not None and b.ck is not None and a.ck.data == b.ck.data
            assert all(not d for d in a.ck.data) if release else a.ck.data == [b"d%d" % i for i in range(n)]


@pytest.mark.parametrize("facts, why", [
    (StreamFacts("2026-02-02T00:00:00Z", 1, 20, 20, 20), "another stream"),
    (StreamFacts("2026-01-01T00:00:00Z", 1, 5, 5, 5), "ahead of the stream"),
    (StreamFacts("2026-01-01T00:00:00Z", 10, 20, 11, 11), "older than"),
    (StreamFacts("2026-01-01T00:00:00Z", 1, 9 + 5000, 10, 10), "full read is cheaper"),
    (StreamFacts("2026-01-01T00:00:00Z", 1, 12, 12, 12), ""),
])
def test_a_checkpoint_that_does_not_fit_the_stream_is_not_used(facts, why):
    got = C.unusable(sample(), facts)
    assert (why in got) if why else got == ""


# -- over the bus ------------------------------------------------------------------------------------------------
def everything(s: Any) -> tuple[Any, ...]:
    """`known_state` and what it leaves out: the cache's order of every kind (the base scan order) and of the
    tasks' arrival, the feed's sequences, binding records whole (but for ``decided``: this process's clock when
    it read the record), statuses, epochs, refusals."""
    s.sync_cache()
    seq = s.cache.task_seq
    return (known_state(s), {k: list(v) for k, v in s.cache.objects.items()}, sorted(seq, key=seq.__getitem__),
            dict(s.feed.seqs), {k: dataclasses.replace(b, decided=0.0) for k, b in s.bindings.items()},
            dict(s.results), dict(s.pg_status), dict(s.refused),
            s.table.fence_epoch, s.table.epoch, dict(s.table.failures), dict(s.table.reasons))


async def settled_cluster(harness: Any) -> tuple[Any, Any, Any, list[Any]]:
    """A scheduler that placed work (some of it finished) under epoch 3, its agent, and its nodes."""
    bus = await harness.bus()
    await bus.ensure_streams()
    await bus.publish(S.leader_subject("default"), m.LeaderEpoch(version=1, shard="default", epoch=3, holder="old"))
    nodes = fleet_nodes(3, cpu="4")
    sched = await harness.scheduler()
    agent = await harness.agent(nodes)
    await apply_cluster(bus, tasks(4, job="a", duration=0.1))
    await apply_cluster(bus, tasks(3, job="b"))
    await wait_until(lambda: sorted(t["status"] for t in sched.view("tasks")) == ["Running"] * 3 + ["Succeeded"] * 4,
                     timeout=15, what="a done, b running")
    return bus, sched, agent, nodes


async def quiet(*parts: Any) -> None:
    for p in parts:
        await p.stop()
    await asyncio.sleep(0.2)  # kept: what they wrote last reaches the stream before the readers start


async def test_a_restart_from_the_checkpoint_and_tail_knows_what_a_full_read_knows(harness):
    bus, sched, agent, nodes = await settled_cluster(harness)
    assert await sched.checkpoints.write_once(force=True) > 0
    covered = sched.checkpoints.written_seq
    # the tail: new work, a finished job deleted (its subjects purged), a node changed, a task rejected
    await apply_cluster(bus, tasks(2, job="c"))
    await apply_cluster(bus, tasks(4, job="a", duration=0.1), delete=True)
    await apply_cluster(bus, ClusterSpec(nodes=[msgspec.structs.replace(nodes[0], labels={"zone": "z1"})]))
    await bus.publish(S.state_subject("task", "t/b-0"), b"{not json")
    await wait_until(lambda: not any(k.startswith("t/a-") for k in sched.specs["task"])
                     and sum(t["status"] == "Running" for t in sched.view("tasks")) == 5, timeout=15,
                     what="a gone, c running")
    await quiet(agent, sched)

    again = await harness.scheduler(run=False)
    full = await harness.scheduler(run=False, checkpoint=C.CheckpointSettings(read=False))
    assert again.restored is not None and full.restored is None
    assert again.restored.seq > covered and again.restored.seq == (await bus.checkpoint_facts()).last_seq
    assert again.table.fence_epoch == 3 and any(b.attempt for b in again.bindings.values())
    assert everything(again) == everything(full)


@pytest.mark.parametrize("blob", [b"BSCK\x00\x01zgarbage", C.MAGIC + (C.FORMAT + 1).to_bytes(2, "big") + b"r"])
async def test_a_corrupt_or_newer_checkpoint_is_ignored_for_the_full_read(harness, blob, caplog):
    bus, sched, agent, _ = await settled_cluster(harness)
    await quiet(agent, sched)
    assert await bus.checkpoint_put(C.OBJECT, blob)
    caplog.set_level("INFO", logger="busched.scheduler")
    again = await harness.scheduler(run=False)
    full = await harness.scheduler(run=False, checkpoint=C.CheckpointSettings(read=False))
    assert again.restored is None
    assert "state checkpoint not used" in caplog.text
    assert everything(again) == everything(full)


async def test_a_checkpoint_of_a_stream_made_again_is_ignored(harness, caplog):
    bus, sched, agent, _ = await settled_cluster(harness)
    assert await sched.checkpoints.write_once(force=True) > 0
    await quiet(agent, sched)
    await bus.js.delete_stream(S.STATE_STREAM)
    await bus.ensure_streams()
    await apply_cluster(bus, tasks(2, job="fresh"))
    caplog.set_level("INFO", logger="busched.scheduler")
    again = await harness.scheduler(run=False)
    assert again.restored is None and "another stream" in caplog.text
    assert sorted(again.specs["task"]) == ["t/fresh-0", "t/fresh-1"]


async def test_the_writer_builds_on_its_last_checkpoint_and_a_standby_writes_none(harness):
    bus, sched, agent, _ = await settled_cluster(harness)
    first = await sched.checkpoints.write_once(force=True)
    assert first > 0 and await sched.checkpoints.write_once() == 0  # the stream has not grown enough
    await apply_cluster(bus, tasks(2, job="c"))
    await wait_until(lambda: sum(t["status"] == "Running" for t in sched.view("tasks")) == 5, timeout=15,
                     what="c running")
    assert await sched.checkpoints.write_once(force=True) > 0
    ck = C.decode(await bus.checkpoint_get(C.OBJECT))
    held = [S.parse_state_subject(s) for s in ck.subjects]
    assert ck.seq == sched.checkpoints.written_seq and {"t/c-0", "t/c-1"} <= {k for kind, k in held if kind == "task"}
    assert ck.seqs == sorted(ck.seqs) and len(set(ck.subjects)) == len(ck.subjects)
    bus.fence = lambda: False  # a standby (or a deposed leader) may not write
    assert await bus.checkpoint_put(C.OBJECT, b"x") is False


async def test_a_tail_whose_messages_were_all_purged_still_starts_from_the_checkpoint(harness):
    bus, sched, agent, _ = await settled_cluster(harness)
    await quiet(agent, sched)
    writer = checkpoint_writer.CheckpointWriter(bus, C.CheckpointSettings(), lambda: True)
    assert await writer.write_once(force=True) > 0
    # after the checkpoint: a task written, then its subject purged: the stream's last sequence moved on, and
    # no message after the checkpoint is left to read
    ack = await bus.publish(S.state_subject("task", "t/gone"), m.upsert("task", tasks(1, job="gone").tasks[0], 1))
    assert ack.ok and await bus.purge_state(S.state_subject("task", "t/gone"))
    facts = await bus.checkpoint_facts()
    assert facts.last_seq == ack.seq > writer.written_seq
    again = await asyncio.wait_for(harness.scheduler(run=False), 30)
    full = await harness.scheduler(run=False, checkpoint=C.CheckpointSettings(read=False))
    assert again.restored is not None and again.restored.seq == ack.seq
    assert "t/gone-0" not in again.specs["task"] and everything(again) == everything(full)



async def test_the_scheduler_credential_may_write_and_read_the_checkpoint(tmp_path, caplog):
    """Under exactly `auth.scheduler_permissions` (as `busched up` gives them), the object's batched read
    included (busched.bus.checkpoints: a pull consumer on the object store's stream)."""
    import json

    from busched.bus import Bus, auth
    from busched.bus.connect import NatsOptions
    from busched.bus.server import NatsServer
    from busched.scheduler import Scheduler, SchedulerSettings
    from tests.nats_fixture import FAST

    perms = json.dumps(auth.scheduler_permissions())
    conf = f"authorization {{ users = [ {{ user: scheduler, password: s3cret, permissions: {perms} }} ] }}"
    srv = NatsServer(tmp_path / "nats", config=conf).start()
    opts = NatsOptions(url=srv.url, user="scheduler", password="s3cret", inbox_prefix=auth.SCHEDULER_INBOX_PREFIX)
    buses: list[Any] = []
    scheds: list[Any] = []
    try:
        for _ in range(2):
            buses.append(await Bus.connect(opts))
        first = Scheduler(buses[0], None, SchedulerSettings(**FAST))
        scheds.append(first)
        await first.start()
        await apply_cluster(buses[0], tasks(3, job="p"))
        await wait_until(lambda: len(first.specs["task"]) == 3, what="the tasks applied")
        assert await first.checkpoints.write_once(force=True) > 0
        again = Scheduler(buses[1], None, SchedulerSettings(**FAST))
        scheds.append(again)
        caplog.set_level("INFO", logger="busched.bus")
        await again.start()
        assert again.restored is not None and sorted(again.specs["task"]) == ["t/p-0", "t/p-1", "t/p-2"]
        assert "batched read failed" not in caplog.text
    finally:
        for s in scheds:
            await s.stop()
        for b in buses:
            await b.close()
        srv.stop()


async def test_a_running_scheduler_writes_checkpoints_in_the_background(harness):
    bus = await harness.bus()
    sched = await harness.scheduler(checkpoint=C.CheckpointSettings(interval=0.05, min_messages=1))
    await apply_cluster(bus, tasks(2, job="p"))
    await wait_until(lambda: sched.checkpoints.writes >= 1, timeout=15, what="a checkpoint written")
    ck = C.decode(await bus.checkpoint_get(C.OBJECT))
    assert {"t/p-0", "t/p-1"} <= {k for kind, k in map(S.parse_state_subject, ck.subjects) if kind == "task"}
    await sched.stop()  # the writer stops with it
    assert sched._checkpoint_task is not None and sched._checkpoint_task.done()
