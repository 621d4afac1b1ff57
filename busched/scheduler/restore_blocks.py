"""A block of one template's entries applied at once: a restart's replicas checked and added to the run by columns.

A format-2 checkpoint (`busched.scheduler.checkpoint_shared`) gives most of a big cluster's tasks and jobs as entries
of a few templates, and they come in long blocks (the tasks of one shape, then the jobs of one shape, in the order
they were applied).  `busched.scheduler.restore_bulk` checks an entry, copies its template's spec and conversion and
adds it to the run one by one: a dozen set and dict look-ups, three string operations and a dozen list appends per
object, as much as the copies themselves.  `task_block` and `job_block` do the same for a block of entries of one
template at once, each check as one operation over the block's columns (a set's ``isdisjoint``, a list compared
with a list, the longest of each column against the size the template leaves), then the copies
(`build_like.task_infos_like`, `job_infos_like`), then the run's columns extended:

* a block takes this path only when every entry of it passes every check the one-by-one path makes, and nothing
  it reads differs between its entries but what the checks cover: the template (one object), the subject's kind
  and key against the entry's name, the key not held (the feed's specs, the run, the cache, the sequences, a
  podgroup status, twice in the block), the phase, the size the message could reach, a job's suspension;
* a task's effective object can differ from its spec (a binding, a backoff or a suspended job held: ``gated``; or
  the task ended on its node, which its effective object drops): the block then asks for it as the one-by-one
  path does (every task's when gated, else each ended task's on its node), converts each one that differs itself
  and keeps its spec aside, as the one-by-one path; a conversion that refuses leaves the block to that path;
* anything else leaves the block to the one-by-one path, which checks each entry again and hands any that fails
  to the live path: a block changes nothing before its last check has passed and its objects are all built, so
  falling back is exact (the tests compare both, and the live path, table by table).

The run (`busched.cache.inserts.NewObjects`) then holds exactly what the one-by-one path would have put in it: the
same objects (copies of the same template, the same fields), the same columns in the same order, the i-th object
numbered the run's base plus i.
"""

from __future__ import annotations

from itertools import compress, repeat
from operator import itemgetter
from typing import Any

from busched.api import build, build_like
from busched.api.queue import PriorityClass
from busched.api.shared import known_name, one_name
from busched.bus import subjects as S
from busched.cache.inserts import NewObjects
from busched.scheduler.records import TERMINAL

__all__ = ["task_block", "job_block", "blocks", "refused_whole", "SMALLEST", "LARGEST"]

_TASK_AT = f"{S.STATE_PREFIX}.task."
_JOB_AT = f"{S.STATE_PREFIX}.job."
_PHASES = frozenset(build.TASK_PHASES)
_first, _second = itemgetter(0), itemgetter(1)
_NONE = (0, 0)
_NO_CLASSES: dict[str, PriorityClass] = {}  # (the conversion's priority classes when validating: none, as the cache's)
SMALLEST = 16  # shorter runs of one template take the one-by-one path (a block's set-up is not worth it)
LARGEST = 256  # a block at most: one entry failing a check sends this many through the one-by-one path


def blocks(items: list[tuple[str, Any, int]]) -> list[tuple[int, int, Any]]:
    """``items`` cut into ``(start, end, template)``: runs of entries of one template (at least ``SMALLEST`` and
    at most ``LARGEST`` of them) and, between them, ``(start, end, None)`` for the one-by-one path."""
    tmpls = [d[0] if type(d) is tuple else None for d in map(_second, items)]
    out: list[tuple[int, int, Any]] = []
    i, n, loose = 0, len(tmpls), 0  # (``loose``: where the items for the one-by-one path began)
    while i < n:
        t = tmpls[i]
        j = i + 1
        if t is not None:
            # (the run's end: the first item from ``i`` that is not an entry of ``t``, by C comparisons a slice at once)
            while j < n and tmpls[j] is t:
                end = min(n, j + LARGEST)
                part = tmpls[j:end]
                k = part.count(t)
                if k == len(part):
                    j = end
                else:
                    j += next(x for x, u in enumerate(part) if u is not t)
                    break
        if t is None or j - i < SMALLEST:
            i = j
            continue
        if loose < i:
            out.append((loose, i, None))
        for a in range(i, j, LARGEST):
            out.append((a, min(j, a + LARGEST), t))
        i = loose = j
    if loose < n:
        out.append((loose, n, None))
    return out


