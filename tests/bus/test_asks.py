"""`busched.bus.asks`: a JetStream API request left unanswered (a timeout, no responders, a 503 or a "not ready"
JetStream error: a NATS cluster electing a leader) is asked again, within the policy's bounds (asks and total
time), each unanswered ask counted; a definite answer ends the asking at once; a write the bus's fence refuses
is not asked again.

The stand-ins below are not the bus (tests/faults/test_nats_cluster.py asks a real cluster during an election):
they are the one thing a unit test can do that a cluster cannot do on cue, leave the first requests unanswered."""

from __future__ import annotations

import asyncio

import nats.errors
import nats.js.errors
import pytest

from busched.bus import asks, lease, reads
from busched.bus.asks import Policy, ask, unanswered
from busched.metrics import JETSTREAM_ASKS, AgentMetrics, SchedulerMetrics, render


class _Request:
    """A request that ``fail`` asks in a row raise what ``errors`` gives (or, for None, are never answered),
    then is answered; records the loop time of each ask."""

    def __init__(self, errors: list[BaseException | None], answer: object = "answer") -> None:
        self.errors, self.answer, self.times = list(errors), answer, []

    async def __call__(self) -> object:
        self.times.append(asyncio.get_running_loop().time())
        if self.errors:
            e = self.errors.pop(0)
            if e is None:
                await asyncio.Event().wait()  # a dropped request: no answer, ever
            raise e
        return self.answer


def _counts(request: str) -> tuple[dict[str, int], int]:
    unanswered_counts, given_up = JETSTREAM_ASKS.snapshot()
    return ({reason: n for (r, reason), n in unanswered_counts.items() if r == request}, given_up.get(request, 0))


@pytest.mark.parametrize("error", [None, nats.errors.TimeoutError(), nats.errors.NoRespondersError(),
                                   nats.js.errors.ServiceUnavailableError(code=503, err_code=10008),
                                   nats.js.errors.ServerError(code=500, err_code=10009)])
async def test_an_unanswered_request_is_asked_again_until_answered(error):
    req = _Request([error, error])
    before, _ = _counts("test.again")
    got = await asyncio.wait_for(ask("test.again", req, Policy(ask_s=0.05, asks=5, total_s=1.0)), 5)
    assert got == "answer" and len(req.times) == 3
    after, _ = _counts("test.again")
    reason = unanswered(error or asyncio.TimeoutError())
    assert reason is not None
    assert after.get(reason, 0) - before.get(reason, 0) == 2, (before, after)


@pytest.mark.parametrize("error", [nats.js.errors.NotFoundError(code=404), nats.js.errors.BadRequestError(code=400),
                                   nats.js.errors.ServerError(code=500, err_code=10118), ValueError("bad")])
async def test_a_definite_answer_is_not_asked_again(error):
    req = _Request([error])
    with pytest.raises(type(error)):
        await ask("test.definite", req, Policy(ask_s=0.05, asks=5, total_s=1.0))
    assert len(req.times) == 1
    assert _counts("test.definite") == ({}, 0)


async def test_the_last_error_is_raised_after_the_asks_and_counted_as_given_up():
    req = _Request([nats.errors.NoRespondersError()] * 10)
    _, gave_up = _counts("test.bound")
    with pytest.raises(nats.errors.NoRespondersError):
        await ask("test.bound", req, Policy(ask_s=0.02, asks=3, total_s=1.0))
    assert len(req.times) == 3
    assert _counts("test.bound") == ({"no_responders": 3}, gave_up + 1)


async def test_the_total_time_is_bounded_whatever_the_asks():
    req = _Request([None] * 100)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with pytest.raises(nats.errors.TimeoutError):  # (as the client's own wait raised it)
        await asyncio.wait_for(ask("test.total", req, Policy(ask_s=0.05, asks=100, total_s=0.3)), 5)
    took = loop.time() - t0
    # ends at its 0.3 s, not after its 100 asks' 5 s (slack for a loaded machine, where fewer asks fit)
    assert 0.29 <= took < 1.5, took
    assert 2 <= len(req.times) <= 7, req.times  # an ask every 0.05 s at most, the last given the rest


