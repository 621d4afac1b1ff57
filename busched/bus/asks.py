"""One bounded policy for the JetStream API requests that are safe to ask again.

While a NATS cluster elects a JetStream leader (its meta leader, or the leader of a stream or consumer
whose server was lost: 1-7 s on the test machine) the servers drop API requests, answer "no responders"
or answer 503 ("JetStream system temporarily unavailable"); one request waited on for the client's whole
timeout (10 s) then stalled a scheduler's or an agent's operation for 10 s and failed it.  `ask` sends a
request again instead: each ask waited on for `Policy.ask_s` (2 s), a quick refusal ("no responders", 503)
followed by a pause that doubles from `Policy.pause_s` (0.25 s) up to `ask_s`, at most `Policy.asks` asks and
never longer than `Policy.total_s` in all, so the new leader answers the first ask sent after it is elected,
within 2 s of the election's end (a direct get whose replica was just not subscribed yet, within a quarter
second).  The bound, 12 s, covers the longest election
after a lost leader: a nats-server follower waits 4-9 s (its raft's election timeout) before it campaigns,
and the campaign takes up to a second more.  A definite answer (found, not found, refused, any other
error) ends the asking at once; after the bound the last error is raised as before.

Only requests whose repetition cannot change the outcome go through `ask`: reads (stream and consumer
info, direct and message gets, key-value gets, a bucket's lookup), creations that are idempotent by their
config (a stream, a durable or named consumer: the same config made again is the one already there).  A
purge goes through `ask` once (`reads.PURGE`: counted, never asked again).  A conditional write (a binding record's
``Nats-Expected-Last-Subject-Sequence``, a lease's KV create/update on a revision) is never sent again
here: its timeout is an unknown outcome, which its caller resolves by reading what the stream holds
(docs/bus.md, "Asking again while a NATS cluster elects").

Every ask left unanswered is counted in ``busched_jetstream_unanswered_total{request,reason}``, every
request given up after the bound in ``busched_jetstream_given_up_total{request}`` (`busched.metrics`), and
a request asked more than once is logged once, when it ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import nats.errors
import nats.js.errors

from busched.metrics import JETSTREAM_ASKS

__all__ = ["Policy", "ASKING", "ONCE", "ask", "given_up", "unanswered"]

log = logging.getLogger("busched.bus")

T = TypeVar("T")

# JetStream error codes that say "not now" rather than "no": the cluster cannot handle the request while it
# elects (10008 "JetStream system temporarily unavailable" is a 503 too; 10009 "JetStream cluster can not
# handle request" is answered with a 500 by a server that is not, or no longer, the meta leader)
NOT_READY_CODES = frozenset({10008, 10009})


@dataclass(frozen=True)
class Policy:
    """How a request is asked: each ask waited on ``ask_s`` seconds, a quick refusal followed by a pause of
    ``pause_s`` doubling up to ``ask_s`` (so the asks span an election instead of being spent in a burst),
    at most ``asks`` asks, at most ``total_s`` in all (the last ask gets what is left of it).  Unanswered
    asks end on the time bound (6 in 12 s), quick refusals on the count (8 in about 10 s)."""

    ask_s: float = 2.0
    asks: int = 8
    total_s: float = 12.0
    pause_s: float = 0.25

    def __post_init__(self) -> None:
        if self.ask_s <= 0 or self.asks < 1 or self.total_s < self.ask_s or self.pause_s < 0:
            raise ValueError(f"a policy needs ask_s > 0, asks >= 1, total_s >= ask_s: {self}")


ASKING = Policy()  # the default: asked again through a cluster's election
ONCE = Policy(asks=1, total_s=2.0)  # one short ask (clean-ups whose work the server does anyway), still counted


def unanswered(e: BaseException) -> str | None:
    """Why ``e`` leaves a request unanswered ("timeout", "no_responders", "unavailable", "not_ready"); None when
    it is a definite answer (which asking again would not change)."""
    if isinstance(e, (asyncio.TimeoutError, nats.errors.TimeoutError)):
        return "timeout"
    if isinstance(e, nats.errors.NoRespondersError):
        return "no_responders"
    if isinstance(e, nats.js.errors.ServiceUnavailableError):  # 503 (nats-py's name for "no responders" too)
        return "unavailable"
    if isinstance(e, nats.js.errors.APIError) and getattr(e, "err_code", None) in NOT_READY_CODES:
        return "not_ready"
    return None


async def ask(request: str, make: Callable[[], Awaitable[T]], policy: Policy | None = None, *,
              detail: str = "", last: bool = True) -> T:
    """``await make()``, made and asked again as ``policy`` (default: `ASKING`, read at the call) says while the
    request goes unanswered (`unanswered`).

    ``request`` names the kind of request (a metric label: a few fixed names, "stream.info", "direct.get", ...),
    ``detail`` what it was about (the log only).  ``make`` must build a fresh request each call (a new
    coroutine, and a fresh config where the client writes into it).  ``last=False``: the caller may ask on
    after this (`reads.last_msg`), so running out is neither counted as given up nor logged as such here;
    the caller does that if it gives up (`given_up`)."""
    policy = policy or ASKING
    loop = asyncio.get_running_loop()
    start = loop.time()
    deadline = start + policy.total_s
    reasons: list[str] = []
    n = 0
    pause = min(policy.pause_s, policy.ask_s)
    while True:
        n += 1
        asked = loop.time()
        final = n >= policy.asks or deadline - asked <= policy.ask_s
        wait = max(0.001, deadline - asked if final else policy.ask_s)
        try:
            async with asyncio.timeout(wait):  # (no task of its own, as asyncio.wait_for makes: ~30 us a request)
                result = await make()
        except Exception as e:  # (a cancellation from outside is a BaseException: not caught, not ours)
            reason = unanswered(e)
            if reason is None:
                if reasons:
                    log.info("%s %s: answered %s at ask %d after %.1fs (before: %s)", request, detail,
                             type(e).__name__, n, loop.time() - start, ", ".join(reasons))
                raise
            JETSTREAM_ASKS.unanswered(request, reason)
            reasons.append(reason)
            if final:
                if last:
                    given_up(request, detail, n, loop.time() - start, reasons)
                else:
                    log.info("%s %s: no answer after %d asks in %.1fs (%s)", request, detail, n,
                             loop.time() - start, ", ".join(reasons))
                if reason == "timeout" and not isinstance(e, nats.errors.Error):
                    raise nats.errors.TimeoutError from None  # what the client's own wait raised
                raise
            if loop.time() - asked < policy.ask_s:  # a quick refusal: a growing pause, across the whole election
                await asyncio.sleep(max(0.0, min(pause, deadline - loop.time())))
                pause = min(2 * pause, policy.ask_s)
            continue
        if reasons:
            log.info("%s %s: answered at ask %d after %.1fs (before: %s)", request, detail, n, loop.time() - start,
                     ", ".join(reasons))
        return result


def given_up(request: str, detail: str, asks: int, took: float, reasons: list[str]) -> None:
    """Count and log ``request`` given up after ``asks`` asks in ``took`` seconds (`ask`, or its caller when it
    asked with ``last=False``)."""
    JETSTREAM_ASKS.given_up(request)
    log.warning("%s %s: no answer after %d asks in %.1fs (%s); giving up", request, detail, asks, took,
                ", ".join(reasons))
