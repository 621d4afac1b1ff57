"""Apply a checkpoint's messages in bulk: the restart's catch-up without the per-event bookkeeping.

A restart (`busched.scheduler.checkpoint.restore`) hands the scheduler the last message of every state
subject, each subject once, into a scheduler that has applied nothing yet.  Nearly all of them are the
first upsert of a task or a job, and for those the live path (`StateFeed.handle_one`: the subject, the
size, decode, the payload's kind and identity, `apply_object`, the effective object, the cache) spends as
much time in its layers of dispatch and per-event bookkeeping as in the work itself.  `apply_restored`
does that work directly for such a message:

* the same checks: the size limit, the same decoder (the specs' own bounds and ``__post_init__``), the
  payload's type and identity against its subject, the cache's validation (the conversion ``busched
  apply`` and `Cache.upsert` make);
* the same effect: the spec stored, the effective object (`EffectiveObjects.effective_task`) in the cache
  with its indexes, versions and templates, the stream sequence, the counters, the trigger told.

The effect is applied per run, not per message: the plain messages are gathered (decoded, checked and
converted, nothing changed yet) until one that takes the live path, or the batch's end, and the run is
then applied by dict and set updates over its columns (`Cache.insert_new`, `_flush`), which leave every
table as one-by-one inserts do, in the same order (the cache's versions too: the run's i-th object takes
the generation at its start plus i).

A format-2 checkpoint's entries (`busched.scheduler.checkpoint_shared`: a task or job given by a template and
its own fields) take the same path with the decode and conversion replaced by copies of the template's, checked
per entry for what the entry sets; one that fails a check takes the live path with the message it stands for.

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

from busched.api import build, build_like
from busched.api.queue import PriorityClass
from busched.api.shared import known_name, one_name
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.cache.inserts import NewObjects
from busched.framework.cycle import paused_gc
from busched.scheduler import checkpoint_shared, restore_blocks
from busched.scheduler.events import StateFeed
from busched.scheduler.records import _DECODE, TERMINAL
from busched.scheduler.restore_blocks import blocks, job_block, refused_whole, task_block

__all__ = ["apply_restored", "restored_handler"]

log = logging.getLogger("busched.scheduler")

# the subjects of the two kinds a checkpoint is nearly all made of: ``busched.state.task.`` + the key's tokens
_TASK_SUBJECTS = f"{S.STATE_PREFIX}.task."
_JOB_SUBJECTS = f"{S.STATE_PREFIX}.job."
_NO_CLASSES: dict[str, PriorityClass] = {}  # (the conversion's priority classes when validating: none, as the cache's)


def restored_handler(feed: StateFeed) -> Any:
    """The handler `checkpoint.restore` calls with each batch."""
    return lambda items: apply_restored(feed, items)


def apply_restored(feed: StateFeed, items: list[tuple[str, Any, int]]) -> int:
    """Apply a batch of a restart's messages in stream order, as `StateFeed.handle_state_batch` would;
    returns how many took the fast path (the rest went through the live path one by one).

    The plain ones are gathered in a run (`NewObjects`: decoded, checked, converted, nothing changed yet) and
    applied together (`_flush`: the cache's `insert_new`, the feed's specs, sequences and counters by dict
    updates) when the run meets a message that takes the live path, and at the batch's end: that message then
    sees every earlier one applied, as in stream order.  What a run's checks read cannot change within a run
    (the specs and sequences of its own keys excepted, which the run checks too): only the live path changes
    bindings, backoffs, suspensions and podgroup statuses."""
    specs_task, specs_job = feed.specs["task"], feed.specs["job"]
    seqs, cache, eff = feed.seqs, feed.cache, feed.effective
    cache_tasks, cache_jobs = cache.objects["task"], cache.objects["job"]
    table, suspended, pg_status = feed.table, eff.suspended, feed.pg_status
    limit = feed.settings.max_event_bytes
    decode, effective_task = _DECODE, eff.effective_task
    task_info, job_info = build.task_info, build.job_info
    task_info_like, job_info_like = build_like.task_info_like, build_like.job_info_like
    phases, materialize = build.TASK_PHASES, checkpoint_shared.materialize
    task_upsert, job_upsert, terminal = m.TaskUpsert, m.JobUpsert, TERMINAL
    task_at, job_at = _TASK_SUBJECTS, _JOB_SUBJECTS
    n_task, n_job = len(task_at), len(job_at)
    run = NewObjects()  # (its ``base`` unused: the scan numbers the run from ``base`` here, inline)
    run_tasks, run_jobs = run.tasks, run.jobs
    add_task_info, add_job_info = run.task_infos.append, run.job_infos.append
    touch, touch_v, touch_task = run.touched.append, run.touched_v.append, run.touched_task.append
    place, place_v, place_key = run.nodes.append, run.nodes_v.append, run.nodes_key.append
    ats: list[tuple[str, str]] = []
    at_seqs: list[int] = []
    add_at, add_seq = ats.append, at_seqs.append
    base, n, freed = cache.generation, 0, 0  # the run's versions: base + 1, base + 2, ...
    # whether a task's effective object can differ from its spec but for its own phase and node (read again after
    # each message the live path applies: only that path binds, backs off or suspends)
    gated = bool(table.bindings or table.backoff_until or suspended)
    done = 0
    with paused_gc():
        try:
            todo = blocks(items)
            todo.reverse()
            while todo:
                a, b, block = todo.pop()
                if block is not None:
                    # a block of one template's entries (busched.scheduler.restore_blocks): checked and added to the
                    # run at once, or (any check failing) nothing changed and its halves tried in turn, down to
                    # blocks too short for it, which take the one-by-one path below (at once when the template
                    # alone refused it: every half would be refused the same)
                    try:
                        if block.kind == "task":
                            got, got_freed = task_block(feed, run, block, items[a:b], base + n, ats, at_seqs,
                                                             gated)
                        else:
                            got, got_freed = job_block(feed, run, block, items[a:b], base + n, ats, at_seqs), 0
                    except Exception:  # noqa: BLE001 - unforeseen: the one-by-one path checks each again
                        log.exception("a block of checkpoint entries could not be applied at once")
                        got = got_freed = 0
                    if got:
                        n += got
                        freed += got_freed
                        continue
                    if b - a >= 2 * restore_blocks.SMALLEST and not refused_whole(block):
                        todo += ((a + b) // 2, b, block), (a, (a + b) // 2, block)
                        continue
                for subject, data, seq in items[a:b]:
                    try:
                        # (the subject's kind and key as `subjects.parse_state_subject` reads them, for the two kinds
                        # a checkpoint is made of and a key without escapes; any other goes the live path, which
                        # parses it)
                        if subject.startswith(task_at) and "%" not in subject:
                            key = subject[n_task:].replace(".", "/")
                            at = ("task", key)  # (the one kind string, not the subject's slice: one per object in seqs)
                            if type(data) is tuple:
                                # a format-2 checkpoint's task given by its template (checkpoint_shared): its own
                                # fields checked as its message's would be (the size it may have, identity, phase),
                                # the template's spec and conversion copied, those fields set (as ``__post_init__``)
                                tmpl, name, job, node, phase, _ = data
                                if (key in specs_task or key in run_tasks or key in cache_tasks or at in seqs
                                        or tmpl.kind != "task" or tmpl.info is None or tmpl.prefix + name != key
                                        or phase not in phases
                                        or 6 * (len(name) + len(job) + len(node) + len(phase)) > limit - tmpl.size):
                                    raise _PlainPathError
                                spec = tmpl.copy()
                                spec.name = name
                                spec.job = known_name(job) or one_name(job)
                                spec.node = known_name(node) or one_name(node)
                                spec.phase = known_name(phase) or one_name(phase)
                                held = spec
                                if gated or (node and phase in terminal):
                                    held = effective_task(key, spec)
                                if held is spec and tmpl.fast:
                                    info = task_info_like(tmpl.info, spec)
                                else:
                                    info = task_info(held, _NO_CLASSES)
                            else:
                                if (key in specs_task or key in run_tasks or key in cache_tasks or at in seqs
                                        or len(data) > limit):
                                    raise _PlainPathError
                                msg = decode(data)
                                if type(msg) is not task_upsert:
                                    raise _PlainPathError
                                spec = msg.task
                                if f"{spec.namespace}/{spec.name}" != key:
                                    raise _PlainPathError
                                # the effective object (`EffectiveObjects.effective_task`), asked only when it can
                                # differ from the spec: a binding, a backoff, a suspended job (``gated``), a task ended
                                # on its node
                                held = spec
                                if gated or (spec.node and spec.phase in terminal):
                                    held = effective_task(key, spec)
                                info = task_info(held, _NO_CLASSES)  # validates: refused, it changed nothing
                            n += 1
                            v = base + n
                            if held.job:
                                touch(info.job)  # (the conversion's job key: the same text as namespace/job)
                                touch_v(v)
                                touch_task(key)
                            node = held.node
                            if node:
                                place(node)
                                place_v(v)
                                place_key(key)
                                if held.deleting or held.phase in terminal:  # (`unfit.frees_capacity` of a new task)
                                    freed += 1
                            run_tasks[key] = held
                            add_task_info(info)
                            if held is not spec:
                                run.specs[key] = spec
                        elif subject.startswith(job_at) and "%" not in subject:
                            key = subject[n_job:].replace(".", "/")
                            at = ("job", key)
                            if (key in specs_job or key in run_jobs or key in cache_jobs or at in seqs
                                    or key in pg_status):
                                raise _PlainPathError
                            if type(data) is tuple:  # (a format-2 checkpoint's job given by its template, as a task's)
                                tmpl, name = data[0], data[1]
                                if (tmpl.kind != "job" or tmpl.info is None or tmpl.prefix + name != key
                                        or 6 * len(name) > limit - tmpl.size
                                    or tmpl.spec.suspend != (key in suspended)):
                                    raise _PlainPathError
                                job = tmpl.copy()
                                job.name = name
                                jinfo = job_info_like(tmpl.info, job)
                            else:
                                if len(data) > limit:
                                    raise _PlainPathError
                                msg = decode(data)
                                if type(msg) is not job_upsert:
                                    raise _PlainPathError
                                job = msg.job
                                if f"{job.namespace}/{job.name}" != key or job.suspend != (key in suspended):
                                    raise _PlainPathError
                                jinfo = job_info(job, _NO_CLASSES)  # validates
                            n += 1
                            touch(key)
                            touch_v(base + n)
                            touch_task(None)
                            run_jobs[key] = job
                            add_job_info(jinfo)
                        else:
                            raise _PlainPathError
                        add_at(at)
                        add_seq(seq)
                    except Exception:  # noqa: BLE001 - _PlainPathError, DecodeError, SpecError, or anything else
                        # the run so far first (this message sees every earlier one applied), then the live path,
                        # which refuses (and says why) or applies what the fast path does not; an unforeseen error in
                        # the fast path's checks falls back too, as the live feed's handler logs one bad message and
                        # goes on (a checkpoint is untrusted input at rest)
                        if n:
                            run.count, run.freed = n, freed
                            done += _flush(feed, run, ats, at_seqs)
                            n = freed = 0
                        if type(data) is tuple:  # (a template's entry: the message it stands for)
                            # (one that fails its own checks is rebuilt within the checkpoint's budget only, and refused
                            # unbuilt past it: a few bytes of entries must not stand for GB of messages to refuse)
                            budget = data[0].budget
                            own = budget is not None and _own_fault(subject, data, limit)
                            if own and budget[0] <= 0:
                                data = None
                            else:
                                data = materialize(data)
                                if own:
                                    budget[0] -= len(data)
                        try:
                            if data is None:
                                _refuse_unbuilt(feed, subject, seq)
                            else:
                                feed.handle_one(subject, data, seq)
                        except Exception:  # noqa: BLE001 - one bad message must not stop the batch
                            log.exception("state message on %s (seq %d) failed", subject, seq)
                        base = cache.generation
                        gated = bool(table.bindings or table.backoff_until or suspended)
            if n:
                run.count, run.freed = n, freed
                done += _flush(feed, run, ats, at_seqs)
        finally:
            feed.flush_counts()
    return done


def _flush(feed: StateFeed, run: NewObjects, ats: list[tuple[str, str]], at_seqs: list[int]) -> int:
    """Apply a run: the cache's inserts (`Cache.insert_new`), then what the live path's `apply_object` keeps
    beside them for a new object (the spec, the sequence, no refusal, not dirty, not being deleted), the
    counters, the trigger; the run and the columns emptied.  Returns the run's length."""
    tasks, jobs = run.tasks, run.jobs
    feed.cache.insert_new(run)
    if tasks:
        specs = feed.specs["task"]
        specs.update(tasks)
        if run.specs:  # (the spec, where the cache holds its effective object)
            specs.update(run.specs)
        eff = feed.effective
        if eff.dirty_tasks:
            eff.dirty_tasks.difference_update(tasks)
        if feed.table.deleting:
            feed.table.deleting.difference_update(tasks)
    if jobs:
        feed.specs["job"].update(jobs)
        if feed.effective.dirty_jobs:
            feed.effective.dirty_jobs.difference_update(jobs)
    feed.seqs.update(zip(ats, at_seqs))
    refused = feed.refused
    if refused:
        for at in ats:
            refused.pop(at, None)
    counts = feed.counts
    if tasks:
        counts[("task", "upsert")] = counts.get(("task", "upsert"), 0) + len(tasks)
    if jobs:
        counts[("job", "upsert")] = counts.get(("job", "upsert"), 0) + len(jobs)
    feed.new_work()
    count = run.count
    run.clear()
    ats.clear()
    at_seqs.clear()
    return count