async def test_quick_refusals_are_spaced_by_a_growing_pause():
    """A "no responders" comes back at once: the asks must still span the election, not be spent in a burst."""
    req = _Request([nats.errors.NoRespondersError()] * 4)
    assert await ask("test.spaced", req, Policy(ask_s=0.2, asks=8, total_s=2.0, pause_s=0.05)) == "answer"
    gaps = [b - a for a, b in zip(req.times, req.times[1:])]
    assert len(gaps) == 4, gaps
    for gap, pause in zip(gaps, (0.05, 0.1, 0.2, 0.2)):  # doubling, up to an ask's wait
        assert pause * 0.9 <= gap, gaps
    assert sum(gaps) < 0.55 + 1.0, gaps  # (0.55 s of pauses, with slack for a loaded machine)


async def test_a_timeout_is_asked_again_at_once():
    """An ask that waited its whole time is followed by the next at once (the wait was the pause)."""
    req = _Request([None, None])
    assert await ask("test.timeouts", req, Policy(ask_s=0.1, asks=5, total_s=2.0, pause_s=1.0)) == "answer"
    gaps = [b - a for a, b in zip(req.times, req.times[1:])]
    assert len(gaps) == 2 and all(0.09 <= g < 0.8 for g in gaps), gaps  # no pause of 1 s on top


async def test_a_cancellation_from_outside_is_not_asked_again():
    req = _Request([None] * 10)
    task = asyncio.ensure_future(ask("test.cancel", req, Policy(ask_s=10, asks=5, total_s=50)))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(req.times) == 1 and _counts("test.cancel") == ({}, 0)


def test_a_policy_is_bounded():
    for bad in (dict(ask_s=0), dict(asks=0), dict(ask_s=3, total_s=2), dict(pause_s=-1)):
        with pytest.raises(ValueError):
            Policy(**bad)


async def test_the_counts_are_exported_by_the_scheduler_and_the_agent():
    req = _Request([nats.errors.TimeoutError()] * 5)
    with pytest.raises(nats.errors.TimeoutError):
        await ask("test.export", req, Policy(ask_s=0.01, asks=2, total_s=1.0))
    for registry in (SchedulerMetrics().registry, AgentMetrics().registry):
        text = render(registry).decode()
        assert 'busched_jetstream_unanswered_total{reason="timeout",request="test.export"} 2.0' in text
        assert 'busched_jetstream_given_up_total{request="test.export"} 1.0' in text


# -- call sites --------------------------------------------------------------------------------------------------
@pytest.fixture
def short_asks(monkeypatch):
    monkeypatch.setattr(asks, "ASKING", Policy(ask_s=0.05, asks=4, total_s=0.3))


class _Entry:
    def __init__(self, value: bytes, revision: int) -> None:
        self.value, self.revision = value, revision


class _Kv:
    """A lease bucket whose ``get`` goes unanswered ``silent`` times."""

    def __init__(self, silent: int, value: bytes) -> None:
        self.silent, self.value, self.gets = silent, value, 0

    async def get(self, key: str) -> _Entry:
        self.gets += 1
        if self.gets <= self.silent:
            await asyncio.Event().wait()
        return _Entry(self.value, 7)


async def test_a_standbys_look_at_the_lease_is_asked_again(short_asks):
    rec = lease.LeaseRecord(holder="other", epoch=3, duration=2.0)
    kv = _Kv(2, lease._ENCODE(rec))
    ls = lease.Lease(object(), shard="default", holder="me", duration=2.0)
    ls.kv = kv
    state = await asyncio.wait_for(ls.read(), 5)
    assert state is not None and state.record.holder == "other" and state.revision == 7
    assert kv.gets == 3


class _PurgeJs:
    def __init__(self) -> None:
        self.purges = 0

    async def purge_stream(self, stream: str, **kw: object) -> bool:
        self.purges += 1
        await asyncio.Event().wait()  # never answered
        return True


@pytest.fixture
def short_purge(monkeypatch):
    monkeypatch.setattr(reads, "PURGE", Policy(ask_s=0.05, asks=1, total_s=0.05))


async def test_a_purge_is_asked_once(short_asks, short_purge):
    """A purge is not asked again: a burst of them (a few thousand deleted tasks) asked again every 2 s would
    queue the copies behind the first round on the server and never see an answer; and a purge of a whole
    subject made twice could erase a message written between the two."""
    js = _PurgeJs()
    assert await asyncio.wait_for(reads.purge_state(js, "busched.state.task.a"), 5) is False
    assert js.purges == 1


class _RefusingPurgeJs(_PurgeJs):
    async def purge_stream(self, stream: str, **kw: object) -> bool:
        self.purges += 1
        raise nats.js.errors.ServiceUnavailableError(code=503)


