"""What `busched get -o json|yaml` prints, and the wide table's columns.

An object prints as Kubernetes prints one: its spec as it was applied (what the scheduler holds from
the state stream, creation time included), with the scheduler's live view of it under ``status`` (the
`busched get` row less the fields that repeat the spec).  A listing is a cluster file, ``{"tasks":
[...]}``, so ``busched apply -f`` takes it back: `busched.bus.apply.without_status` drops the
``status`` mappings there, as ``kubectl apply`` ignores an object's status.  A task's spec may itself
carry a Volcano task status name under ``status`` (scenario files do); the printed status mapping
takes its place, so such a task applies back without it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgspec

from busched.api.quantity import binary_units
from busched.api.timestamp import TimeError, parse_time

__all__ = ["SPEC_KEYS", "key_of", "as_object", "document", "encode", "age", "WIDE"]

# the row's fields that repeat the spec (and are printed there, not under status)
SPEC_KEYS = {
    "tasks": frozenset({"namespace", "name", "job", "requests"}),
    "nodes": frozenset({"name", "allocatable", "labels"}),
    "jobs": frozenset({"namespace", "name", "queue", "minMember"}),
    "queues": frozenset({"name", "weight", "state", "capability"}),
}


def key_of(kind: str, row: dict[str, Any]) -> str:
    """The name `busched get KIND NAME` takes: ``ns/name`` for jobs and tasks."""
    return f"{row['namespace']}/{row['name']}" if kind in ("tasks", "jobs") else str(row["name"])


def as_object(kind: str, row: dict[str, Any]) -> dict[str, Any]:
    """A row fetched with its spec (``GetRequest.spec``) as one printed object: the spec, and ``status``."""
    status = {k: v for k, v in row.items() if k not in SPEC_KEYS[kind] and k != "spec"}
    return {**row["spec"], "status": status}


def document(kind: str, rows: list[dict[str, Any]], *, named: bool = False) -> dict[str, Any]:
    """A cluster file of the rows' objects.  A listing leaves out the scheduler's built-in default queue
    (``origin`` built-in): no one applied it, and applying the listing back would make it an applied one;
    asked for by name (``named``) it is printed."""
    return {kind: [as_object(kind, r) for r in rows if named or r.get("origin") != "built-in"]}


def encode(fmt: str, doc: Any) -> str:
    """``doc`` as indented JSON or as YAML (msgspec's encoders: the same shapes apply decodes)."""
    if fmt == "yaml":
        return msgspec.yaml.encode(doc).decode()
    return json.dumps(doc, indent=2) + "\n"


def age(t: Any, now: float) -> str:
    """kubectl's short age of a time (``45s``, ``12m``, ``5h``, ``3d``); "" when unknown."""
    if t is None:
        return ""
    try:
        s = int(now - parse_time(t))
    except TimeError:
        return ""
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    if s < 120 * 60:
        return f"{s // 60}m"
    if s < 48 * 3600:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def resources_text(d: dict[str, Any] | None) -> str:
    """A resource list for a table cell: memory in binary units, pods left out."""
    return ",".join(f"{k}={binary_units(str(v)) if k == 'memory' else v}"
                    for k, v in (d or {}).items() if k != "pods")


def _last_condition(row: dict[str, Any]) -> str:
    conds = row.get("conditions") or []
    if not conds:
        return ""
    c = conds[-1]
    return f"{c.get('type', '')}:{c.get('reason', '')}" if c.get("reason") else str(c.get("type", ""))


# The wide table's extra columns (`busched get -o wide`), read from the row and its spec; ``now`` is the
# command's clock (ages).  A header the plain table already has is not repeated.
Column = tuple[str, Callable[[dict[str, Any], float], Any]]
WIDE: dict[str, list[Column]] = {
    "tasks": [("REQUESTS", lambda r, now: resources_text(r.get("requests"))),
              ("EXIT", lambda r, now: "" if r.get("exitCode") is None else r["exitCode"]),
              ("START", lambda r, now: r["spec"].get("startTime", "")),
              ("AGE", lambda r, now: age(r["spec"].get("created"), now))],
    "nodes": [("LABELS", lambda r, now: ",".join(f"{k}={v}" for k, v in sorted(r.get("labels", {}).items()))),
              ("REFUSED", lambda r, now: r.get("refused", ""))],
    "jobs": [("CONDITION", lambda r, now: _last_condition(r)), ("REFUSED", lambda r, now: r.get("refused", "")),
             ("AGE", lambda r, now: age(r["spec"].get("created"), now))],
    "queues": [("CAPABILITY", lambda r, now: resources_text(r.get("capability"))),
               ("DESERVED", lambda r, now: resources_text(r["spec"].get("deserved"))),
               ("REFUSED", lambda r, now: r.get("refused", "")),
               ("AGE", lambda r, now: age(r["spec"].get("created"), now))],
}
