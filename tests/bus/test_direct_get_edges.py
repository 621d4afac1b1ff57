"""Edges of a direct get's two rounds (`busched.bus.reads.last_msg`) and of the lease read
(`busched.bus.lease.read_leases`), from a review of this stop's mends: each test here killed a mutant the
other tests let live (a refusal with less than one ask left, a failure in the second round counted, a config
read answered past the bound, deleted and purged lease keys)."""

from __future__ import annotations

import asyncio
import time

import nats.errors
import pytest

from busched.bus import BusError, asks, reads
from busched.bus.asks import Policy
from tests.bus.test_asks import _counts, _ElectingJs


class _LateRefusalJs(_ElectingJs):
    """The first round's last direct get is refused late: less than one ask_s of the bound is left."""

    async def get_last_msg(self, stream, subject, direct=False):
        self.gets += 1
        if self.gets == 2:
            await asyncio.sleep(0.7)
        if self.gets <= self.refusals:
            raise nats.errors.NoRespondersError
        return type("Msg", (), {"seq": 7, "data": b"{}"})()


async def test_a_refusal_with_less_than_one_ask_left_is_still_asked_on(monkeypatch):
    monkeypatch.setattr(reads, "DIRECT_GET", Policy(ask_s=0.5, asks=2, total_s=1.0, pause_s=0.01))
    monkeypatch.setattr(asks, "ASKING", Policy(ask_s=0.5, asks=8, total_s=1.0, pause_s=0.01))
    js = _LateRefusalJs(refusals=2, allow_direct=True)
    assert await asyncio.wait_for(reads.last_msg(js, "S", "s.a", direct=True), 5) == (7, b"{}")
    assert js.infos == 1 and js.gets == 3


async def test_a_direct_get_failing_in_its_second_round_is_counted_given_up_once(monkeypatch):
    monkeypatch.setattr(reads, "DIRECT_GET", Policy(ask_s=0.05, asks=4, total_s=1.0, pause_s=0.01))
    monkeypatch.setattr(asks, "ASKING", Policy(ask_s=0.05, asks=20, total_s=2.0, pause_s=0.01))
    _, before = _counts("direct.get")
    js = _ElectingJs(refusals=10_000, allow_direct=True)
    with pytest.raises(BusError, match="no responders"):
        await asyncio.wait_for(reads.last_msg(js, "S", "s.a", direct=True), 5)
    assert js.infos == 1 and js.gets > 4
    assert _counts("direct.get")[1] == before + 1


async def test_a_config_read_answered_past_the_bound_leaves_the_refusal_standing(monkeypatch):
    monkeypatch.setattr(reads, "DIRECT_GET", Policy(ask_s=0.05, asks=2, total_s=0.3, pause_s=0.01))
    monkeypatch.setattr(asks, "ASKING", Policy(ask_s=0.05, asks=20, total_s=0.3, pause_s=0.01))

    class _LateInfo(_ElectingJs):
        async def stream_info(self, stream):
            time.sleep(0.4)  # (blocks the loop: answered, but past the whole bound)
            return await super().stream_info(stream)

    _, before = _counts("direct.get")
    js = _LateInfo(refusals=10_000, allow_direct=True)
    with pytest.raises(BusError, match="no responders"):
        await asyncio.wait_for(reads.last_msg(js, "S", "s.a", direct=True), 5)
    assert js.infos == 1 and js.gets == 2
    assert _counts("direct.get")[1] == before + 1


async def test_a_deleted_or_purged_lease_key_is_skipped(nats_server) -> None:  # noqa: ANN001
    from busched.bus import Bus
    from busched.bus.lease import open_bucket, read_leases

    bus = await Bus.connect(nats_server.url)
    try:
        holder = bus.lease(shard="default", holder="a", duration=30.0, clock=time.monotonic)
        assert await holder.step()
        kv = await open_bucket(bus.js)
        await kv.put("gone", b"{}")
        await kv.delete("gone")
        await kv.put("purged", b"{}")
        await kv.purge("purged")
        got = await read_leases(bus.js)
        assert [x.shard for x in got] == ["default"]
    finally:
        await bus.close()
