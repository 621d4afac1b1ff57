"""`Bus.last_per_subject` on a real nats-server, when the subjects it was told of are purged before its consumer
is made (a scheduler purging a deleted object's subjects while `busched queue delete` reads the jobs): the read
ends at once with what there is, instead of waiting its whole timeout for messages that will never come."""

from __future__ import annotations

import asyncio
from typing import Any

from busched.bus import Bus
from busched.bus import subjects as S


async def test_subjects_purged_before_the_consumer_is_made_end_the_read_at_once(nats_server) -> None:
    bus = await Bus.connect(nats_server.url)
    try:
        await bus.ensure_streams()
        subject = S.state_subject("job", "t/a")
        await bus.publish_all([(subject, b'{"kind":"job.delete"}', None)])
        js: Any = bus.js
        add = js.add_consumer

        async def purged_first(*a: Any, **kw: Any) -> Any:
            await js.purge_stream(S.STATE_STREAM, subject=subject)  # the race, made to happen
            return await add(*a, **kw)

        js.add_consumer = purged_first
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        assert await bus.last_per_subject(f"{S.STATE_PREFIX}.job.>", timeout=5.0) == []
        assert loop.time() - t0 < 2.0
    finally:
        await bus.close()


async def test_the_last_of_each_subject_is_read(nats_server) -> None:
    bus = await Bus.connect(nats_server.url)
    try:
        await bus.ensure_streams()
        a, b = S.state_subject("job", "t/a"), S.state_subject("job", "t/b")
        await bus.publish_all([(a, b"1", None), (b, b"2", None), (a, b"3", None)])
        got = await bus.last_per_subject(f"{S.STATE_PREFIX}.job.>", timeout=5.0)
        assert sorted((s, d) for s, _, d in got) == [(a, b"3"), (b, b"2")]
    finally:
        await bus.close()


async def test_a_read_whose_last_message_never_comes_ends_once_the_consumer_has_nothing_pending(nats_server) -> None:
    """The message saying "nothing pending" never arrives (here dropped on cue; a purge during the delivery leaves
    the same): the consumer's own count says so, a second later, and the read ends instead of timing out."""
    bus = await Bus.connect(nats_server.url)
    try:
        await bus.ensure_streams()
        subject = S.state_subject("job", "t/a")
        await bus.publish_all([(subject, b'{"kind":"job.delete"}', None)])
        nc: Any = bus.nc
        subscribe = nc.subscribe

        async def deaf(inbox: str, cb: Any = None, **kw: Any) -> Any:  # the delivery lost to the purge
            async def drop(m: Any) -> None:
                return None
            return await subscribe(inbox, cb=drop, **kw)

        nc.subscribe = deaf
        js: Any = bus.js
        add = js.add_consumer

        async def purged_after(*a: Any, **kw: Any) -> Any:
            made = await add(*a, **kw)
            await js.purge_stream(S.STATE_STREAM, subject=subject)
            return made

        js.add_consumer = purged_after
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        assert await bus.last_per_subject(f"{S.STATE_PREFIX}.job.>", timeout=8.0) == []
        assert loop.time() - t0 < 4.0
    finally:
        nc.subscribe = subscribe
        await bus.close()
