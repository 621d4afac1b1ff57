"""The lease (`busched.bus.lease`) over a real nats-server: claim, renew, a lost renewal, expiry judged on the
reader's clock, release, and the write fence on the bus.  Clocks are injected: nothing here sleeps."""

from __future__ import annotations

import asyncio

from busched.bus import Bus
from busched.bus import lease as L
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.publish import FENCED


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


async def test_first_claim_renew_and_a_standby_waiting(nats_server) -> None:  # noqa: ANN001
    bus = await Bus.connect(nats_server.url)
    try:
        clock = Clock()
        a = bus.lease(shard="default", holder="a", duration=2.0, clock=clock, storage="memory")
        b = bus.lease(shard="default", holder="b", duration=2.0, clock=clock, storage="memory")
        assert await a.step() is True and a.held and a.valid()
        first = a.epoch
        assert first >= 1
        assert await b.step() is False  # held: b only watches
        clock.t += 0.6
        assert await a.step() is True  # renewed: same epoch, newer revision
        assert a.epoch == first and a.revision > 1
        clock.t += 1.9  # b has seen a's latest revision for 1.9 s < 2 s: not yet
        assert await b.step() is False
        assert await a.step() is True  # a renews again: b's observation starts over
        clock.t += 1.99
        assert await b.step() is False
        leases = await bus.read_leases()
        assert [(s.shard, s.record.holder, s.record.epoch) for s in leases] == [("default", "a", first)]
    finally:
        await bus.close()


async def test_expiry_takeover_and_the_old_holder_loses(nats_server) -> None:  # noqa: ANN001
    bus = await Bus.connect(nats_server.url)
    try:
        ca, cb = Clock(), Clock()
        a = bus.lease(shard="s1", holder="a", duration=2.0, clock=ca, storage="memory")
        b = bus.lease(shard="s1", holder="b", duration=2.0, clock=cb, storage="memory")
        assert await a.step()
        assert not await b.step()  # b sees revision r at t=100
        # a is paused: its clock runs on, it does not renew.  Its own view ends first, with the margin
        ca.t += 2.0 - a.margin
        assert not a.valid()
        cb.t += 2.0  # b has seen r unchanged for the whole lease: it claims
        assert await b.step() is True
        assert b.epoch > a.epoch
        # a wakes and tries to renew: refused by the server (the revision moved), a knows it lost
        assert await a.step() is False
        assert not a.held and not a.valid()
        (s,) = await bus.read_leases()
        assert (s.record.holder, s.record.epoch) == ("b", b.epoch)
    finally:
        await bus.close()


async def test_two_claims_at_once_exactly_one_wins(nats_server) -> None:  # noqa: ANN001
    bus = await Bus.connect(nats_server.url)
    try:
        clock = Clock()
        contenders = [bus.lease(shard="race", holder=f"h{i}", duration=1.0, clock=clock, storage="memory")
                      for i in range(4)]
        won = await asyncio.gather(*(c.step() for c in contenders))
        assert sum(won) == 1
        # the holder vanishes; after a whole lease the others race again on the same revision: one wins
        others = [c for c, w in zip(contenders, won) if not w]
        await asyncio.gather(*(c.step() for c in others))  # all observe the revision
        clock.t += 1.0
        again = await asyncio.gather(*(c.step() for c in others))
        assert sum(again) == 1
        winner = next(c for c, w in zip(others, again) if w)
        assert winner.epoch > next(c for c, w in zip(contenders, won) if w).epoch
    finally:
        await bus.close()


async def test_release_lets_a_standby_claim_at_once(nats_server) -> None:  # noqa: ANN001
    bus = await Bus.connect(nats_server.url)
    try:
        clock = Clock()
        a = bus.lease(shard="default", holder="a", duration=5.0, clock=clock, storage="memory")
        b = bus.lease(shard="default", holder="b", duration=5.0, clock=clock, storage="memory")
        assert await a.step()
        assert not await b.step()
        await a.release()
        assert not a.held
        assert await b.step() is True  # no holder: claimed without waiting a lease
        assert b.epoch > a.epoch
    finally:
        await bus.close()


async def test_a_bad_value_is_nobodys_lease(nats_server) -> None:  # noqa: ANN001
    bus = await Bus.connect(nats_server.url)
    try:
        clock = Clock()
        a = bus.lease(shard="default", holder="a", duration=2.0, clock=clock, storage="memory")
        await a.open()
        await a.kv.put("default", b'{"holder": "x", "epoch": -3, "duration": 1e9}')
        assert L.decode(b'{"holder": "x", "epoch": -3, "duration": 1e9}') is None
        assert await a.step() is True  # an undecodable value holds nothing: claimed over it
    finally:
        await bus.close()


async def test_the_fence_refuses_writes_before_they_leave(nats_server) -> None:  # noqa: ANN001
    bus = await Bus.connect(nats_server.url)
    try:
        await bus.ensure_streams()
        allowed = [True]
        bus.fence = lambda: allowed[0]
        rec = m.LeaderEpoch(shard="default", epoch=1)
        ok = await bus.publish_all([(S.leader_subject("default"), rec, None)])
        assert ok[0].ok
        allowed[0] = False
        refused = await bus.publish_all([(S.leader_subject("default"), rec, None)] * 2)
        assert [a.error for a in refused] == [FENCED, FENCED]
        assert (await bus.publish(S.leader_subject("default"), rec)).error == FENCED
        assert await bus.purge_state(S.leader_subject("default")) is False
        found = await bus.last_state(S.leader_subject("default"))
        assert found is not None and found[0] == ok[0].seq  # nothing else reached the stream
    finally:
        await bus.close()


async def test_the_server_refuses_a_deposed_leaders_statuses(nats_server) -> None:  # noqa: ANN001
    old, new = await Bus.connect(nats_server.url), await Bus.connect(nats_server.url)
    try:
        await old.ensure_streams()
        marker = S.leader_subject("default")
        first = await old.publish(marker, m.LeaderEpoch(shard="default", epoch=1))
        old.write_condition = (marker, first.seq)
        status = m.PodGroupStatus(namespace="ns", name="j", phase="Running")
        ok = await old.publish_all([(S.podgroup_subject("ns/j"), status, None)])
        assert ok[0].ok
        # a newer leader writes its epoch: the old one's unconditioned state writes are refused by the server
        second = await new.publish(marker, m.LeaderEpoch(shard="default", epoch=2))
        new.write_condition = (marker, second.seq)
        late = await old.publish_all([(S.podgroup_subject("ns/j"), status, None)])
        assert late[0].conflict and not late[0].ok
        assert (await old.publish(S.podgroup_subject("ns/j"), status)).conflict
        # writes with their own condition keep it (binding records: the readers' epoch rule fences those)
        rec = m.BindingRecord(namespace="ns", name="t", attempt=1, node="n", epoch=1)
        assert (await old.publish_all([(S.binding_subject("ns/t"), rec, None, 0)]))[0].ok
        assert (await new.publish_all([(S.podgroup_subject("ns/j"), status, None)]))[0].ok
        found = await new.last_state(S.podgroup_subject("ns/j"))
        assert found is not None and found[0] > ok[0].seq
    finally:
        await old.close()
        await new.close()