async def test_a_refused_purge_fails_at_once(short_asks):
    """Within a cycle a purge refused while a cluster elects fails at once (stream hygiene, done later
    with the next delete), not after a policy's pauses."""
    js = _RefusingPurgeJs()
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    assert await asyncio.wait_for(reads.purge_state(js, "busched.state.task.a"), 5) is False
    assert js.purges == 1 and loop.time() - t0 < 0.2


async def test_a_fenced_purge_is_not_sent(short_asks):
    js = _PurgeJs()
    assert await asyncio.wait_for(reads.purge_state(js, "busched.state.task.a", may_write=lambda: False), 5) is False
    assert js.purges == 0


async def test_a_stream_without_direct_gets_is_told_soon(nats_server):
    """A stream made without direct gets answers a direct get "no responders" for ever: the read gives up after
    `reads.DIRECT_GET`'s few asks (~1.75 s), not the whole 12 s (an agent registering its nodes reads them so)."""
    from nats.js import api

    from busched.bus import Bus, BusError
    from busched.bus import subjects as S

    bus = await Bus.connect(nats_server.url)
    try:
        await bus.js.add_stream(api.StreamConfig(name=S.STATE_STREAM, subjects=[f"{S.STATE_PREFIX}.>"]))
        subject = S.state_subject("node", "n1")
        assert (await bus.publish(subject, b"{}")).ok
        assert await bus.last_state(subject) is not None  # (a message get is answered)
        _, gave_up = _counts("direct.get")
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(BusError, match="no responders"):
            await bus.last_state(subject, direct=True)
        assert loop.time() - t0 < 4.0
        assert _counts("direct.get")[1] == gave_up + 1
    finally:
        await bus.close()


async def test_a_stream_info_answered_not_ready_by_a_former_meta_leader_is_asked_again(short_asks):
    """A 500 carrying JetStream's 10009 ("cluster can not handle request") from the raw stream-info request the
    checkpoint's facts use is a "not now", as everywhere else."""
    import json

    from busched.bus import checkpoints

    class _Reply:
        def __init__(self, data: bytes) -> None:
            self.data = data

    class _Nc:
        asked = 0

        async def request(self, subject: str, payload: bytes, timeout: float) -> _Reply:
            self.asked += 1
            if self.asked == 1:
                err = {"code": 500, "err_code": 10009, "description": "JetStream cluster can not handle request"}
                return _Reply(json.dumps({"error": err}).encode())
            state = {"messages": 1, "first_seq": 1, "last_seq": 1}
            return _Reply(json.dumps({"created": "c", "state": state}).encode())

    nc = _Nc()
    facts = await asyncio.wait_for(checkpoints.stream_facts(nc), 5)
    assert nc.asked == 2 and facts.last_seq == 1


class _ElectingJs:
    """A state stream's direct gets answered "no responders" ``refusals`` times (its replicas unsubscribed while
    the cluster elects), then answered; its config says whether it allows direct gets."""

    def __init__(self, refusals: int, allow_direct: bool) -> None:
        self.refusals, self.allow_direct, self.gets, self.infos = refusals, allow_direct, 0, 0

    async def get_last_msg(self, stream, subject, direct=False):
        self.gets += 1
        if self.gets <= self.refusals:
            raise nats.errors.NoRespondersError
        return type("Msg", (), {"seq": 7, "data": b"{}"})()

    async def stream_info(self, stream):
        self.infos += 1
        return type("Info", (), {"config": type("Config", (), {"allow_direct": self.allow_direct})()})()


@pytest.fixture
def short_direct(monkeypatch):
    monkeypatch.setattr(reads, "DIRECT_GET", Policy(ask_s=0.05, asks=4, total_s=1.0, pause_s=0.01))
    monkeypatch.setattr(asks, "ASKING", Policy(ask_s=0.05, asks=20, total_s=2.0, pause_s=0.01))


async def test_a_direct_get_refused_past_its_few_asks_by_a_stream_that_allows_them_is_asked_on(short_direct):
    """"No responders" past `reads.DIRECT_GET`'s asks, from a stream whose config allows direct gets, is a cluster
    electing (CI saw 4 refusals in 1.8 s, then the answer ~6 s later): the read asks on within `asks.ASKING`'s
    bound and is answered, where it had failed."""
    js = _ElectingJs(refusals=7, allow_direct=True)
    assert await asyncio.wait_for(reads.last_msg(js, "S", "s.a", direct=True), 5) == (7, b"{}")
    assert js.gets == 8 and js.infos == 1