def refused_whole(tmpl: Any) -> bool:
    """Whether `task_block` or `job_block` refuses every block of ``tmpl`` for the template alone (not converted,
    a task's not fast, a suspended job's): its halves would be refused too, the caller need not try them."""
    if tmpl.kind == "task":
        return tmpl.info is None or not tmpl.fast
    return tmpl.kind != "job" or tmpl.info is None or bool(tmpl.spec.suspend)


def _keys(part: list[tuple[str, Any, int]], at: str, prefix: str, names: tuple[str, ...]) -> list[str] | None:
    """The block's keys, when every subject is of the kind ``at`` names, unescaped, and its key is its entry's
    (the template's namespace and the entry's name), each once; else None."""
    subjects = list(map(_first, part))
    if "%" in "".join(subjects) or not all(map(str.startswith, subjects, repeat(at, len(subjects)))):
        return None
    n = len(at)
    keys = [s[n:].replace(".", "/") for s in subjects]
    if keys != list(map(prefix.__add__, names)) or len(set(keys)) != len(keys):
        return None
    return keys


def task_block(feed: Any, run: NewObjects, tmpl: Any, part: list[tuple[str, Any, int]], v: int,
               ats: list[tuple[str, str]], at_seqs: list[int], gated: bool) -> tuple[int, int]:
    """The block ``part`` of entries of the task template ``tmpl`` added to ``run`` (its objects numbered from
    ``v + 1``) and to ``ats``/``at_seqs`` as the one-by-one path adds them; returns how many, and how many of them
    free capacity (`unfit.frees_capacity` of a new task: the caller keeps the run's count); ``(0, 0)``: the block
    takes the one-by-one path, nothing changed.  ``gated``: a binding, backoff or suspension is held, and every
    task's effective object is asked for (else only an ended task's on its node), as the one-by-one path does."""
    if tmpl.kind != "task" or tmpl.info is None or not tmpl.fast:
        return _NONE
    _, names, jobs, nodes, phases, _ = zip(*map(_second, part))
    keys = _keys(part, _TASK_AT, tmpl.prefix, names)
    if keys is None or not _PHASES.issuperset(phases):
        return _NONE
    if 6 * (max(map(len, names)) + max(map(len, jobs)) + max(map(len, nodes)) + max(map(len, phases))) > (
            feed.settings.max_event_bytes - tmpl.size):
        return _NONE
    run_tasks = run.tasks
    if (not feed.specs["task"].keys().isdisjoint(keys) or not run_tasks.keys().isdisjoint(keys)
            or not feed.cache.objects["task"].keys().isdisjoint(keys)):
        return _NONE
    at = list(zip(repeat("task", len(keys)), keys))
    if not feed.seqs.keys().isdisjoint(at):
        return _NONE
    # (the specs as the one-by-one path sets them: the template's copy, its own fields, the names interned)
    copy, known = tmpl.copy, known_name
    specs: list[Any] = []
    add = specs.append
    for name, job, node, phase in zip(names, jobs, nodes, phases):
        s = copy()
        s.name = name
        s.job = known(job) or one_name(job)
        s.node = known(node) or one_name(node)
        s.phase = known(phase) or one_name(phase)
        add(s)
    infos = build_like.task_infos_like(tmpl.info, specs)
    # the effective objects, where they can differ from the spec (`EffectiveObjects.effective_task`): every task's
    # when gated, else an ended task's on its node; one that differs is converted itself (validated: a refusal
    # leaves the block to the one-by-one path, nothing changed)
    held: list[Any] = specs
    own: dict[str, Any] = {}
    ended = gated or any(p in phases for p in TERMINAL)
    if ended:
        held = list(specs)
        effective = feed.effective.effective_task
        for i, (key, s) in enumerate(zip(keys, specs)):
            if gated or (s.node and s.phase in TERMINAL):
                h = effective(key, s)
                if h is not s:
                    try:
                        infos[i] = build.task_info(h, _NO_CLASSES)
                    except Exception:  # noqa: BLE001 - refused: the one-by-one path refuses it, naming the field
                        return _NONE
                    held[i] = h
                    own[key] = s
    # (nothing can refuse from here: the run's columns, as the one-by-one path appends them)
    count = len(specs)
    versions = range(v + 1, v + count + 1)
    freed = 0
    if own:  # (some held objects are not their specs: each column from the held objects, as the one-by-one path)
        for ver, key, h, info in zip(versions, keys, held, infos):
            if h.job:
                run.touched.append(info.job)
                run.touched_v.append(ver)
                run.touched_task.append(key)
            if h.node:
                run.nodes.append(h.node)
                run.nodes_v.append(ver)
                run.nodes_key.append(key)
                if h.deleting or h.phase in TERMINAL:
                    freed += 1
        run.specs.update(own)
    else:
        if all(jobs):
            run.touched.extend(map(_job_of, infos))
            run.touched_v.extend(versions)
            run.touched_task.extend(keys)
        elif any(jobs):
            run.touched.extend(map(_job_of, compress(infos, jobs)))
            run.touched_v.extend(compress(versions, jobs))
            run.touched_task.extend(compress(keys, jobs))
        if any(nodes):
            placed = [s.node for s in specs]  # (the interned names the one-by-one path appends)
            if all(nodes):
                run.nodes.extend(placed)
                run.nodes_v.extend(versions)
                run.nodes_key.extend(keys)
            else:
                run.nodes.extend(compress(placed, nodes))
                run.nodes_v.extend(compress(versions, nodes))
                run.nodes_key.extend(compress(keys, nodes))
            # (`unfit.frees_capacity` of a new task: deleting, or ended on its node, which none here is: its held
            # object would have dropped its node)
            if tmpl.spec.deleting:
                freed = sum(map(bool, nodes))
    run_tasks.update(zip(keys, held))
    run.task_infos.extend(infos)
    ats.extend(at)
    at_seqs.extend(map(itemgetter(2), part))
    return count, freed


