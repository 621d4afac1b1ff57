"""`streams.stream_info_soon`: a request a NATS cluster drops while it elects a leader is sent again soon,
not waited on for the client's whole timeout; a definite answer ends the asking at once.

The stand-in below is not the bus (the integration tests use a real nats-server and a real cluster): it
is the one thing a unit test can do that a cluster cannot do on cue, leave the first requests unanswered."""

from __future__ import annotations

import asyncio

import nats.js.errors
import pytest

from busched.bus.asks import Policy
from busched.bus.streams import stream_info_soon


class _Js:
    """Answers ``stream_info`` after ``silent`` requests that never get an answer (or raise ``error``)."""

    def __init__(self, silent: int, error: Exception | None = None) -> None:
        self.silent, self.error, self.asked = silent, error, 0

    async def stream_info(self, name: str) -> str:
        self.asked += 1
        if self.error is not None:
            raise self.error
        if self.asked <= self.silent:
            await asyncio.Event().wait()  # a dropped request: no answer, ever
        return f"info of {name}"


async def test_dropped_requests_are_sent_again_until_one_is_answered():
    js = _Js(silent=2)
    # bounded: code that waited on the first request would never end
    assert await asyncio.wait_for(stream_info_soon(js, "S", Policy(ask_s=0.05, asks=5, total_s=1.0)), 5) == "info of S"
    assert js.asked == 3


async def test_the_last_timeout_is_raised_after_the_bound():
    js = _Js(silent=100)
    with pytest.raises(asyncio.TimeoutError):
        await stream_info_soon(js, "S", Policy(ask_s=0.02, asks=3, total_s=0.1))
    assert js.asked == 3


async def test_a_definite_answer_is_not_asked_again():
    js = _Js(silent=0, error=nats.js.errors.NotFoundError())
    with pytest.raises(nats.js.errors.NotFoundError):
        await stream_info_soon(js, "S", Policy(ask_s=0.05, asks=5, total_s=1.0))
    assert js.asked == 1
