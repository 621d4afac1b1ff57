"""Publish a cluster file's objects as state events (`busched apply` / `busched delete`).

Creation times (docs/bus.md, "Creation times"): a queue, job or task applied without ``created``
gets the one it already has on the stream, or else the time of this apply (RFC 3339 UTC), so that
it is the submission time, in the spec on the stream, and the same after updates and restarts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import msgspec

from busched.api import build
from busched.api.objects import DEFAULT_QUEUE, ClusterSpec
from busched.api.timestamp import Timestamp
from busched.bus import edit
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.client import Bus
from busched.bus.wire import MAX_STATE_MESSAGE

__all__ = ["load_cluster", "without_status", "load_cluster_file", "check_cluster", "cluster_events", "apply_cluster",
           "ClusterFileError",
           "APPLY_ORDER", "CREATED_KINDS", "rfc3339", "with_created", "existing_created", "missing_references",
           "missing_on_bus", "describe_events", "jobs_in_closed_queues"]

APPLY_ORDER = S.APPLY_ORDER  # the publishing order (busched.bus.subjects)


# The kinds whose creation time orders something (Volcano: jobs and queues by priority, then creation
# time, then uid; a job's tasks likewise), as (kind, ClusterSpec attribute).
CREATED_KINDS = (("queue", "queues"), ("job", "jobs"), ("task", "tasks"))


class ClusterFileError(ValueError):
    pass


def load_cluster(doc: Any, where: str = "cluster") -> ClusterSpec:
    """A cluster block, or a whole scenario file with a ``cluster:`` key."""
    if isinstance(doc, dict) and "cluster" in doc:
        doc, where = doc["cluster"] or {}, f"{where}: cluster"
    if doc is None:
        doc = {}
    try:
        return msgspec.convert(without_status(doc), ClusterSpec)
    except msgspec.ValidationError as e:
        text = str(e)
        if " - at `$" in text:
            msg, _, path = text.partition(" - at `$")
            text = f"{path.rstrip('`').lstrip('.')}: {msg}"
        raise ClusterFileError(f"{where}: {text}") from None


def without_status(doc: Any) -> Any:
    """The cluster block with each object's ``status`` mapping dropped: the live state `busched get -o yaml`
    prints beside the spec, which `apply` ignores as ``kubectl apply`` does.  Only here: the bus's messages
    stay strict, and a task's ``status`` string (a Volcano task status name in its spec) is kept."""
    if not isinstance(doc, dict):
        return doc
    out = dict(doc)
    for attr, items in doc.items():
        if isinstance(items, list) and any(isinstance(o, dict) and isinstance(o.get("status"), dict) for o in items):
            out[attr] = [{k: v for k, v in o.items() if k != "status"}
                         if isinstance(o, dict) and isinstance(o.get("status"), dict) else o for o in items]
    return out


def load_cluster_file(path: str | Path, text: bytes | None = None) -> ClusterSpec:
    try:
        data = text if text is not None else Path(path).read_bytes()
    except OSError as e:
        raise ClusterFileError(f"{path}: {e.strerror}") from None
    try:
        doc = msgspec.yaml.decode(data)
    except msgspec.DecodeError as e:
        raise ClusterFileError(f"{path}: not valid YAML: {e}") from None
    except RecursionError:
        raise ClusterFileError(f"{path}: nested too deeply") from None
    return load_cluster(doc, str(path))


_CREATED_ROOM = 64  # ``"created":"2026-03-01T10:30:00.123456Z",`` at most


