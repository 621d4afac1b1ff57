"""What the scheduler writes, its own readers accept: a bind whose record or decision they would refuse is failed.

A bind carries what the session added to its task's annotations (the devices deviceshare gave it:
``volcano.sh/vgpu-ids-new`` ... , `busched.plugins.deviceshare`). Its readers hold those to bounds: the
binding record's ``annotations`` (`busched.bus.wire.BindAnnotations`: at most 32 keys, label-key keys, values
of at most 4,096 characters) and the record's size (``SchedulerSettings.max_event_bytes``, less what a later
record of the attempt, an evicting one, adds with the same annotations: its state and stop, a longer version,
the agent's boot; not its reason, which `fit_reason` cuts to what fits, as it does every record's) for the
state feed of every scheduler (this one after a restart, a standby) and `busched get`; the task's annotations
with the bind's merged in (at most 1,024 keys, 256 KiB of keys and values: `busched.api.limits`) for the agent
that decodes the bind decision and for the scheduler's own cache, which validates the task it holds as bound.
A vGPU assignment for a task taking very many cards, or cards whose register names are long, passes 4,096
characters; written, such a record would be refused by every reader but the scheduler that wrote it (which
knows its own echo by its bytes): the task stuck, or held differently by different readers.

So a bind whose record or decision would not pass is never written.  It fails as a failed bind does
(Volcano's ``Bind`` failing at the API server: ``taskUnschedulable`` with "failed to bind to node ...",
the devices' ``PreBindRollBack``, ``resyncTask``): `refuse_unwritable` releases it
(`BindingTable.release`, kind ``invalid``: the task back to Pending with a backoff, kept off that node for
a while, Failed after ``max_attempts`` such failures in a row, its released record naming why), counts
it in ``busched_writes_refused_total{message="binding", field=...}``, logs it and puts it in the cycle's
report, from which a ``FailedScheduling`` event naming the task, the node and the field is made
(`busched.scheduler.sched_events`).  No record and no decision of it is written, so no agent ever sees
it; its devices are free at the next session, which accounts only the tasks bound on each node.

Where: here, at the write path (`BindingTable.write_ahead`, which every bind goes through, after the
session and while it streams binds), not in the deviceshare plugin.  Only here is everything known that
the readers check: every plugin's annotations as they finally are (a deallocation drops keys), merged
with the task's own, and the record's encoded size.  It is also where Volcano fails such a bind: its
device ``Allocate`` fails an allocation only when the cards do not fit (or the node lock is held), never
for the length of what it returns; annotations too large are refused by the API server when the bind is
written, and the bind fails.  Refusing the node in the plugin's predicate would make a decision Volcano
does not make (and busched's allocate events cannot fail an allocation: a `DeviceError` there is only
logged).  The cost for a bind without annotations is one truth test of an empty dict (the e2e bench's
binds have none: 0.05 ms for its 5,000); with annotations, a few ``len`` over at most 32 small strings,
and an encoding only when they could make the record too large.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from busched.api import limits
from busched.bus import messages as m
from busched.bus.wire import MAX_BIND_ANNOTATION_VALUE, MAX_BIND_ANNOTATIONS, MAX_BOOT

if TYPE_CHECKING:
    from busched.scheduler.records import Binding, CycleReport

__all__ = ["LATER", "MIN_EVENT_BYTES", "bind_problem", "fit_reason", "refuse_unwritable"]

log = logging.getLogger("busched.scheduler")

# JSON writes a character in at most 6 bytes (``\\u001f``); a record's fields but the strings `may_pass` counts
# (its name, node, boot, writer, reason and annotations) take less than this (its shard, 253 characters, 1,518 bytes
# at most, and ~300 for the others); `bind_problem`, which counts only the name and annotations, uses
# MIN_EVENT_BYTES
_RECORD_OVERHEAD = 2048
# what a later record of an attempt (an evicting one: released, failed and done records carry no annotations) adds
# to its binding record, but its reason (`fit_reason`): its state and stop, a version up to 2**63 - 1, a
# decided_at written longer, the agent's boot (6 bytes a character in JSON)
LATER = (len('"state":"evicting","stop":"restart","version":9223372036854775807,"boot":"",') + 24
         + 6 * MAX_BOOT)
# the widest binding record of a bind adding annotations, but for its task's name and its annotations (one of one
# character, no value; a task of one character in a namespace of one): its node's and its shard's names at their
# bound (253 characters, `busched.api.build`, `busched.bus.wire.ShardName`) of 6 bytes each in JSON, its version,
# attempt and epoch at 2**63 - 1, its backoff and decided_at floats of the longest form, its writer a scheduler's
# boot (8 hex digits, `busched.scheduler.loop`)
_FLOAT = -2.2250738585072014e-308
_WIDEST = m.BindingRecord(version=2**63 - 1, namespace="t", name="a", attempt=2**63 - 1, node="\x01" * 253,
                          backoff=_FLOAT, decided_at=_FLOAT, writer="0" * 8, epoch=2**63 - 1, shard="\x01" * 253,
                          annotations={"a": ""})
# the smallest ``max_event_bytes`` at which a bind adding annotations is written whatever its node and shard (with
# LATER, `bind_problem`): `busched run --max-event-bytes` refuses a smaller one (below ~1.8 KB every bind adding
# annotations would fail, its task Failed after max_attempts).  At or above it, only the task's name and the
# annotations themselves can make a bind's record too large.
MIN_EVENT_BYTES = len(m.encode(_WIDEST)) + LATER


def bind_problem(key: str, annotations: dict[str, str], spec_annotations: dict[str, str], max_event_bytes: int,
                 record_size: Callable[[], int]) -> tuple[str, str] | None:
    """Why a bind of task ``key`` adding ``annotations`` to the task's (``spec_annotations``) cannot be written:
    (the field, what breaks its bound), or None when its readers accept it.  ``record_size``: the binding
    record's encoded size, called only when the annotations could make it larger than ``max_event_bytes``."""
    n = len(annotations)
    if n > MAX_BIND_ANNOTATIONS:
        return "annotations", f"{n} keys, more than the {MAX_BIND_ANNOTATIONS} a bind may add"
    chars = 0
    for k, v in annotations.items():
        if len(k) > limits.MAX_LABEL_KEY:
            return "annotations", f"a key of {len(k)} characters, more than {limits.MAX_LABEL_KEY}"
        if len(v) > MAX_BIND_ANNOTATION_VALUE:
            return f"annotations.{k}", f"{len(v)} characters, more than {MAX_BIND_ANNOTATION_VALUE}"
        chars += len(k) + len(v)
    if spec_annotations:
        merged = {**spec_annotations, **annotations}
        if len(merged) > limits.MAX_ITEMS:
            return "task.annotations", (f"{len(merged)} keys with the task's own, more than {limits.MAX_ITEMS}")
        size = sum(map(len, merged)) + sum(map(len, merged.values()))
        if size > limits.MAX_ANNOTATIONS_BYTES:
            return "task.annotations", (f"{size} characters in all with the task's own, more than "
                                        f"{limits.MAX_ANNOTATIONS_BYTES}")
    # (a later record keeps its annotations and may add LATER bytes; its reason is cut to what fits.  The record is
    # measured unless it cannot pass: its widest but for its name and annotations, with LATER (MIN_EVENT_BYTES), and
    # its name and annotations at 6 bytes a character, 8 more an annotation for its quotes, colon and comma)
    if 6 * (chars + len(key)) + 8 * n + MIN_EVENT_BYTES > max_event_bytes:
        size = record_size()
        if size + LATER > max_event_bytes:
            return "size", (f"a binding record of {size} bytes, with the {LATER} a later record of the attempt may "
                            f"add, more than the state stream's limit, {max_event_bytes}")
    return None


