"""`feeds.watch_state` asks again (`busched.bus.asks`) when the state consumer's creation goes unanswered (a NATS
cluster electing its JetStream leader drops the request: tests/faults/test_nats_cluster.py saw a read fail on it
after the client's whole 10 s), with a fresh delivery inbox each ask; a definite answer is not asked again.

The stand-in below is not the bus (the integration tests use a real nats-server and a real cluster): it is the
one thing a unit test can do that a cluster cannot do on cue, leave the first requests unanswered."""

from __future__ import annotations

import nats.errors
import nats.js.errors
import pytest

from busched.bus import asks, feeds
from busched.bus.asks import Policy


class _Js:
    """``subscribe`` times out ``silent`` times (or raises ``error``), then answers; records each ask's config."""

    def __init__(self, silent: int, error: Exception | None = None) -> None:
        self.silent, self.error, self.configs = silent, error, []

    async def stream_info(self, name: str) -> object:  # (the watch asks where the stream ends first)
        class _State:
            last_seq = 0
            messages = 0
        class _Info:
            state = _State()
        return _Info()

    async def subscribe(self, subject: str, **kw: object) -> object:
        cfg = kw["config"]
        self.configs.append(cfg)
        cfg.deliver_subject = f"_INBOX.{len(self.configs)}"  # as nats-py writes its inbox into the config
        if self.error is not None:
            raise self.error
        if len(self.configs) <= self.silent:
            raise nats.errors.TimeoutError
        return object()


@pytest.fixture(autouse=True)
def _short_asks(monkeypatch):
    monkeypatch.setattr(asks, "ASKING", Policy(ask_s=0.01, asks=3, total_s=1.0))


async def test_an_unanswered_creation_is_asked_again_with_a_fresh_config():
    js = _Js(silent=2)  # (the policy asks 3 times)
    w = await feeds.watch_state(js, lambda *a: None)
    assert w.subjects == [f"{feeds.S.STATE_PREFIX}.>"]
    assert len(js.configs) == 3
    assert len({id(c) for c in js.configs}) == len(js.configs), "each ask its own config (its own inbox)"
    assert all(c.deliver_subject == f"_INBOX.{i + 1}" for i, c in enumerate(js.configs))


async def test_the_last_timeout_is_raised_after_the_bound():
    js = _Js(silent=100)
    with pytest.raises(nats.errors.TimeoutError):
        await feeds.watch_state(js, lambda *a: None)
    assert len(js.configs) == asks.ASKING.asks


async def test_a_definite_answer_is_not_asked_again():
    js = _Js(silent=0, error=nats.js.errors.NotFoundError())
    with pytest.raises(nats.js.errors.NotFoundError):
        await feeds.watch_state(js, lambda *a: None)
    assert len(js.configs) == 1
