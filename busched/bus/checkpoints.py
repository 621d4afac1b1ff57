"""What a state checkpoint needs of the bus: the state stream's identity and extent, a compacting read of
it, and one object in a JetStream object store (`busched.scheduler.checkpoint` says what is in it).

An object store splits an object into chunks of 128 KiB, each one stream message, so a checkpoint of any
size is stored whatever the server's max payload (1 MiB by default); its size is bounded by the writer.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import logging
from dataclasses import dataclass
from functools import partial
from hashlib import sha256
from typing import Any

import nats.js.errors
from nats.js import api
from nats.js.object_store import OBJ_CHUNKS_PRE_TEMPLATE, OBJ_DIGEST_TYPE, OBJ_STREAM_TEMPLATE

from busched.bus import subjects as S
from busched.bus.asks import NOT_READY_CODES, ONCE, Policy, ask
from busched.bus.errors import BusError, unsubscribe_quietly
from busched.bus.feeds import JS_API, stream_position
from busched.bus.streams import storage_type

__all__ = ["BUCKET", "StreamFacts", "stream_facts", "stream_subjects", "read_since", "put_object", "get_object"]

log = logging.getLogger("busched.bus")

BUCKET = "busched_checkpoints"  # the object store of the scheduler's checkpoints
# a page of a stream's subjects is up to 100,000 of them in one answer: each ask waited on longer
SUBJECTS_POLICY = Policy(ask_s=3.0, asks=4, total_s=12.0)


@dataclass(frozen=True)
class StreamFacts:
    """What says whether a checkpoint still fits the stream: when the stream was made (a stream deleted and
    made again is another stream), its first and last sequences, and how many subjects it holds."""

    created: str
    first_seq: int
    last_seq: int
    messages: int
    subjects: int


async def stream_facts(nc: Any, stream: str = S.STATE_STREAM, timeout: float = 10.0) -> StreamFacts:
    """The stream's `StreamFacts`, from one stream-info request (its raw answer: nats-py's StreamState has no
    ``num_subjects``)."""
    info = await ask("stream.info", lambda: _stream_info(nc, stream, b"", timeout), detail=stream)
    st = info.get("state", {})
    messages = int(st.get("messages", 0))
    return StreamFacts(created=str(info.get("created", "")), first_seq=int(st.get("first_seq", 0)),
                       last_seq=int(st.get("last_seq", 0)) if messages else 0, messages=messages,
                       subjects=int(st.get("num_subjects", 0)))


async def stream_subjects(nc: Any, stream: str = S.STATE_STREAM, timeout: float = 10.0) -> set[str]:
    """Every subject the stream holds a message on (stream info pages them, up to 100,000 an answer)."""
    out: set[str] = set()
    while True:
        req = json.dumps({"subjects_filter": ">", "offset": len(out)}).encode()
        info = await ask("stream.info", partial(_stream_info, nc, stream, req, timeout), SUBJECTS_POLICY,
                         detail=stream)
        page = (info.get("state") or {}).get("subjects") or {}
        before = len(out)
        out.update(page)
        if len(out) == before or len(out) >= int(info.get("total", 0)):
            return out


async def _stream_info(nc: Any, stream: str, req: bytes, timeout: float) -> dict[str, Any]:
    """One stream-info request's raw answer; a "not now" error (503) raised as nats-py raises it, so `ask`
    asks again, any other error as `BusError`."""
    resp = await nc.request(f"{JS_API}.STREAM.INFO.{stream}", req, timeout=timeout)
    info: dict[str, Any] = json.loads(resp.data)
    err = info.get("error")
    if err:
        if err.get("code") == 503:
            raise nats.js.errors.ServiceUnavailableError(**err)
        if err.get("err_code") in NOT_READY_CODES:  # (a 500 from a server no longer the meta leader)
            raise nats.js.errors.APIError(**err)
        raise BusError(f"stream {stream}: {err.get('description', err)}")
    return info


async def read_since(js: Any, start: int, *, timeout: float = 300.0) -> list[tuple[str, int, bytes]]:
    """``(subject, sequence, data)`` of the state stream, in stream order, until nothing is pending: with
    ``start`` 0 the last message of every subject (a consistent cut, and what came after it while reading),
    else every message from sequence ``start`` on.  The caller keeps the last per subject."""
    out: list[tuple[str, int, bytes]] = []
    done = asyncio.Event()

    async def cb(m: Any) -> None:
        seq, pending = stream_position(m)
        if seq < 0:
            return  # not a stream message
        out.append((m.subject, seq, m.data))
        if pending == 0:
            done.set()

    def subscribe() -> Any:  # a fresh config each ask: nats-py writes its delivery inbox into it
        if start:
            cfg = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start)
        else:
            cfg = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT)
        return js.subscribe(f"{S.STATE_PREFIX}.>", stream=S.STATE_STREAM, cb=cb, ordered_consumer=True,
                            config=cfg, pending_msgs_limit=10_000_000, pending_bytes_limit=4 * 1024 ** 3)

    sub = await ask("consumer.create", subscribe, detail=S.STATE_STREAM)
    try:
        if not out:
            # nothing to deliver (the messages after ``start`` purged, say): no message will say "none pending"
            info = await ask("consumer.info", sub.consumer_info, detail=S.STATE_STREAM)
            delivered = int(info.delivered.stream_seq or 0) if info.delivered else 0
            if not info.num_pending and delivered < max(start, 1):  # none pending, none sent
                return out
        await asyncio.wait_for(done.wait(), timeout)
    finally:
        await unsubscribe_quietly(sub)
    return out


async def _store(js: Any, bucket: str, *, create: bool, storage: str = "file", replicas: int = 1) -> Any:
    try:  # (a bucket's lookup is a stream info, its creation a stream's, idempotent by config)
        return await ask("object.bucket", lambda: js.object_store(bucket), detail=bucket)
    except (nats.js.errors.NotFoundError, nats.js.errors.BucketNotFoundError):
        if not create:
            return None
    st = storage_type(storage)
    cfg = api.ObjectStoreConfig(bucket=bucket, storage=st, replicas=replicas,
                                description="busched scheduler checkpoints")
    return await ask("object.create", lambda: js.create_object_store(bucket, config=cfg), detail=bucket)


async def put_object(js: Any, name: str, data: bytes, *, bucket: str = BUCKET, storage: str = "file",
                     replicas: int = 1) -> None:
    """Store ``data`` as object ``name`` (the bucket made if missing), replacing the one there."""
    store = await _store(js, bucket, create=True, storage=storage, replicas=replicas)
    await store.put(name, data)


async def get_object(js: Any, name: str, *, bucket: str = BUCKET) -> bytes | None:
    """Object ``name``'s bytes, or None when neither it nor its bucket exists.  Its chunks are fetched in
    batches from a pull consumer (`_fetch_chunks`); the object store's own reader, an ordered push consumer,
    took ~12 ms a chunk (250 ms for a restart's 20) where this takes ~15 ms for all.  Anything it cannot read
    (a link, an error) is read by the store's own reader."""
    store = await _store(js, bucket, create=False)
    if store is None:
        return None
    try:
        info = await ask("object.info", lambda: store.get_info(name), detail=name)
    except (nats.js.errors.ObjectNotFoundError, nats.js.errors.ObjectDeletedError):
        return None
    if info.nuid and not info.is_link() and info.size is not None and info.digest:
        try:
            return await _fetch_chunks(js, bucket, info)
        except Exception as e:  # noqa: BLE001 - the store's reader has the last word
            log.info("checkpoint %s: batched read failed (%s: %s); reading it chunk by chunk", name,
                     type(e).__name__, e)
    try:
        res = await store.get(name)
    except nats.js.errors.ObjectNotFoundError:
        return None
    except nats.js.errors.ObjectDeletedError:
        return None
    return bytes(res.data or b"")


FETCH_BATCH = 64  # chunks a fetch asks for (128 KiB each: 8 MiB an answer)


async def _fetch_chunks(js: Any, bucket: str, info: Any, *, timeout: float = 10.0) -> bytes:
    """The chunks of the object ``info`` describes, from a pull consumer on its chunk subject, checked as the
    store's reader checks them (the SHA-256 digest of the meta) and against the meta's size."""
    stream = OBJ_STREAM_TEMPLATE.format(bucket=bucket)
    subject = OBJ_CHUNKS_PRE_TEMPLATE.format(bucket=bucket, obj=info.nuid)
    size = int(info.size)
    parts: list[bytes] = []
    got = 0
    h = sha256()
    if size:
        cfg = api.ConsumerConfig(ack_policy=api.AckPolicy.NONE, deliver_policy=api.DeliverPolicy.ALL,
                                 inactive_threshold=30.0, mem_storage=True)
        sub = await ask("consumer.create", lambda: js.pull_subscribe(subject, stream=stream, config=copy.copy(cfg)),
                        detail=stream)
        try:
            while True:
                msgs = await sub.fetch(batch=FETCH_BATCH, timeout=timeout)
                for msg in msgs:
                    parts.append(msg.data)
                    h.update(msg.data)
                    got += len(msg.data)
                if not msgs or msgs[-1].metadata.num_pending == 0 or got > size:
                    break
        finally:
            await _drop_consumer(js, stream, sub)
    want = base64.urlsafe_b64decode(info.digest[len(OBJ_DIGEST_TYPE):])
    if got != size or h.digest() != want:
        raise nats.js.errors.DigestMismatchError()
    return b"".join(parts)


async def _drop_consumer(js: Any, stream: str, sub: Any) -> None:
    """Delete a pull subscription's ephemeral consumer (its inactivity threshold would, later)."""
    try:
        name = (await ask("consumer.info", sub.consumer_info, ONCE, detail=stream)).name
        await sub.unsubscribe()
        await ask("consumer.delete", lambda: js.delete_consumer(stream, name), ONCE, detail=name)
    except Exception:  # noqa: BLE001 - the server drops it once inactive
        pass
