"""A checkpoint's tasks as templates and columns (format 2): what replicas have in common, given once.

Most of a big cluster's tasks are replicas: the same namespace, requests, labels, priority, ... and only
their name, job, node and phase differ.  Format 1 stores every task's message whole, and a restart decodes
and converts each (`busched.scheduler.restore_bulk`): two thirds of the catch-up's per-task work went to
parsing the same spec again and converting it to the same `TaskInfo` again.  Format 2 stores such a task
as a template (a task spec without those four fields, JSON, given once) and the four fields and the
message's version in columns; the reader decodes and validates each template once and, per task, copies
the template's spec and conversion and sets the four fields (`restore_bulk`).

What an entry stands for is exact: the writer makes a task an entry of a template only when its message is
the canonical encoding of what it decodes to (`busched.bus.messages.encode` of it gives its very bytes,
as every busched publisher writes it), and `materialize` gives those bytes back.  So a reader that hands
an entry to the live path (anything but a plain new task: refused, oversized, known already, ...) hands it
the message the stream held, and the restart builds what a format-1 checkpoint (or a full read) builds.

The checkpoint is untrusted input at rest: the columns are typed and bounded as the messages' fields are
(`Checkpoint` in `busched.scheduler.checkpoint`: strings, versions of `busched.bus.wire.Version`); a
template must decode as a task spec (its bounds and ``__post_init__``, as any task message's) or the
checkpoint is corrupt and not used; an entry's own fields are checked as its message's would be (identity
against the subject, the phase, the size limit), and the template's conversion (`build.task_info`: the
validation `busched apply` makes) stands for every entry's, since it reads no field an entry sets but the
phase and the node (checked, or recomputed, per entry).  Anything an entry fails goes the live path with
its message, which refuses it naming the object and the field.
"""

from __future__ import annotations

from typing import Any

import msgspec

from busched.api import build
from busched.api import objects as o
from busched.api.queue import PriorityClass
from busched.api.task import TaskInfo
from busched.bus import messages as m
from busched.bus import subjects as S

__all__ = ["Template", "TemplateError", "share", "templates_of", "entry_data", "materialize"]

_TASK_SUBJECTS = f"{S.STATE_PREFIX}.task."
_SPEC = msgspec.json.Decoder(o.TaskSpec)
_ENCODE = m.encode
_NO_CLASSES: dict[str, PriorityClass] = {}
_VARYING = {"name": "", "job": "", "node": "", "phase": "Pending"}  # what a template leaves out
# the most an entry's four fields can add to its template's message: each string escaped at most 6 characters to
# one (``\\u0000``), the keys and quotes of the fields a template omits, the version's digits
_FIELDS_BYTES = 64


class TemplateError(ValueError):
    """A template that does not decode as a task spec: the checkpoint is corrupt."""


class Template:
    """A decoded template: its spec (the four varying fields empty), its conversion when the template converts
    (None: it is refused, and every entry of it goes the live path), whether an entry's conversion is a copy of
    it (`fast`: no field the conversion copies per task beyond the label maps), and how many characters an
    entry's four fields may hold in all before its message could exceed ``limit`` (``room``)."""

    __slots__ = ("spec", "info", "fast", "size", "prefix")

    def __init__(self, raw: bytes) -> None:
        try:
            spec = _SPEC.decode(raw)
        except msgspec.DecodeError as e:
            raise TemplateError(f"corrupt: a task template: {e}") from None
        self.spec = spec
        self.size = len(_ENCODE(m.TaskUpsert(task=spec))) + _FIELDS_BYTES  # (the message with the four fields empty)
        self.prefix = f"{spec.namespace}/"
        try:
            self.info: TaskInfo | None = build.task_info(spec, _NO_CLASSES)
        except Exception:  # noqa: BLE001 - refused: each entry is refused by the live path, naming it
            self.info = None
        self.fast = self.info is not None and spec.affinity is None and not (
            spec.tolerations or spec.topology_spread_constraints or spec.host_ports or spec.scheduling_gates
            or spec.images)

    def room(self, limit: int) -> int:
        """How many characters an entry's name, job, node and phase may hold in all for its message to be within
        ``limit`` bytes however they are escaped (beyond it, the message is encoded and measured)."""
        return (limit - self.size) // 6


