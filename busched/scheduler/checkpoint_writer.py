"""Writing the state checkpoint: a background task that, now and then, stores the next one.

`busched.scheduler.checkpoint` defines the checkpoint (its format, reading, merging with the tail and
restoring from it); this module is the one thing that writes it.  The leader (or the only scheduler)
runs a `CheckpointWriter` every ``interval`` seconds once the stream has grown by ``min_messages``: the
last checkpoint plus the tail (or a full read of the last messages when there is none), grouped and
encoded in a worker thread, not written over ``max_bytes``.  Kept apart so the restart path reads
without the writer's scheduling around it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from busched.bus import subjects as S
from busched.scheduler import checkpoint

__all__ = ["CheckpointWriter"]

log = logging.getLogger("busched.scheduler")  # (the logger checkpoint.py writes to)


class CheckpointWriter:
    """Writes the state checkpoint now and then, in the background (see the module's docstring)."""

    def __init__(self, bus: Any, settings: checkpoint.CheckpointSettings, may_write: Callable[[], bool], *,
                 storage: str = "file", replicas: int = 1) -> None:
        self.bus = bus
        self.settings = settings
        self.may_write = may_write
        self.storage, self.replicas = storage, replicas
        self.written_seq = 0  # the sequence the last checkpoint written covers
        self.writes = 0

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.settings.interval)
                return
            except asyncio.TimeoutError:
                pass
            if not self.may_write():
                continue
            try:
                await self.write_once()
            except Exception:  # noqa: BLE001 - the next round tries again; restarts read the stream meanwhile
                log.exception("state checkpoint not written")

    async def write_once(self, *, force: bool = False) -> int:
        """Write a checkpoint of the stream as it is now; returns its size in bytes (0: not written)."""
        facts = await self.bus.checkpoint_facts()
        if not force and facts.last_seq - self.written_seq < self.settings.min_messages:
            return 0
        got = await checkpoint.latest(self.bus, facts, self.settings.max_bytes, self.settings.max_event_bytes)
        if isinstance(got, str):  # none usable: the last message of every subject, read afresh
            tail = await self.bus.checkpoint_read(0) if facts.messages else []
            covered = max((seq for _, seq, _ in tail), default=0)
            items = checkpoint.merge(None, tail)
            del tail
        else:
            # (the last checkpoint's entries as they are: their templates and fields carried over, not encoded again)
            items = [it for batch in got[0].batches(entries=True) for it in batch]
            covered = got[1]
            del got
        # (the tasks and jobs grouped by their templates, and the encoding, in a worker thread: a decode per message)
        ck = await asyncio.to_thread(checkpoint.build, S.STATE_STREAM, facts.created, covered, items,
                                     max_event_bytes=self.settings.max_event_bytes)
        del items
        blob = await asyncio.to_thread(checkpoint.encode, ck)
        if len(blob) > self.settings.max_bytes:
            log.warning("state checkpoint of %d bytes exceeds the limit of %d: not written", len(blob),
                        self.settings.max_bytes)
            return 0
        if not await self.bus.checkpoint_put(checkpoint.OBJECT, blob, storage=self.storage, replicas=self.replicas):
            return 0  # deposed (fenced) while it was being built: nothing was written
        self.written_seq = covered
        self.writes += 1
        log.info("state checkpoint written: %d subjects up to sequence %d, %d bytes", len(ck.seqs), covered,
                 len(blob))
        return len(blob)
