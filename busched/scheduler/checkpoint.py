"""Restart from a checkpoint: the state stream's last message per subject, stored as one object.

A catch-up applies the last message of every state subject, in stream order (`busched.bus.feeds`).  A
checkpoint holds exactly that input, cut at a stream sequence ``seq``: for every subject, the last
``(sequence, bytes)`` at or before ``seq``.  A restart loads it, reads only the messages after ``seq``,
keeps the last per subject of both, and hands the result to the same handler in stream order: what
the scheduler applies is the last message of every subject, the very input of a full read, so the
restarted scheduler (cache, specs, binding records, results, epochs, ledgers, statuses, the objects'
order) is the one a full read builds, and replays reproduce its decisions.  Keeping inputs rather
than the tables built from them keeps the format independent of those tables.  What it saves is
the per-message delivery of the whole stream (the client's parsing, callbacks and acks of hundreds
of thousands of messages); the handler's work remains.  Format 2 (`busched.scheduler.checkpoint_shared`)
stores tasks and jobs that differ only in a few fields as a template and columns, each standing for its
message byte for byte, so that a restart copies a template's spec and conversion instead of decoding and
converting every message (`busched.scheduler.restore_bulk`); format 1 (every message whole) is still read.

A checkpoint is ignored, with a log line, and the full read done, when it is missing, corrupt, of a
newer format, of another stream (made again: its creation time differs), ahead of the stream or older
than what the stream retains (its first sequence is past ``seq``), when the messages after it are more
than it holds (a full read is cheaper), or when the subjects it and the tail name are not those the
stream holds (subjects purged since, or written while reading: a purge leaves no message to read).

Writing (`busched.scheduler.checkpoint_writer`) builds the next checkpoint the same way (the last one plus the tail, or
a full read of the last messages when there is none) in the background, every ``interval`` seconds
once the stream has grown by ``min_messages``; the encoding and compression run in a worker thread.  A
checkpoint over ``max_bytes`` (after compression) is not written.  Only a scheduler that may write
(the leader, or the only one) writes; standbys read it when they start, as any restart does.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from itertools import compress
from operator import not_
from typing import Any

import msgspec

from busched.bus import subjects as S
from busched.bus.checkpoints import StreamFacts
from busched.bus.wire import Version
from busched.scheduler import checkpoint_shared as shared_form

__all__ = ["CheckpointSettings", "Checkpoint", "encode", "decode", "build", "whole", "Restored", "restore",
           "FORMAT", "OBJECT"]

log = logging.getLogger("busched.scheduler")

FORMAT = 2  # this encoding (1: every message whole; 2: tasks may share templates); a newer one is ignored
MAGIC = b"BSCK"
OBJECT = "state"  # the checkpoint's object name (one per state stream)
BATCH = 8192  # messages handed to the handler at once (as the live feed's batches)


@dataclass
class CheckpointSettings:
    interval: float = 0.0  # seconds between checkpoints; 0: none written (one found is still read)
    min_messages: int = 10_000  # ... and only once the stream has grown by this many messages
    max_bytes: int = 1 << 30  # a larger checkpoint (compressed) is not written
    read: bool = True  # start from a checkpoint when there is a usable one
    # the state messages' size limit (the scheduler sets its ``max_event_bytes``): a longer message is kept whole,
    # and a checkpoint with a longer template is corrupt (not used)
    max_event_bytes: int = shared_form.LIMIT


class Checkpoint(msgspec.Struct, frozen=True):
    """The last message of every state subject up to stream sequence ``seq``, in stream order (columns).

    Format 2 (`busched.scheduler.checkpoint_shared`): an entry ``i`` with ``shared[i] = t > 0`` is a task
    given by template ``t - 1`` (a task spec without its name, job, node and phase, JSON) and the next row of
    the columns ``names``, ``jobs``, ``nodes``, ``phases``, ``versions`` (its ``data`` is empty); ``shared`` is
    empty when every message is whole, as in format 1."""

    stream: str
    created: str  # the stream's creation time, as the server reports it
    seq: int
    subjects: list[str]
    seqs: list[int]
    data: list[bytes]
    shared: list[int] = []
    templates: list[bytes] = []
    names: list[str] = []
    jobs: list[str] = []
    nodes: list[str] = []
    phases: list[str] = []
    versions: list[Version] = []


def encode(ck: Checkpoint) -> bytes:
    """``MAGIC``, the format (2 bytes), ``z`` (zlib) or ``r`` (raw), then the msgpack body; compressed when
    that saves a fifth at least (JSON specs usually shrink several times)."""
    raw = msgspec.msgpack.encode(ck)
    packed = zlib.compress(raw, 1)
    head = MAGIC + FORMAT.to_bytes(2, "big")
    return head + b"z" + packed if len(packed) < 0.8 * len(raw) else head + b"r" + raw


class CheckpointError(ValueError):
    pass


def decode(blob: bytes, max_bytes: int = 4 << 30) -> Checkpoint:
    """The checkpoint in ``blob``; `CheckpointError` says why it cannot be used."""
    if len(blob) < 7 or blob[:4] != MAGIC:
        raise CheckpointError("corrupt: not a checkpoint")
    fmt = int.from_bytes(blob[4:6], "big")
    if fmt > FORMAT:
        raise CheckpointError(f"format {fmt} is newer than this scheduler's ({FORMAT})")
    kind, body = blob[6:7], blob[7:]
    try:
        if kind == b"z":
            d = zlib.decompressobj()
            body = d.decompress(body, max_bytes)
            if d.unconsumed_tail or not d.eof:
                raise CheckpointError("corrupt: truncated, or larger than the limit")
        elif kind != b"r":
            raise CheckpointError("corrupt: unknown compression")
        ck = msgspec.msgpack.decode(body, type=Checkpoint)
    except (zlib.error, msgspec.DecodeError) as e:
        raise CheckpointError(f"corrupt: {e}") from None
    if not len(ck.subjects) == len(ck.seqs) == len(ck.data):
        raise CheckpointError("corrupt: columns of different lengths")
    if ck.shared or ck.templates or ck.names:
        if len(ck.shared) != len(ck.subjects):
            raise CheckpointError("corrupt: columns of different lengths")
        n = len(ck.shared) - ck.shared.count(0)
        if not len(ck.names) == len(ck.jobs) == len(ck.nodes) == len(ck.phases) == len(ck.versions) == n:
            raise CheckpointError("corrupt: the task columns do not match their entries")
        if min(ck.shared, default=0) < 0 or max(ck.shared, default=0) > len(ck.templates):
            raise CheckpointError("corrupt: an entry of a template there is not")
    return ck


class Merged:
    """The last message of every subject of a checkpoint and the tail after it (the later sequence wins), in
    stream order, without a copy of the checkpoint: its entries are handed over batch by batch and let go as
    they are (`batches`), so a restart holds the checkpoint's messages once, shrinking as they are applied.
    The checkpoint's entries all come before the tail's (its sequence ends where the tail starts)."""

    def __init__(self, ck: Checkpoint | None, tail: list[tuple[str, int, bytes]], *,
                 max_event_bytes: int = shared_form.LIMIT) -> None:
        self.ck = ck
        # (format 2: its templates decoded and checked once; `CheckpointError` when one is not a task or job spec, or
        # is longer than the message limit: refused by its length, undecoded)
        # (and the bytes its entries that fail their own checks may be rebuilt to, as messages for the live path to
        # refuse: what the checkpoint holds, or 16 messages at the limit, so that a few KB of entries of one big
        # template cannot stand for GB of messages; `restore_bulk` refuses the rest unbuilt)
        try:
            budget = ([max(sum(map(len, ck.data)) + sum(map(len, ck.templates)) + sum(map(len, ck.names)),
                           16 * max_event_bytes)] if ck is not None and ck.shared else None)
            self.templates = (shared_form.templates_of(ck.templates, max_event_bytes, budget)
                              if ck is not None and ck.shared else [])
        except shared_form.TemplateError as e:
            raise CheckpointError(str(e)) from None
        last: dict[str, tuple[int, bytes]] = {}
        for subject, seq, data in tail:
            last[subject] = (seq, data)
        self.tail = sorted(((subject, data, seq) for subject, (seq, data) in last.items()), key=lambda it: it[2])
        self.keep: set[str] | None = None  # only these subjects (the stream's), when some were purged

    def __len__(self) -> int:
        if self.ck is None:
            return sum(1 for _ in self._subjects())
        # (the checkpoint's entries the tail does not replace and the stream holds, each as often as it is there, and
        # the tail's: as `_subjects` counts them, by C loops over hundreds of thousands of subjects)
        over = {it[0] for it in self.tail}
        subjects, keep = self.ck.subjects, self.keep
        if keep is not None:
            allowed = keep.difference(over)
            return sum(map(allowed.__contains__, subjects)) + sum(map(keep.__contains__, [it[0] for it in self.tail]))
        replaced = sum(map(over.__contains__, subjects)) if over else 0
        return len(subjects) - replaced + len(self.tail)

    def _subjects(self) -> Any:
        over = {it[0] for it in self.tail}
        keep = self.keep
        if self.ck is not None:
            for subject in self.ck.subjects:
                if subject not in over and (keep is None or subject in keep):
                    yield subject
        for subject, _, _ in self.tail:
            if keep is None or subject in keep:
                yield subject

    def batches(self, size: int = BATCH, *, release: bool = False, entries: bool = False) -> Any:
        """Lists of ``(subject, data, sequence)`` as the handler takes them; ``release``: the checkpoint's
        entries are dropped once handed over (it can then be iterated once only).  A task a format-2 checkpoint
        gives by a template comes as its message, or with ``entries`` (a handler that reads them:
        `busched.scheduler.restore_bulk`) as its entry ``(template, name, job, node, phase, version)``."""
        over = {it[0] for it in self.tail}
        keep = self.keep
        # (a checkpoint's subject handed over when the tail does not replace it and the stream holds it, by C loops)
        allowed = keep.difference(over) if keep is not None else None
        out: list[tuple[str, Any, int]] = []
        ck = self.ck
        if ck is not None:
            subjects, seqs, data = ck.subjects, ck.seqs, ck.data
            shared, cols, k = ck.shared, (ck.names, ck.jobs, ck.nodes, ck.phases, ck.versions), 0
            # a slice of the columns at a time, zipped into the handler's tuples (C loops: a checkpoint has hundreds
            # of thousands of entries), those the tail replaces or the stream no longer holds left out
            for i in range(0, len(subjects), size):
                j = min(i + size, len(subjects))
                k0 = k
                if shared:
                    got, k = shared_form.entry_data(self.templates, shared[i:j], data[i:j], cols, k, not entries)
                    part = zip(subjects[i:j], got, seqs[i:j])
                else:
                    part = zip(subjects[i:j], data[i:j], seqs[i:j])
                if allowed is not None:
                    out.extend(compress(part, map(allowed.__contains__, subjects[i:j])))
                elif over:
                    out.extend(compress(part, map(not_, map(over.__contains__, subjects[i:j]))))
                else:
                    out.extend(part)
                if release:
                    data[i:j] = _EMPTY * (j - i)
                    if k > k0:  # (the entries' own strings too: each is in its tuple, or its object, by now)
                        for col in cols:
                            col[k0:k] = _NONE * (k - k0)
                while len(out) >= size:
                    yield out[:size]
                    del out[:size]
        for it in self.tail:
            if keep is None or it[0] in keep:
                out.append(it)
                if len(out) >= size:
                    yield out
                    out = []
        if out:
            yield out


_EMPTY = [b""]
_NONE: list[Any] = [None]


def build(stream: str, created: str, seq: int, items: list[tuple[str, Any, int]], *,
          max_event_bytes: int = shared_form.LIMIT) -> Checkpoint:
    """The checkpoint (format 2) of ``items``, ``(subject, data, sequence)`` in stream order (``data`` a message,
    or the entry of the last checkpoint's template it was handed as: `Merged.batches` with ``entries``); a message
    over ``max_event_bytes`` is kept whole."""
    templates, shared, data, (names, jobs, nodes, phases, versions) = shared_form.share(
        [(it[0], it[1] if type(it[1]) is tuple else bytes(it[1]), it[2]) for it in items], max_event_bytes)
    return Checkpoint(stream=stream, created=created, seq=seq, subjects=[it[0] for it in items],
                      seqs=[it[2] for it in items], data=data, shared=shared, templates=templates, names=names,
                      jobs=jobs, nodes=nodes, phases=phases, versions=versions)


def whole(ck: Checkpoint) -> Checkpoint:
    """``ck`` with every message whole (format 1's columns): each template's entry as the message it stands for."""
    if not ck.shared:
        return ck
    data, _ = shared_form.entry_data(shared_form.templates_of(ck.templates), ck.shared, ck.data,
                                     (ck.names, ck.jobs, ck.nodes, ck.phases, ck.versions), 0, True)
    return Checkpoint(stream=ck.stream, created=ck.created, seq=ck.seq, subjects=list(ck.subjects),
                      seqs=list(ck.seqs), data=data)


def merge(ck: Checkpoint | None, tail: list[tuple[str, int, bytes]]) -> list[tuple[str, bytes, int]]:
    """All of `Merged` at once (tests, and a checkpoint written from it)."""
    return [it for batch in Merged(ck, tail).batches() for it in batch]


def unusable(ck: Checkpoint, facts: StreamFacts) -> str:
    """Why ``ck`` cannot start a reader of the stream ``facts`` describe ("" when it can)."""
    if ck.stream != S.STATE_STREAM or ck.created != facts.created:
        return "another stream (made again since)"
    if ck.seq > facts.last_seq:
        return f"ahead of the stream (at {ck.seq}, the stream at {facts.last_seq}: purged or made again)"
    if ck.seqs and facts.first_seq > ck.seq:
        return f"older than what the stream retains (at {ck.seq}, the stream from {facts.first_seq})"
    if facts.last_seq - ck.seq > max(len(ck.seqs), 1000):
        return f"{facts.last_seq - ck.seq} messages behind the stream: a full read is cheaper"
    return ""


async def latest(bus: Any, facts: StreamFacts, max_bytes: int,
                 max_event_bytes: int = shared_form.LIMIT) -> tuple[Merged, int] | str:
    """The last message per subject of the whole stream, from the stored checkpoint and the tail after it:
    ``(merged, sequence covered)``, or why the checkpoint cannot be used."""
    try:
        blob = await bus.checkpoint_get(OBJECT)
    except Exception as e:  # noqa: BLE001 - unreadable is as missing
        return f"cannot be read ({type(e).__name__}: {e})"
    if blob is None:
        return "none stored"
    try:
        ck = await asyncio.to_thread(decode, blob, max_bytes)  # (the event loop keeps its turns meanwhile)
    except CheckpointError as e:
        return str(e)
    del blob
    why = unusable(ck, facts)
    if why:
        return why
    tail = await bus.checkpoint_read(ck.seq + 1) if facts.last_seq > ck.seq else []
    # every message up to the stream's last when it was asked has been read (some may be gone: purged)
    covered = max(facts.last_seq, tail[-1][1] if tail else 0)
    try:
        merged = Merged(ck, tail, max_event_bytes=max_event_bytes)
    except CheckpointError as e:
        return str(e)
    del ck, tail
    after = await bus.checkpoint_facts()
    if after.last_seq != covered:
        return f"the stream moved on while reading (to {after.last_seq}, read to {covered})"
    n = len(merged)
    if after.subjects != n:
        # subjects purged since (a deleted object's, `StateFeed.purge_object`): a full read does not see them
        merged.keep = await bus.checkpoint_subjects()
        n = len(merged)
        if n != after.subjects:
            return f"does not match the stream: {n} subjects to {after.subjects}"
    return merged, covered


@dataclass
class Restored:
    seq: int  # the stream sequence applied up to: the live feed starts after it
    messages: int  # messages applied
    read_s: float = 0.0  # seconds to read it (the checkpoint, its decoding, the tail) ...
    apply_s: float = 0.0  # ... and to apply it (`busched bench restart` reports both)


async def restore(bus: Any, handler: Callable[[list[tuple[str, Any, int]]], None],
                  settings: CheckpointSettings, *, entries: bool = False) -> Restored | None:
    """Apply the last message of every state subject from the checkpoint and the tail after it; None (and a
    log line) when there is no usable checkpoint, and nothing was applied: the caller reads it all.
    ``entries``: the handler takes a format-2 checkpoint's tasks as their entries (`Merged.batches`)."""
    t0 = time.perf_counter()
    try:
        facts = await bus.checkpoint_facts()
        got = await latest(bus, facts, settings.max_bytes, settings.max_event_bytes)
    except Exception as e:  # noqa: BLE001 - whatever went wrong, the full read is there
        got = f"failed ({type(e).__name__}: {e})"
    if isinstance(got, str):
        log.info("state checkpoint not used: %s; reading the whole state stream", got)
        return None
    merged, covered = got
    t1 = time.perf_counter()
    n = 0
    for batch in merged.batches(release=True, entries=entries):
        handler(batch)
        n += len(batch)
        await asyncio.sleep(0)  # the event loop goes on between batches
    log.info("started from the state checkpoint: %d subjects up to sequence %d", n, covered)
    return Restored(seq=covered, messages=n, read_s=t1 - t0, apply_s=time.perf_counter() - t1)