async def test_a_direct_get_refused_by_a_stream_without_them_fails_after_its_few_asks(short_direct):
    from busched.bus import BusError

    js = _ElectingJs(refusals=100, allow_direct=False)
    with pytest.raises(BusError, match="no responders"):
        await asyncio.wait_for(reads.last_msg(js, "S", "s.a", direct=True), 5)
    assert js.gets == 4 and js.infos == 1


async def test_a_direct_get_asked_on_stays_within_the_asking_bound(short_direct):
    js = _ElectingJs(refusals=10_000, allow_direct=True)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    from busched.bus import BusError

    with pytest.raises(BusError, match="no responders"):
        await asyncio.wait_for(reads.last_msg(js, "S", "s.a", direct=True), 5)
    assert loop.time() - t0 < 2.0 + 0.5 and js.infos == 1


class _SlowInfoJs(_ElectingJs):
    """Direct gets refused for ever; the stream's info never answered (the meta leader is being elected too),
    or answered with an error."""

    def __init__(self, info_error: BaseException | None = None) -> None:
        super().__init__(refusals=10_000, allow_direct=True)
        self.info_error = info_error

    async def stream_info(self, stream):
        self.infos += 1
        if self.info_error is not None:
            raise self.info_error
        await asyncio.Event().wait()


async def test_a_direct_get_whose_stream_info_goes_unanswered_ends_within_the_asking_bound(short_direct, monkeypatch):
    """The config read shares the read's bound: it gets only what the direct gets left of `asks.ASKING`'s 2 s
    here (it had a whole bound of its own, and the retry a floor of one more ask: 13.8 s of a 12 s bound).
    The direct gets' pauses (0.2 s doubling up to 0.5: ~1.1 s) are long enough here for the difference to show."""
    from busched.bus import BusError

    monkeypatch.setattr(reads, "DIRECT_GET", Policy(ask_s=0.5, asks=4, total_s=3.0, pause_s=0.2))

    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with pytest.raises(BusError, match="no responders"):
        await asyncio.wait_for(reads.last_msg(_SlowInfoJs(), "S", "s.a", direct=True), 10)
    took = loop.time() - t0
    assert took < asks.ASKING.total_s + 0.2, took


async def test_a_stream_info_that_fails_leaves_the_refusal_standing(short_direct):
    from busched.bus import BusError

    js = _SlowInfoJs(nats.js.errors.ServerError(code=500, err_code=10118))
    with pytest.raises(BusError, match="no responders"):
        await asyncio.wait_for(reads.last_msg(js, "S", "s.a", direct=True), 5)
    assert js.gets == 4 and js.infos == 1


async def test_a_direct_get_is_counted_given_up_only_when_the_read_fails(short_direct):
    _, before = _counts("direct.get")
    js = _ElectingJs(refusals=7, allow_direct=True)
    assert await asyncio.wait_for(reads.last_msg(js, "S", "s.a", direct=True), 5) == (7, b"{}")
    assert _counts("direct.get")[1] == before  # answered: not given up
    from busched.bus import BusError

    with pytest.raises(BusError):
        await asyncio.wait_for(reads.last_msg(_ElectingJs(10_000, False), "S", "s.a", direct=True), 5)
    assert _counts("direct.get")[1] == before + 1  # failed: given up once


async def test_only_a_refused_direct_get_asks_the_streams_config(short_direct, monkeypatch):
    """A message get refused, or a direct get never answered (a timeout, not a refusal), is not a question about
    the stream's direct gets: no config read, no second round."""
    from busched.bus import BusError

    js = _ElectingJs(refusals=10_000, allow_direct=True)
    with pytest.raises(BusError):
        await asyncio.wait_for(reads.last_msg(js, "S", "s.a"), 5)
    assert js.infos == 0

    class _Silent(_ElectingJs):
        async def get_last_msg(self, stream, subject, direct=False):
            self.gets += 1
            await asyncio.Event().wait()

    silent = _Silent(refusals=0, allow_direct=True)
    with pytest.raises(BusError):
        await asyncio.wait_for(reads.last_msg(silent, "S", "s.a", direct=True), 5)
    assert silent.infos == 0 and silent.gets == 4