def check_cluster(cluster: ClusterSpec, where: str = "cluster") -> None:
    """Every object as the scheduler will check it (`busched.api.build.validate`); raises
    `ClusterFileError` with the first refusal, so that a file with one bad object publishes none."""
    for kind, attr in APPLY_ORDER:
        for spec in getattr(cluster, attr):
            try:
                build.validate(kind, spec)
            except build.SpecError as e:
                raise ClusterFileError(f"{where}: {e}") from None
            # what it publishes must be a message the scheduler takes: a valid spec can still be larger (its
            # annotations are bounded to 256 KiB, its lists to 1,024 items of 1,024 characters); the version
            # and the creation time `with_created` may add are counted at their widest
            size = len(m.encode(m.upsert(kind, spec, 2**63 - 1))) + _CREATED_ROOM
            if size > MAX_STATE_MESSAGE:
                raise ClusterFileError(f"{where}: {kind} {m.spec_key(spec)}: its message would be {size} bytes, "
                                       f"more than the {MAX_STATE_MESSAGE} a scheduler takes")


def cluster_events(cluster: ClusterSpec, *, delete: bool = False,
                   version: int | None = None) -> list[tuple[str, m.Msg]]:
    """(subject, message) for every object, upserts in `APPLY_ORDER`, deletes in reverse."""
    v = version if version is not None else time.time_ns()
    out: list[tuple[str, m.Msg]] = []
    order = reversed(APPLY_ORDER) if delete else APPLY_ORDER
    for kind, attr in order:
        for spec in getattr(cluster, attr):
            msg = m.delete(kind, spec, v) if delete else m.upsert(kind, spec, v)
            out.append((S.state_subject(kind, m.spec_key(spec)), msg))
    return out


def rfc3339(t: float) -> str:
    """Epoch seconds as RFC 3339 UTC, to the microsecond: ``2026-03-01T10:30:00.123456Z``."""
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def with_created(cluster: ClusterSpec, now: float, kept: Mapping[str, Timestamp] | None = None) -> ClusterSpec:
    """The cluster with a creation time on every queue, job and task that has none: the one it already
    has (``kept``: state subject -> ``created``, see `existing_created`), else ``now``."""
    kept = kept or {}
    stamp = rfc3339(now)
    changes: dict[str, list[Any]] = {}
    for kind, attr in CREATED_KINDS:
        specs = getattr(cluster, attr)
        if any(s.created is None for s in specs):
            changes[attr] = [s if s.created is not None else
                             msgspec.structs.replace(s, created=kept.get(S.state_subject(kind, m.spec_key(s)), stamp))
                             for s in specs]
    return msgspec.structs.replace(cluster, **changes) if changes else cluster


async def existing_created(bus: Bus, cluster: ClusterSpec, *, concurrency: int = 64) -> dict[str, Timestamp]:
    """State subject -> ``created`` of each queue, job and task of ``cluster`` that has none and whose
    last message on the stream is an upsert that has one (one direct get per such object)."""
    wanted = [(kind, S.state_subject(kind, m.spec_key(s))) for kind, attr in CREATED_KINDS
              for s in getattr(cluster, attr) if s.created is None]
    out: dict[str, Timestamp] = {}
    gate = asyncio.Semaphore(concurrency)

    async def read(kind: str, subj: str) -> None:
        async with gate:
            last = await bus.last_state(subj)
        if last is None:
            return
        try:
            msg = m.decode(last[1])
        except msgspec.DecodeError:
            return  # not a spec we can read: the object gets a new creation time
        spec = getattr(msg, m.SPEC_FIELD[kind], None) if type(msg) is m.UPSERTS[kind] else None
        if spec is not None and spec.created is not None:
            out[subj] = spec.created

    await asyncio.gather(*(read(kind, subj) for kind, subj in wanted))
    return out


async def apply_cluster(bus: Bus, cluster: ClusterSpec, *, delete: bool = False,
                        now: float | None = None) -> tuple[int, list[str]]:
    """Publish every object; returns (count published, errors).  Upserts are checked first
    (`check_cluster`: raises `ClusterFileError`, nothing published), and a queue, job or task without
    ``created`` gets the one it has on the stream, or else ``now`` (default: the wall clock)."""
    if not delete:
        check_cluster(cluster)
    events = cluster_events(cluster, delete=delete)
    if not events:
        return 0, []
    await bus.ensure_streams()
    if not delete:
        cluster = with_created(cluster, time.time() if now is None else now, await existing_created(bus, cluster))
        events = cluster_events(cluster)
    acks = await bus.publish_all((subj, msg, None) for subj, msg in events)
    errors = [f"{subj}: {a.error}" for (subj, _), a in zip(events, acks) if not a.ok]
    return len(events) - len(errors), errors


