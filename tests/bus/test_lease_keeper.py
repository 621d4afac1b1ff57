"""The lease keeper (`busched.bus.lease_keeper`) over a real nats-server: a leader whose event loop is busy
in Python for three lease lengths keeps its lease (renewed from the keeper's thread and connection), where
without the keeper it lapses; a loop wedged past ``stall`` lets it lapse; a step-down is never undone by a
renewal.  The busy stretches below are the thing under test (a cycle holding the loop), not waits."""

from __future__ import annotations

import time

from busched.bus import Bus
from busched.bus.connect import NatsOptions
from busched.bus.lease import Lease
from busched.bus.lease_keeper import Keeper


def busy(seconds: float) -> None:
    """Hold the event loop (and compete for the interpreter) as a cycle's Python work does."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(2000))


async def test_a_busy_loop_keeps_its_lease_with_a_keeper_and_loses_it_without(nats_server) -> None:  # noqa: ANN001
    bus = await Bus.connect(NatsOptions(url=nats_server.url))
    try:
        a = bus.lease(shard="kept", holder="a", duration=1.0, clock=time.monotonic, storage="memory")
        b = bus.lease(shard="kept", holder="b", duration=1.0, clock=time.monotonic, storage="memory")
        assert await a.step()
        assert not await b.step()  # b starts watching a's revision
        keeper = bus.lease_keeper(a)
        assert keeper is not None and keeper.start()
        try:
            revision = a.revision
            busy(3.0)  # three lease lengths without the loop
            assert a.valid(), "the lease lapsed while the loop was busy"
            assert keeper.renewals >= 3 and a.revision > revision
            assert not await b.step(), "a standby claimed a lease that was being renewed"
        finally:
            keeper.stop()
        assert not keeper.running
        # the same stretch without a keeper: nothing renews, the lease may have lapsed by a's own clock
        assert await a.step()
        busy(1.0)
        assert not a.valid()
    finally:
        await bus.close()


async def test_a_wedged_loop_lets_the_lease_lapse(nats_server) -> None:  # noqa: ANN001
    bus = await Bus.connect(NatsOptions(url=nats_server.url))
    try:
        a = bus.lease(shard="wedged", holder="a", duration=1.0, clock=time.monotonic, storage="memory")
        assert await a.step()
        keeper = Keeper(NatsOptions(url=nats_server.url), a, stall=0.5)
        assert keeper.start()
        try:
            busy(2.0)  # no tick for longer than `stall`: the keeper stops renewing
            assert not a.valid()
            renewals = keeper.renewals
            busy(1.0)
            assert keeper.renewals == renewals, "renewed for a wedged loop"
        finally:
            keeper.stop()
    finally:
        await bus.close()


async def test_a_step_down_is_not_undone_by_the_keeper(nats_server) -> None:  # noqa: ANN001
    bus = await Bus.connect(NatsOptions(url=nats_server.url))
    try:
        a = bus.lease(shard="down", holder="a", duration=1.0, clock=time.monotonic, storage="memory")
        assert await a.step()
        keeper = Keeper(NatsOptions(url=nats_server.url), a)
        assert keeper.start()
        a.lost()
        busy(1.0)  # a renewal interval and more: the keeper sees the lease is not held and ends
        assert not a.held and not a.valid()
        assert not keeper.running
        keeper.stop()
    finally:
        await bus.close()


async def test_no_keeper_for_a_bus_without_options(nats_server) -> None:  # noqa: ANN001
    import nats

    nc = await nats.connect(nats_server.url)
    bus = Bus(nc)
    try:
        lease = bus.lease(shard="x", holder="a", duration=1.0, clock=time.monotonic, storage="memory")
        assert bus.lease_keeper(lease) is None
    finally:
        await bus.close()


def test_a_keeper_whose_bucket_lookup_goes_unanswered_gives_up_within_a_third_of_the_lease(monkeypatch) -> None:
    """The lease keeper's bucket lookup is one ask bounded by a third of the lease (its own requests' wait):
    asked again through an election (12 s) it kept the election step waiting past a 2 s lease, which lapsed."""
    import asyncio
    import time

    from busched.bus import lease_keeper

    class _Js:
        async def key_value(self, bucket: str) -> None:
            await asyncio.Event().wait()  # never answered

    class _Nc:
        def jetstream(self, **kw: object) -> _Js:
            return _Js()

        async def close(self) -> None:
            return None

    async def connect(**kw: object) -> _Nc:
        return _Nc()

    monkeypatch.setattr(lease_keeper.nats, "connect", connect)
    ls = Lease(object(), shard="default", holder="me", duration=2.0)
    keeper = Keeper(NatsOptions(url="nats://127.0.0.1:1"), ls)
    t0 = time.monotonic()
    assert keeper.start() is False
    assert time.monotonic() - t0 < ls.duration
    assert keeper.error is not None