def fit_reason(rec: m.BindingRecord, limit: int) -> m.BindingRecord:
    """``rec``, or, when its encoding is longer than ``limit`` bytes, ``rec`` with its reason cut (to its first
    characters and "...") to the longest that keeps it within ``limit``; with no reason when none does.  A reason
    is informational (an agent's, passed on, or the scheduler's own): cutting it keeps the record one its readers
    take, whatever the stream's limit (`busched run --max-event-bytes`)."""
    if len(m.encode(rec)) <= limit or not rec.reason:
        return rec
    reason = rec.reason
    lo, hi = -1, len(reason) - 1  # the longest prefix that fits, -1 for none ("...": the prefix of 0 characters)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(m.encode(msgspec.structs.replace(rec, reason=reason[:mid] + "..."))) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return msgspec.structs.replace(rec, reason=reason[:lo] + "..." if lo >= 0 else "")


def may_pass(key: str, b: Binding, reason: str, writer: str, limit: int) -> bool:
    """Whether the record of ``b`` with ``reason`` could be longer than ``limit`` bytes (6 bytes a character):
    only then is it encoded to be measured (`fit_reason`)."""
    chars = len(reason) + len(key) + len(b.node) + len(b.boot) + len(writer)
    if b.annotations:
        chars += sum(map(len, b.annotations)) + sum(map(len, b.annotations.values()))
    return 6 * chars + _RECORD_OVERHEAD > limit


def _record_size(table: Any, key: str, b: Binding) -> Callable[[], int]:
    return lambda: len(m.encode(table.binding_record(key, b)))


def refuse_unwritable(table: Any, todo: list[tuple[str, Binding]], report: CycleReport) -> list[tuple[str, Binding]]:
    """``todo`` (new attempts of `BindingTable.take_binds`, not yet recorded) without the binds whose record or
    decision its readers would refuse (`bind_problem`); those are failed as the module's docstring says.
    ``todo`` itself when none is (always when none adds annotations)."""
    bad: list[tuple[str, Binding, str, str]] | None = None
    specs = table.task_specs
    limit = table.settings.max_event_bytes
    for key, b in todo:
        if b.annotations:
            spec = specs.get(key)
            found = bind_problem(key, b.annotations, spec.annotations if spec is not None else {}, limit,
                                 _record_size(table, key, b))
            if found is not None:
                if bad is None:
                    bad = []
                bad.append((key, b, *found))
    if bad is None:
        return todo
    refused = set()
    for key, b, field, why in bad:
        refused.add(key)  # (not written either way)
        if table.bindings.get(key) is not b:
            continue  # an attempt the table no longer holds: nothing of it to fail, count or report
        table.metrics.writes_refused.labels("binding", field if field.startswith("task.")
                                            else field.split(".", 1)[0]).inc()
        log.warning("bind %s -> %s (attempt %d) not written: its %s would be refused by its readers (%s); the "
                    "task goes back to Pending", key, b.node, b.attempt, field, why)
        report.failed_binds.append((key, b.node, f"{field}: {why}"))
        report.released.append((key, "invalid"))  # (the cycle's log line and record count it)
        table.release(key, f"bind to {b.node} not written: {field}: {why}", "invalid", exclude=True, backoff=True)
    return [(key, b) for key, b in todo if key not in refused]
