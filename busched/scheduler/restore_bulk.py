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
from busched.scheduler.records import _DECODE, TERMINAL

__all__ = ["apply_restored", "restored_handler"]

log = logging.getLogger("busched.scheduler")

# the subjects of the two kinds a checkpoint is nearly all made of: ``busched.state.task.`` + the key's tokens
_TASK_SUBJECTS = f"{S.STATE_PREFIX}.task."
_JOB_SUBJECTS = f"{S.STATE_PREFIX}.job."


def restored_handler(feed: StateFeed) -> Any:
    """The handler `checkpoint.restore` calls with each batch."""
    return lambda items: apply_restored(feed, items)


def apply_restored(feed: StateFeed, items: list[tuple[str, bytes, int]]) -> int:
    """Apply a batch of a restart's messages in stream order, as `StateFeed.handle_state_batch` would;
    returns how many took the fast path (the rest went through the live path one by one)."""
    specs_task, specs_job = feed.specs["task"], feed.specs["job"]
    seqs, refused, cache, eff = feed.seqs, feed.refused, feed.cache, feed.effective
    table, deleting, dirty_tasks, dirty_jobs = feed.table, feed.table.deleting, eff.dirty_tasks, eff.dirty_jobs
    suspended, pg_status = eff.suspended, feed.pg_status
    limit = feed.settings.max_event_bytes
    decode, effective_task = _DECODE, eff.effective_task
    insert_task, insert_job = cache.insert_task, cache.insert_job
    task_upsert, job_upsert, terminal = m.TaskUpsert, m.JobUpsert, TERMINAL
    task_at, job_at = _TASK_SUBJECTS, _JOB_SUBJECTS
    n_task, n_job = len(task_at), len(job_at)
    tasks = jobs = 0
    with paused_gc():
        try:
            for subject, data, seq in items:
                try:
                    # (the subject's kind and key as `subjects.parse_state_subject` reads them, for the two kinds
                    # a checkpoint is made of and a key without escapes; any other goes the live path, which
                    # parses it)
                    if subject.startswith(task_at) and "%" not in subject:
                        key = subject[n_task:].replace(".", "/")
                        at = ("task", key)  # (the one kind string, not the subject's slice: one per object in seqs)
                        if key in specs_task or at in seqs or len(data) > limit:
                            raise _PlainPathError
                        msg = decode(data)
                        if type(msg) is not task_upsert:
                            raise _PlainPathError
                        spec = msg.task
                        if f"{spec.namespace}/{spec.name}" != key:
                            raise _PlainPathError
                        # the effective object (`EffectiveObjects.effective_task`), asked only when it can
                        # differ from the spec: a binding, a backoff, a suspended job, a task ended on its node
                        if table.bindings or table.backoff_until or suspended or (spec.node and spec.phase in terminal):
                            insert_task(key, effective_task(key, spec))  # validates before it changes anything
                        else:
                            insert_task(key, spec)
                        specs_task[key] = spec
                        if dirty_tasks:
                            dirty_tasks.discard(key)
                        if deleting:
                            deleting.discard(key)
                        tasks += 1
                    elif subject.startswith(job_at) and "%" not in subject:
                        key = subject[n_job:].replace(".", "/")
                        at = ("job", key)
                        if key in specs_job or at in seqs or len(data) > limit or key in pg_status:
                            raise _PlainPathError
                        msg = decode(data)
                        if type(msg) is not job_upsert:
                            raise _PlainPathError
                        job = msg.job
                        if f"{job.namespace}/{job.name}" != key or job.suspend != (key in suspended):
                            raise _PlainPathError
                        insert_job(key, job)
                        specs_job[key] = job
                        if dirty_jobs:
                            dirty_jobs.discard(key)
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
                seqs[at] = seq
                if refused:
                    refused.pop(at, None)
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
