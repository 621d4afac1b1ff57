"""A scheduler's lease: leader election on a JetStream key-value bucket.

One key per shard (``default`` unless sharded) in the bucket ``busched_leases``; its value is a
`LeaseRecord`: who holds the lease (the scheduler's boot), its epoch, when it was last renewed (wall
clock, informational) and for how long a renewal holds.  Every change is a conditional write on the
key's last revision (KV create / update, i.e. ``Nats-Expected-Last-Subject-Sequence``), so of two
schedulers claiming at once exactly one wins; the loser sees a wrong-last-sequence error.

Expiry is judged by the reader, on its own monotonic clock, as Kubernetes' leader election does with
its observed time: a standby that has seen the same revision of the key for a whole ``duration`` may
claim it (a conditional update on that revision).  The holder counts its lease from the moment it
*sent* its last successful renewal, so its view always ends before any standby's can: no clock is
compared between hosts, and a holder paused (SIGSTOP) past its lease finds, on waking, that its
lease may have lapsed before it writes anything (`Lease.valid`).

The epoch grows with every new holder: a claim writes ``max(old epoch, old revision) + 1`` (so an
epoch is never above the revision that carries it, and a key created afresh starts above every
revision the bucket has had).  A renewal keeps the epoch.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any

import msgspec
import nats.js.errors

from busched.bus.asks import ask
from busched.bus.streams import storage_type

__all__ = ["BUCKET", "LeaseRecord", "LeaseState", "Lease", "read_leases", "valid_key"]

log = logging.getLogger("busched.bus")

BUCKET = "busched_leases"
_KEY = r"^[A-Za-z0-9_-]{1,64}$"


class LeaseRecord(msgspec.Struct, rename="camel", omit_defaults=True, forbid_unknown_fields=False):
    """The value of a shard's lease key (untrusted input: bounded, validated on decode)."""

    holder: Annotated[str, msgspec.Meta(max_length=128)]
    epoch: Annotated[int, msgspec.Meta(ge=0)]
    duration: Annotated[float, msgspec.Meta(gt=0, le=3600)]
    renewed_at: float = 0.0  # wall-clock seconds of the renewal (for people; nothing is decided on it)
    shard: Annotated[str, msgspec.Meta(max_length=64)] = "default"


_DECODE = msgspec.json.Decoder(LeaseRecord).decode
_ENCODE = msgspec.json.Encoder().encode


@dataclass
class LeaseState:
    """A lease key as read: its record and its revision."""

    shard: str
    record: LeaseRecord
    revision: int


