"""Apply a checkpoint's messages in bulk: the restart's catch-up without the per-event bookkeeping.

A restart (`busched.scheduler.checkpoint.restore`) hands the scheduler the last message of every state
subject, each subject once, into a scheduler that has applied nothing yet.  Nearly all of them are the
first upsert of a task or a job, and for those the live path (`StateFeed.handle_one`: the subject, the
size, decode, the payload's kind and identity, `apply_object`, the effective object, the cache) spends as
much time in its layers of dispatch and per-event bookkeeping as in the work itself.  `apply_restored`
does that work directly for such a message:

* the same checks: the size limit, the same decoder (the specs' own bounds and ``__post_init__``), the
  payload's type and identity against its subject, the cache's validation (`Cache.insert`: `upsert`
  written out for an object it does not hold; it converts it as ``busched apply`` does);
* the same effect: the spec stored, the effective object (`EffectiveObjects.effective_task`) upserted in
  the same order, the stream sequence, the counters (added up per batch), the trigger told once a batch.

Anything else goes through `StateFeed.handle_one` itself, message by message, in stream order: every
other kind, deletes, an object already known (or one whose sequence was seen), a task or job whose
effective object is not its spec alone (a podgroup status read first, a suspend flip), and any message
the checks above refuse, so that a refusal is exactly the live path's (logged naming the object and
the field, counted, the object left out, its history replayed after the catch-up).  The fast path
changes nothing before its last check has passed, so handing a refused message over is exact.
"""

from __future__ import annotations

import logging
from typing import Any

from busched.bus import messages as m
from busched.bus import subjects as S
from busched.framework.cycle import paused_gc
from busched.scheduler.events import StateFeed
from busched.scheduler.records import _DECODE

__all__ = ["apply_restored", "restored_handler"]

log = logging.getLogger("busched.scheduler")


def restored_handler(feed: StateFeed) -> Any:
    """The handler `checkpoint.restore` calls with each batch."""
    return lambda items: apply_restored(feed, items)


def apply_restored(feed: StateFeed, items: list[tuple[str, bytes, int]]) -> int:
    """Apply a batch of a restart's messages in stream order, as `StateFeed.handle_state_batch` would;
    returns how many took the fast path (the rest went through the live path one by one)."""
    specs_task, specs_job = feed.specs["task"], feed.specs["job"]
    seqs, refused, cache, eff = feed.seqs, feed.refused, feed.cache, feed.effective
    deleting, dirty_tasks, dirty_jobs = feed.table.deleting, eff.dirty_tasks, eff.dirty_jobs
    suspended, pg_status = eff.suspended, feed.pg_status
    limit = feed.settings.max_event_bytes
    parse, decode, insert, effective_task = S.parse_state_subject, _DECODE, cache.insert, eff.effective_task
    task_upsert, job_upsert = m.TaskUpsert, m.JobUpsert
    tasks = jobs = 0
    with paused_gc():
        try:
            for subject, data, seq in items:
                kind, key = parse(subject)
                try:
                    if kind == "task":
                        if key in specs_task or ("task", key) in seqs or len(data) > limit:
                            raise _PlainPathError
                        msg = decode(data)
                        if type(msg) is not task_upsert:
                            raise _PlainPathError
                        spec = msg.task
                        if f"{spec.namespace}/{spec.name}" != key:
                            raise _PlainPathError
                        insert("task", effective_task(key, spec), key)  # validates before it changes anything
                        specs_task[key] = spec
                        dirty_tasks.discard(key)
                        deleting.discard(key)
                        kind = "task"  # (the one string, not the subject's slice: one per object kept in seqs)
                        tasks += 1
                    elif kind == "job":
                        if key in specs_job or ("job", key) in seqs or len(data) > limit or key in pg_status:
                            raise _PlainPathError
                        msg = decode(data)
                        if type(msg) is not job_upsert:
                            raise _PlainPathError
                        job = msg.job
                        if f"{job.namespace}/{job.name}" != key or job.suspend != (key in suspended):
                            raise _PlainPathError
                        insert("job", job, key)
                        specs_job[key] = job
                        dirty_jobs.discard(key)
                        kind = "job"
                        jobs += 1
                    else:
                        raise _PlainPathError
                except Exception:  # noqa: BLE001 - _PlainPathError, DecodeError, SpecError, or anything else
                    # the live path, which refuses (and says why) or applies what the fast path does not; an
                    # unforeseen error in the fast path's checks falls back too, as the live feed's handler
                    # logs one bad message and goes on (a checkpoint is untrusted input at rest)
                    try:
                        feed.handle_one(subject, data, seq)
                    except Exception:  # noqa: BLE001 - one bad message must not stop the batch
                        log.exception("state message on %s (seq %d) failed", subject, seq)
                    continue
                seqs[(kind, key)] = seq
                if refused:
                    refused.pop((kind, key), None)
        finally:
            counts = feed.counts
            if tasks:
                counts[("task", "upsert")] = counts.get(("task", "upsert"), 0) + tasks
            if jobs:
                counts[("job", "upsert")] = counts.get(("job", "upsert"), 0) + jobs
            if tasks or jobs:
                feed.new_work()
            feed.flush_counts()
    return tasks + jobs


class _PlainPathError(Exception):
    """This message takes the live path."""