def _own_fault(subject: str, entry: tuple[Any, ...], limit: int) -> bool:
    """Whether a template's entry takes the live path for what it and its template hold, whatever the scheduler holds:
    its template of another kind or refused, its key not its subject's, its phase unknown, or its message possibly
    over the size limit (measured only by building it)."""
    tmpl, name, job, node, phase, _ = entry
    kind, key = S.parse_state_subject(subject)
    if tmpl.kind != kind or tmpl.info is None or tmpl.prefix + name != key:
        return True
    if kind == "task":
        return phase not in build.TASK_PHASES or 6 * (len(name) + len(job) + len(node) + len(phase)) > limit - tmpl.size
    return 6 * len(name) > limit - tmpl.size


def _refuse_unbuilt(feed: StateFeed, subject: str, seq: int) -> None:
    """Refuse an entry that fails its own checks past the checkpoint's rebuild budget, as the live path refuses a
    message (logged and counted, its object's history replayed after the catch-up), without building it."""
    kind, key = S.parse_state_subject(subject)
    feed.reject("malformed", kind, f"{kind} {key}: a checkpoint entry that fails its checks, past the bytes its "
                                   f"checkpoint may be rebuilt to (subject {subject}, seq {seq})")
    if not feed.table.caught_up:
        feed.rejected_at_catchup[subject] = seq
    if key in feed.specs.get(kind, ()):
        feed.refused[(kind, key)] = feed.last_refusal


class _PlainPathError(Exception):
    """This message takes the live path."""
