"""A checkpoint's tasks and jobs as templates and columns (format 2): what replicas have in common, given once.

Most of a big cluster's tasks are replicas: the same namespace, requests, labels, priority, ... and only
their name, job, node and phase differ; most jobs differ only in their name.  Format 1 stores every
message whole, and a restart decodes and converts each (`busched.scheduler.restore_bulk`): most of the
catch-up's per-object work went to parsing the same spec again and converting it to the same `TaskInfo`
or `JobInfo` again.  Format 2 stores such a message as a template (the message with those fields empty,
JSON, given once) and the fields and the message's version in columns; the reader decodes and validates
each template once and, per object, copies the template's spec and conversion and sets its own fields.

What an entry stands for is exact: the writer makes a message an entry of a template only when it is the
canonical encoding of what it decodes to (`busched.bus.messages.encode` of it gives its very bytes, as
every busched publisher writes it), and `materialize` gives those bytes back.  So a reader that hands an
entry to the live path (anything but a plain new object: refused, oversized, known already, ...) hands it
the message the stream held, and the restart builds what a format-1 checkpoint (or a full read) builds.

The checkpoint is untrusted input at rest: the columns are typed and bounded as the messages' fields are
(`Checkpoint` in `busched.scheduler.checkpoint`: strings, versions of `busched.bus.wire.Version`); a
template must decode as a task or job message (its bounds and ``__post_init__``, as any message's) or the
checkpoint is corrupt and not used; an entry's own fields are checked as its message's would be (identity
against the subject, a task's phase, the size limit), and the template's conversion (`build.task_info`,
`build.job_info`: the validation `busched apply` makes) stands for every entry's, since it reads no field
an entry sets but a task's phase and node (checked, or recomputed, per entry).  Anything an entry fails
goes the live path with its message, which refuses it naming the object and the field.
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec

from busched.api import build
from busched.api.queue import PriorityClass
from busched.bus import messages as m
from busched.bus import subjects as S

__all__ = ["Template", "TemplateError", "share", "templates_of", "entry_data", "materialize", "LIMIT"]

_TASK_SUBJECTS = f"{S.STATE_PREFIX}.task."
_JOB_SUBJECTS = f"{S.STATE_PREFIX}.job."
_ENCODE = m.encode
_NO_CLASSES: dict[str, PriorityClass] = {}
# the most an entry's fields can add to its template's message beyond six bytes a character (a string escaped at
# most 6 characters to one, ``\\u0000``): the keys and quotes of the fields a template omits, the version's digits
_FIELDS_BYTES = 64
# the state messages' size limit (`SchedulerSettings.max_event_bytes`'s default; the scheduler passes its own): a
# message over it is never a template's entry, and a template over it makes the checkpoint corrupt, undecoded
LIMIT = 256 * 1024


class TemplateError(ValueError):
    """A template that does not decode as a task or job message: the checkpoint is corrupt."""


class Template:
    """A decoded template: its ``kind`` ("task" or "job"), its spec (the varying fields empty: a task's name, job,
    node and phase, a job's name), its conversion when the template converts (``info``; None: it is refused, and
    every entry of it goes the live path), whether an entry's conversion is a copy of it (``fast``: for a task,
    no field the conversion builds per task beyond the label maps), the size of its message with ``_FIELDS_BYTES``
    (``size``: an entry whose strings hold more than ``(limit - size) // 6`` characters in all is measured), and
    the key prefix of its entries (``prefix``: the namespace and a slash), ``copy``, the spec's copy, and ``budget``
    (shared by a checkpoint's templates, or None: unbounded): ``[bytes]`` its entries that fail their own checks
    may still be rebuilt as messages for the live path (`busched.scheduler.restore_bulk`)."""

    __slots__ = ("kind", "spec", "info", "fast", "size", "prefix", "copy", "raw", "budget")

    def __init__(self, raw: bytes, limit: int = LIMIT, budget: list[int] | None = None) -> None:
        self.budget = budget
        # (longer than the limit, every entry's message is longer still: the live path would refuse each by its
        # length, undecoded, and the writer never makes one; decoded, a few compressed KB could stand for a template
        # of many MB, decoded and converted with no bound)
        if len(raw) > limit:
            raise TemplateError(f"corrupt: a template of {len(raw)} bytes, over the limit of {limit}")
        try:
            msg = m.decode(raw)
        except msgspec.DecodeError as e:
            raise TemplateError(f"corrupt: a template: {e}") from None
        self.info: Any = None
        self.raw = raw
        spec: Any
        if type(msg) is m.TaskUpsert:
            self.kind, spec = "task", msg.task
            try:
                self.info = build.task_info(spec, _NO_CLASSES)
            except Exception:  # noqa: BLE001 - refused: each entry is refused by the live path, naming it
                pass
            self.fast = self.info is not None and spec.affinity is None and not (
                spec.tolerations or spec.topology_spread_constraints or spec.host_ports or spec.scheduling_gates
                or spec.images)
            self.size = len(_ENCODE(m.TaskUpsert(task=spec))) + _FIELDS_BYTES
        elif type(msg) is m.JobUpsert:
            self.kind, spec = "job", msg.job
            try:
                self.info = build.job_info(spec, _NO_CLASSES)
            except Exception:  # noqa: BLE001 - as a task's
                pass
            self.fast = self.info is not None
            self.size = len(_ENCODE(m.JobUpsert(job=spec))) + _FIELDS_BYTES
        else:
            raise TemplateError(f"corrupt: a template of a {type(msg).__name__}, not a task's or a job's")
        self.spec = spec
        self.copy = spec.__copy__  # (a shallow copy of the spec, without `copy.copy`'s dispatch: one per entry)
        self.prefix = f"{spec.namespace}/"


def templates_of(raw: list[bytes], limit: int = LIMIT, budget: list[int] | None = None) -> list[Template]:
    """The checkpoint's templates decoded; `TemplateError` when one is not a task's or a job's, or is longer than
    ``limit`` (the state messages' size limit); ``budget``: their shared rebuild budget (`Template`)."""
    return [Template(t, limit, budget) for t in raw]


def entry_data(templates: list[Template], shared: list[int], data: list[bytes], cols: tuple[list[Any], ...],
               k: int, materialized: bool) -> tuple[list[Any], int]:
    """A slice of a checkpoint's messages (``data``, ``shared`` its entries' templates, 0: none) with each entry
    of a template in its place: its message (``materialized``) or ``(template, name, job, node, phase,
    version)`` for `restore_bulk`; ``k``: the slice's first entry in the columns ``cols``.  Returns the slice
    and the next entry's index."""
    if not any(shared):
        return data, k
    names, jobs, nodes, phases, versions = cols
    if not materialized and all(shared):  # (every one an entry, as most slices: the tuples zipped by C loops)
        j = k + len(shared)
        got = zip(map([None, *templates].__getitem__, shared), names[k:j], jobs[k:j], nodes[k:j], phases[k:j],
                  versions[k:j])
        return list(got), j
    out: list[Any] = list(data)
    for i, t in enumerate(shared):
        if t:
            entry: tuple[Any, ...] = (templates[t - 1], names[k], jobs[k], nodes[k], phases[k], versions[k])
            out[i] = materialize(entry) if materialized else entry
            k += 1
    return out, k


def materialize(entry: tuple[Any, ...]) -> bytes:
    """The message an entry stands for: the stream's bytes (the writer checked they are its canonical form).  A
    job's entry reads its name and version only."""
    tmpl, name, job, node, phase, version = entry
    if tmpl.kind == "job":
        return _ENCODE(m.JobUpsert(job=msgspec.structs.replace(tmpl.spec, name=name), version=version))
    spec = msgspec.structs.replace(tmpl.spec, name=name, job=job, node=node, phase=phase)
    return _ENCODE(m.TaskUpsert(task=spec, version=version))


def _form(subject: str, data: Any, limit: int) -> tuple[bytes, tuple[Any, ...]] | None:
    """A message's template (its message with the varying fields empty, version 0) and its own fields, when it is
    a task or job upsert in its canonical encoding within ``limit`` bytes, or an entry of a checkpoint read (its
    template's and its own: what it stands for is unchanged); else None (kept whole)."""
    if type(data) is tuple:
        return data[0].raw, data[1:]
    if len(data) > limit:  # (refused by its length, undecoded, as the live path does: its template could be too)
        return None
    task = subject.startswith(_TASK_SUBJECTS)
    if not task and not subject.startswith(_JOB_SUBJECTS):
        return None
    try:
        msg = m.decode(data)
    except msgspec.DecodeError:
        return None
    # (the template from a shallow copy with those fields emptied: as `msgspec.structs.replace` builds it, without
    # its ``__post_init__``, which changes nothing the encoding shows)
    if type(msg) is m.TaskUpsert and task:
        t = msg.task
        if _ENCODE(msg) != data:
            return None
        fields = (t.name, t.job, t.node, t.phase, msg.version)
        t = copy.copy(t)
        t.name = t.job = t.node = ""
        t.phase = "Pending"
        msg.task, msg.version = t, 0
        return _ENCODE(msg), fields
    if type(msg) is m.JobUpsert and not task:
        j = msg.job
        if _ENCODE(msg) != data:
            return None
        fields = (j.name, "", "", "", msg.version)
        j = copy.copy(j)
        j.name = ""
        msg.job, msg.version = j, 0
        return _ENCODE(msg), fields
    return None


def share(items: list[tuple[str, Any, int]], limit: int = LIMIT
          ) -> tuple[list[bytes], list[int], list[bytes], tuple[list[Any], ...]]:
    """The format-2 columns of a checkpoint of ``items`` (``(subject, data, seq)``): ``(templates, shared, data,
    (names, jobs, nodes, phases, versions))``.  A task or job message is an entry of a template when it decodes
    to an upsert of its kind, encodes back to its very bytes, and at least one other has the same template;
    every other message is kept whole.  An entry of a checkpoint read (a tuple, `entry_data`) stays an entry of its
    template, or is kept whole when none other shares it; a message over ``limit`` bytes is kept whole.  (``shared``
    is empty when no message is an entry.)"""
    forms = [_form(subject, data, limit) for subject, data, _ in items]
    count: dict[bytes, int] = {}
    for f in forms:
        if f is not None:
            count[f[0]] = count.get(f[0], 0) + 1
    index: dict[bytes, int] = {}
    templates: list[bytes] = []
    shared: list[int] = []
    out: list[bytes] = []
    cols: tuple[list[Any], ...] = ([], [], [], [], [])
    for (_, data, _), f in zip(items, forms):
        if f is None or count[f[0]] < 2:
            shared.append(0)
            out.append(data if type(data) is not tuple else materialize(data))
            continue
        key, fields = f
        at = index.get(key)
        if at is None:
            templates.append(key)
            at = index[key] = len(templates)
        shared.append(at)
        out.append(b"")
        for col, v in zip(cols, fields):
            col.append(v)
    if not templates:
        shared = []
    return templates, shared, out, cols
