"""The checkpoint object's read (busched.bus.checkpoints.get_object): its chunks fetched in batches from a pull
consumer give the very bytes the object store's own reader gives, over several batches and for an empty
object; chunks that do not match the stored digest are refused as the store's reader refuses them (it has
the last word); no consumer is left behind.  Over a real nats-server."""

from __future__ import annotations

import os

import nats.js.errors
import pytest

from busched.bus import checkpoints as K
from busched.bus.client import Bus
from busched.bus.server import NatsServer


@pytest.mark.parametrize("size", [0, 1, 128 * 1024, 128 * 1024 * 5 + 17])
async def test_the_batched_read_gives_what_the_store_reader_gives(nats_server: NatsServer, monkeypatch, size):
    monkeypatch.setattr(K, "FETCH_BATCH", 2)  # (several fetches for the larger ones)
    bus = await Bus.connect(nats_server.url)
    try:
        data = os.urandom(size)
        await K.put_object(bus.js, "state", data)
        store = await bus.js.object_store(K.BUCKET)
        info = await store.get_info("state")
        assert await K._fetch_chunks(bus.js, K.BUCKET, info) == data
        assert await K.get_object(bus.js, "state") == data
        assert await bus.js.consumers_info(f"OBJ_{K.BUCKET}") == []  # (each read's consumer deleted)
        assert bytes((await store.get("state")).data or b"") == data
        assert await K.get_object(bus.js, "other") is None
    finally:
        await bus.close()


async def test_chunks_that_do_not_match_the_digest_are_refused(nats_server: NatsServer, caplog):
    bus = await Bus.connect(nats_server.url)
    try:
        await K.put_object(bus.js, "state", b"a" * 300_000)
        store = await bus.js.object_store(K.BUCKET)
        info = await store.get_info("state")
        # a chunk written over by someone with bus access: one more chunk on the object's subject
        await bus.js.publish(f"$O.{K.BUCKET}.C.{info.nuid}", b"forged")
        with pytest.raises(nats.js.errors.DigestMismatchError):
            await K._fetch_chunks(bus.js, K.BUCKET, info)
        caplog.set_level("INFO", logger="busched.bus")
        with pytest.raises(nats.js.errors.Error):  # the store's reader refuses it too
            await K.get_object(bus.js, "state")
        assert "batched read failed" in caplog.text
    finally:
        await bus.close()
