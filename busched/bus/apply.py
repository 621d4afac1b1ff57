"""Publish a cluster file's objects as state events (`busched apply` / `busched delete`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgspec

from busched.api.objects import ClusterSpec
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.client import Bus
from busched.cache import build

__all__ = ["load_cluster", "load_cluster_file", "check_cluster", "cluster_events", "apply_cluster", "ClusterFileError",
           "APPLY_ORDER"]

# The order objects are published in: what others refer to first, a gang's podgroup after its tasks.
APPLY_ORDER = (("priorityClass", "priority_classes"), ("queue", "queues"), ("hyperNode", "hyper_nodes"),
               ("resourceQuota", "resource_quotas"), ("node", "nodes"), ("task", "tasks"), ("job", "jobs"))


class ClusterFileError(ValueError):
    pass


def load_cluster(doc: Any, where: str = "cluster") -> ClusterSpec:
    """A cluster block, or a whole scenario file with a ``cluster:`` key."""
    if isinstance(doc, dict) and "cluster" in doc:
        doc, where = doc["cluster"] or {}, f"{where}: cluster"
    if doc is None:
        doc = {}
    try:
        return msgspec.convert(doc, ClusterSpec)
    except msgspec.ValidationError as e:
        text = str(e)
        if " - at `$" in text:
            msg, _, path = text.partition(" - at `$")
            text = f"{path.rstrip('`').lstrip('.')}: {msg}"
        raise ClusterFileError(f"{where}: {text}") from None


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


def check_cluster(cluster: ClusterSpec, where: str = "cluster") -> None:
    """Every object as the scheduler will check it (`busched.cache.build.validate`); raises
    `ClusterFileError` with the first refusal, so that a file with one bad object publishes none."""
    for kind, attr in APPLY_ORDER:
        for spec in getattr(cluster, attr):
            try:
                build.validate(kind, spec)
            except build.SpecError as e:
                raise ClusterFileError(f"{where}: {e}") from None


def _key(spec: Any) -> str:
    ns = getattr(spec, "namespace", None)
    return f"{ns}/{spec.name}" if ns is not None else spec.name


def cluster_events(cluster: ClusterSpec, *, delete: bool = False,
                   version: int | None = None) -> list[tuple[str, m.Msg]]:
    """(subject, message) for every object, upserts in `APPLY_ORDER`, deletes in reverse."""
    v = version if version is not None else time.time_ns()
    out: list[tuple[str, m.Msg]] = []
    order = reversed(APPLY_ORDER) if delete else APPLY_ORDER
    for kind, attr in order:
        for spec in getattr(cluster, attr):
            msg = m.delete(kind, spec, v) if delete else m.upsert(kind, spec, v)
            out.append((S.state_subject(kind, _key(spec)), msg))
    return out


async def apply_cluster(bus: Bus, cluster: ClusterSpec, *, delete: bool = False) -> tuple[int, list[str]]:
    """Publish every object; returns (count published, errors).  Upserts are checked first
    (`check_cluster`: raises `ClusterFileError`, nothing published)."""
    if not delete:
        check_cluster(cluster)
    events = cluster_events(cluster, delete=delete)
    if not events:
        return 0, []
    await bus.ensure_streams()
    acks = await bus.publish_all((subj, msg, None) for subj, msg in events)
    errors = [f"{subj}: {a.error}" for (subj, _), a in zip(events, acks) if not a.ok]
    return len(events) - len(errors), errors