def missing_references(cluster: ClusterSpec, *, also: ClusterSpec | None = None) -> list[tuple[str, str, str, str]]:
    """``(kind, key, missing kind, missing key)`` for each job whose queue, and each task whose job, is in
    neither ``cluster`` nor ``also`` (e.g. the other files of the same apply); sorted, one per referrer.
    The ``default`` queue is always there (the scheduler's built-in one, `busched.api.objects.DEFAULT_QUEUE`)."""
    have = {("queue", q.name) for c in (cluster, also) if c is not None for q in c.queues}
    have.add(("queue", DEFAULT_QUEUE))
    have |= {("job", m.spec_key(j)) for c in (cluster, also) if c is not None for j in c.jobs}
    out = [("job", m.spec_key(j), "queue", j.queue) for j in cluster.jobs if j.queue and ("queue", j.queue) not in have]
    out += [("task", m.spec_key(t), "job", f"{t.namespace}/{t.job}") for t in cluster.tasks
            if t.job and ("job", f"{t.namespace}/{t.job}") not in have]
    return sorted(out)


async def missing_on_bus(bus: Bus, refs: list[tuple[str, str, str, str]], *,
                         concurrency: int = 64) -> list[tuple[str, str, str, str]]:
    """Of `missing_references`' answer, those whose target is not on the state stream either: its subject has
    no message, or its last one is a delete (one direct get per distinct target; unreadable counts as there)."""
    targets = sorted({(kind, key) for _, _, kind, key in refs})
    gate = asyncio.Semaphore(concurrency)
    absent: set[tuple[str, str]] = set()

    async def read(kind: str, key: str) -> None:
        async with gate:
            last = await bus.last_state(S.state_subject(kind, key))
        if last is None:
            absent.add((kind, key))
            return
        try:
            msg = m.decode(last[1])
        except msgspec.DecodeError:
            return
        if type(msg) is m.DELETES[kind]:
            absent.add((kind, key))

    await asyncio.gather(*(read(kind, key) for kind, key in targets))
    return [r for r in refs if (r[2], r[3]) in absent]


async def jobs_in_closed_queues(bus: Bus, cluster: ClusterSpec, *,
                                also: ClusterSpec | None = None) -> list[tuple[str, str, str]]:
    """``(job, queue, state)`` for each job of ``cluster`` whose queue is not Open, as the files (``cluster``
    and ``also``) say, else the stream (one direct get per such queue).  Volcano's admission refuses to
    create a job in such a queue; `busched apply` warns: the job waits, none of its tasks is placed."""
    in_files = {q.name: q.state for c in (cluster, also) if c is not None for q in c.queues}
    asked = sorted({j.queue for j in cluster.jobs if j.queue and j.queue not in in_files})
    states = dict(in_files)
    for name in asked:
        queue, _ = await edit.read_object(bus, "queue", name)
        if queue is not None:
            states[name] = queue.state
    return [(m.spec_key(j), j.queue, states[j.queue]) for j in cluster.jobs
            if states.get(j.queue, "Open") != "Open"]


def describe_events(cluster: ClusterSpec, *, delete: bool = False) -> list[str]:
    """What `apply_cluster` would publish, one line per object in publishing order: ``upsert job demo/train
    -> <subject>`` (without the creation times it adds)."""
    out = []
    order = reversed(APPLY_ORDER) if delete else APPLY_ORDER
    for kind, attr in order:
        for spec in getattr(cluster, attr):
            out.append(f"{'delete' if delete else 'upsert'} {kind} {m.spec_key(spec)} -> "
                       f"{S.state_subject(kind, m.spec_key(spec))}")
    return out