def decode(data: bytes) -> LeaseRecord | None:
    try:
        return _DECODE(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


async def open_bucket(js: Any, *, replicas: int = 1, storage: str = "file") -> Any:
    """The leases bucket, created unless it exists (one revision per key kept).  Each request is asked again
    while a NATS cluster elects (`busched.bus.asks`): a bucket's lookup is a stream info, its creation a
    stream's, idempotent by config."""
    try:
        return await ask("kv.bucket", lambda: js.key_value(BUCKET), detail=BUCKET)
    except (nats.js.errors.BucketNotFoundError, nats.js.errors.NotFoundError):
        pass
    st = storage_type(storage)
    try:
        return await ask("kv.create", lambda: js.create_key_value(
            bucket=BUCKET, history=1, replicas=replicas, storage=st, direct=True,
            description="busched scheduler leases, one key per shard"), detail=BUCKET)
    except nats.js.errors.BadRequestError:
        # created by another scheduler between our two calls
        return await ask("kv.bucket", lambda: js.key_value(BUCKET), detail=BUCKET)


def valid_key(shard: str) -> bool:
    """Whether ``shard`` can name a lease (its key in the bucket: 1-64 letters, digits, '-' or '_')."""
    return re.fullmatch(_KEY, shard) is not None


async def read_leases(js: Any) -> list[LeaseState]:
    """Every shard's lease (empty when the bucket does not exist).

    The keys are the subjects the bucket's stream holds (its info, filtered on the keys' subjects), not
    nats-py's ``KeyValue.keys``: that watches the bucket with an ordered consumer and ends when the server says
    nothing is pending, which it says as soon as it has sent a key, so a key still on its way to a loaded client
    was missed, and `busched get scheduler` said no scheduler held a lease while one did."""
    try:
        kv = await ask("kv.bucket", lambda: js.key_value(BUCKET), detail=BUCKET)
    except (nats.js.errors.BucketNotFoundError, nats.js.errors.NotFoundError):
        return []
    prefix = f"$KV.{BUCKET}."
    try:
        info = await ask("stream.info", lambda: js.stream_info(f"KV_{BUCKET}", subjects_filter=f"{prefix}>"),
                         detail=BUCKET)
    except nats.js.errors.NotFoundError:  # (the bucket deleted since it was looked up)
        return []
    keys = [subject[len(prefix):] for subject in (info.state.subjects or {}) if subject.startswith(prefix)]
    out = []
    for key in sorted(keys):
        try:
            e = await ask("kv.get", partial(kv.get, key), detail=key)
        except nats.js.errors.NotFoundError:  # (a key deleted or purged since: KeyDeletedError, KeyNotFoundError)
            continue
        rec = decode(e.value or b"")
        if rec is not None:
            out.append(LeaseState(key, rec, int(e.revision or 0)))
    return out


class Lease:
    """One shard's lease as one contender sees it.  Call `step` every ``duration / 3`` seconds: it claims
    the lease when it may, renews it while held, and says whether it is held.

    ``holder`` names this contender (the scheduler's boot); ``clock`` is monotonic.  `valid` is what a
    holder checks before every write.
    """

    def __init__(self, js: Any, *, shard: str, holder: str, duration: float, margin: float | None = None,
                 clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time,
                 replicas: int = 1, storage: str = "file") -> None:
        if not valid_key(shard):
            raise ValueError(f"a shard name is 1-64 letters, digits, '-' or '_': {shard!r}")
        self.js = js
        self.shard = shard
        self.holder = holder
        self.duration = duration
        # the holder stops this long before its lease ends by its own count: room for the renewal's delivery
        # and for clocks that tick at slightly different rates
        self.margin = margin if margin is not None else min(0.5, duration / 4)
        self.clock = clock
        self.wall_clock = wall_clock
        self.replicas = replicas
        self.storage = storage
        self.kv: Any = None
        self.epoch = 0  # ours while held; the last seen otherwise
        self.revision = 0  # the key's revision as last written or seen by us
        self.held_since_send = -1.0  # monotonic time our last successful write was sent (-1: not held)
        self.current: LeaseState | None = None  # the key as last read or written
        self._seen_revision = -1
        self._seen_at = 0.0
        # a renewal may run in another thread (`busched.bus.lease_keeper`): stepping down and a renewal's
        # success are ordered by this lock, and a renewal sent before a step-down never makes us hold again
        self._lock = threading.Lock()
        self._generation = 0  # moves at every step-down

    async def open(self) -> None:
        self.kv = await open_bucket(self.js, replicas=self.replicas, storage=self.storage)

    @property
    def held(self) -> bool:
        return self.held_since_send >= 0

    def valid(self, now: float | None = None) -> bool:
        """We hold the lease and, by our clock, it cannot have lapsed (with the margin to spare)."""
        if self.held_since_send < 0:
            return False
        t = self.clock() if now is None else now
        return t - self.held_since_send < self.duration - self.margin

    def lost(self) -> None:
        """Forget that we hold it (stepping down)."""
        with self._lock:
            self.held_since_send = -1.0
            self._generation += 1

    async def read(self) -> LeaseState | None:
        """The key as it is now (a direct get, asked again while a NATS cluster elects); None: no key."""
        try:
            e = await ask("kv.get", lambda: self.kv.get(self.shard), detail=self.shard)
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
            return None
        rec = decode(e.value or b"")
        if rec is None:
            log.warning("lease %s: undecodable value at revision %s; treated as held by nobody", self.shard,
                        e.revision)
            rec = LeaseRecord(holder="", epoch=0, duration=self.duration, shard=self.shard)
        return LeaseState(self.shard, rec, int(e.revision or 0))

    async def step(self) -> bool:
        """Claim, renew or watch; True while we hold the lease (and it is `valid`)."""
        if self.kv is None:
            await self.open()
        if self.held:
            return await self.renew()
        cur = await self.read()
        now = self.clock()
        if cur is None:
            return await self._write(0, await self._next_epoch_fresh())
        self.current = cur
        self.epoch = max(self.epoch, cur.record.epoch)
        if cur.revision != self._seen_revision:
            self._seen_revision, self._seen_at = cur.revision, now
            if cur.record.holder:
                return False
        elif now - self._seen_at < cur.record.duration:
            return False
        # unchanged for a whole duration (or released): claim it on that revision
        return await self._write(cur.revision, max(cur.record.epoch, cur.revision) + 1)

    async def release(self) -> None:
        """Give the lease up (a clean shutdown): its key is rewritten with no holder, so a standby claims it
        at its next step instead of after a whole duration."""
        if not self.held:
            return
        self.lost()
        rec = LeaseRecord(holder="", epoch=self.epoch, duration=self.duration, renewed_at=self.wall_clock(),
                          shard=self.shard)
        try:
            await self.kv.update(self.shard, _ENCODE(rec), last=self.revision)
        except Exception as e:  # noqa: BLE001 - it lapses by itself
            log.info("lease %s: not released (%s); it lapses after %gs", self.shard, e, self.duration)

    async def renew(self, kv: Any = None) -> bool:
        """Renew the lease we hold, through ``kv`` (another connection's handle on the bucket, from
        `busched.bus.lease_keeper`) or our own; True while it is held and valid."""
        ok = await self._write(self.revision, self.epoch, kv=kv)
        if not ok and self.held:
            return self.valid()  # not renewed this time (e.g. a timeout); holds until it may have lapsed
        return ok

    async def _write(self, last: int, epoch: int, kv: Any = None) -> bool:
        generation = self._generation
        sent = self.clock()
        rec = LeaseRecord(holder=self.holder, epoch=epoch, duration=self.duration, renewed_at=self.wall_clock(),
                          shard=self.shard)
        try:
            rev = await (kv or self.kv).update(self.shard, _ENCODE(rec), last=last)
        except nats.js.errors.KeyWrongLastSequenceError:
            if self.held:
                log.warning("lease %s: taken by another scheduler (epoch %d was ours)", self.shard, self.epoch)
            self.lost()
            return False
        except Exception as e:  # noqa: BLE001 - a timeout, a lost connection: try again at the next step
            # never sent again here (a conditional write): a timeout is an unknown outcome.  If the write did
            # land, the key moved past ``last`` and the next write on ``last`` is refused (wrong last sequence):
            # a holder steps down then, a claimant reads the key at its next step and sees it changed (so it
            # waits a whole lease before claiming again).  Either way nothing is held on a guess.
            log.info("lease %s: write failed (%s)", self.shard, e or type(e).__name__)
            return False
        with self._lock:
            if generation != self._generation:
                return False  # stepped down while this write was on its way: it does not make us hold again
            self.revision = int(rev)
            self.epoch = epoch
            self.held_since_send = sent
            self.current = LeaseState(self.shard, rec, self.revision)
            self._seen_revision = self.revision
        return self.valid()

    async def _next_epoch_fresh(self) -> int:
        """The epoch of a first claim on a missing key: above every revision the bucket ever had."""
        try:
            info = await ask("stream.info", lambda: self.js.stream_info(f"KV_{BUCKET}"), detail=f"KV_{BUCKET}")
            return int(info.state.last_seq or 0) + 1
        except Exception:  # noqa: BLE001
            return self.epoch + 1