def templates_of(raw: list[bytes]) -> list[Template]:
    """The checkpoint's templates decoded; `TemplateError` when one is not a task spec."""
    return [Template(t) for t in raw]


def entry_data(templates: list[Template], shared: list[int], data: list[bytes], cols: tuple[list[Any], ...],
               k: int, materialized: bool) -> tuple[list[Any], int]:
    """A slice of a checkpoint's messages (``data``, ``shared`` its entries' templates, 0: none) with each entry
    of a template in its place: its message (``materialized``) or ``(template, name, job, node, phase,
    version)`` for `restore_bulk`; ``k``: the slice's first entry in the columns ``cols``.  Returns the slice
    and the next entry's index."""
    if not any(shared):
        return data, k
    out: list[Any] = list(data)
    names, jobs, nodes, phases, versions = cols
    for i, t in enumerate(shared):
        if t:
            entry: tuple[Any, ...] = (templates[t - 1], names[k], jobs[k], nodes[k], phases[k], versions[k])
            out[i] = materialize(entry) if materialized else entry
            k += 1
    return out, k


def spec_of(entry: tuple[Any, ...]) -> o.TaskSpec:
    """The task spec an entry stands for, as decoding its message builds it (``__post_init__`` included)."""
    tmpl, name, job, node, phase, _ = entry
    return msgspec.structs.replace(tmpl.spec, name=name, job=job, node=node, phase=phase)


def materialize(entry: tuple[Any, ...]) -> bytes:
    """The message an entry stands for: the stream's bytes (the writer checked they are its canonical form)."""
    return _ENCODE(m.TaskUpsert(task=spec_of(entry), version=entry[5]))


def share(items: list[tuple[str, bytes, int]]) -> tuple[list[bytes], list[int], list[bytes], tuple[list[Any], ...]]:
    """The format-2 columns of a checkpoint of ``items`` (``(subject, data, seq)``): ``(templates, shared, data,
    (names, jobs, nodes, phases, versions))``.  A task message is an entry of a template when it decodes to a
    task upsert, encodes back to its very bytes, and at least one other task has the same template; every
    other message is kept whole.  (``shared`` is empty when no message is an entry.)"""
    keys: list[bytes | None] = []
    forms: list[tuple[str, str, str, str, int] | None] = []
    count: dict[bytes, int] = {}
    for subject, data, _ in items:
        key = form = None
        if subject.startswith(_TASK_SUBJECTS):
            try:
                msg = m.decode(data)
            except msgspec.DecodeError:
                msg = None
            if type(msg) is m.TaskUpsert and _ENCODE(msg) == data:
                t = msg.task
                key = msgspec.json.encode(msgspec.structs.replace(t, **_VARYING))
                form = (t.name, t.job, t.node, t.phase, msg.version)
                count[key] = count.get(key, 0) + 1
        keys.append(key)
        forms.append(form)
    index: dict[bytes, int] = {}
    templates: list[bytes] = []
    shared: list[int] = []
    out: list[bytes] = []
    cols: tuple[list[Any], ...] = ([], [], [], [], [])
    for (_, data, _), key, form in zip(items, keys, forms):
        if key is None or form is None or count[key] < 2:
            shared.append(0)
            out.append(data)
            continue
        at = index.get(key)
        if at is None:
            templates.append(key)
            at = index[key] = len(templates)
        shared.append(at)
        out.append(b"")
        for col, v in zip(cols, form):
            col.append(v)
    if not templates:
        shared = []
    return templates, shared, out, cols