def _job_of(info: Any) -> str:
    return info.job


def job_block(feed: Any, run: NewObjects, tmpl: Any, part: list[tuple[str, Any, int]], v: int,
              ats: list[tuple[str, str]], at_seqs: list[int]) -> int:
    """The block ``part`` of entries of the job template ``tmpl``, as `task_block`."""
    if tmpl.kind != "job" or tmpl.info is None:
        return 0
    names = [e[1] for e in map(_second, part)]
    keys = _keys(part, _JOB_AT, tmpl.prefix, tuple(names))
    if keys is None or 6 * max(map(len, names)) > feed.settings.max_event_bytes - tmpl.size:
        return 0
    run_jobs = run.jobs
    suspended = feed.effective.suspended
    if (not feed.specs["job"].keys().isdisjoint(keys) or not run_jobs.keys().isdisjoint(keys)
            or not feed.cache.objects["job"].keys().isdisjoint(keys) or not feed.pg_status.keys().isdisjoint(keys)
            or tmpl.spec.suspend or not suspended.isdisjoint(keys)):
        return 0
    at = list(zip(repeat("job", len(keys)), keys))
    if not feed.seqs.keys().isdisjoint(at):
        return 0
    copy = tmpl.copy
    specs: list[Any] = []
    add = specs.append
    for name in names:
        j = copy()
        j.name = name
        add(j)
    infos = build_like.job_infos_like(tmpl.info, specs)
    count = len(specs)
    run.touched.extend(keys)
    run.touched_v.extend(range(v + 1, v + count + 1))
    run.touched_task.extend(repeat(None, count))
    run_jobs.update(zip(keys, specs))
    run.job_infos.extend(infos)
    ats.extend(at)
    at_seqs.extend(map(itemgetter(2), part))
    return count
