"""`busched get nodes|queues|jobs|tasks [NAME] [-o json]`: ask the running scheduler (NAME: ns/name for jobs
and tasks; one object's row)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

KINDS = ("nodes", "queues", "jobs", "tasks")
ALIASES = {"node": "nodes", "queue": "queues", "job": "jobs", "podgroups": "jobs", "podgroup": "jobs",
           "task": "tasks", "pods": "tasks", "pod": "tasks"}


def register(sub: argparse._SubParsersAction) -> None:
    from busched.cli.connection import add_nats_arguments

    p = sub.add_parser("get", help="show nodes, queues, jobs or tasks as the scheduler sees them")
    p.add_argument("kind", choices=KINDS + tuple(ALIASES))
    p.add_argument("name", nargs="?", default="", help="one object (ns/name for jobs and tasks)")
    p.add_argument("-o", "--output", choices=["table", "json"], default="table")
    p.add_argument("--timeout", type=float, default=5.0)
    add_nats_arguments(p)
    p.set_defaults(func=cmd_get)


async def fetch(bus: Any, kind: str, timeout: float = 5.0) -> list[dict[str, Any]]:
    from busched.bus import messages as m
    from busched.bus import subjects as S

    items: list[dict[str, Any]] = []
    offset: int | None = 0
    while offset is not None:
        reply = m.decode(await bus.request(S.API_GET, m.GetRequest(kind=kind, offset=offset), timeout=timeout))
        if not isinstance(reply, m.GetReply):
            raise RuntimeError(f"unexpected reply {type(reply).__name__}")
        if reply.error:
            raise RuntimeError(reply.error)
        items.extend(reply.items)
        offset = reply.next
    return items


async def lookup(bus: Any, op: str, kind: str, name: str, timeout: float = 5.0) -> dict[str, Any]:
    """One object by name: ``op`` get, describe or explain (`busched.bus.messages.LookupRequest`)."""
    from busched.bus import messages as m
    from busched.bus import subjects as S

    reply = m.decode(await bus.request(S.API_GET, m.LookupRequest(op=op, kind=kind, name=name), timeout=timeout))
    if not isinstance(reply, m.GetReply):
        raise RuntimeError(f"unexpected reply {type(reply).__name__}")
    if reply.error:
        raise RuntimeError(reply.error)
    return reply.items[0]


async def connected(args: argparse.Namespace, client: str, fn: Any) -> Any:
    """``await fn(bus)`` on a connection made from the command line's NATS arguments."""
    from busched.bus import Bus
    from busched.cli.connection import options_from_args

    bus = await Bus.connect(options_from_args(args, client), wait=args.timeout)
    try:
        return await fn(bus)
    finally:
        await bus.close()


def cmd_get(args: argparse.Namespace) -> int:
    kind = ALIASES.get(args.kind, args.kind)
    try:
        items = asyncio.run(_get(args, kind))
    except Exception as e:  # noqa: BLE001 - reported as one line
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.output == "json":
        json.dump(items, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_table(kind, items)
    return 0


async def _get(args: argparse.Namespace, kind: str) -> list[dict[str, Any]]:
    if args.name:
        return [await connected(args, "busched-get", lambda bus: lookup(bus, "get", kind, args.name, args.timeout))]
    return await connected(args, "busched-get", lambda bus: fetch(bus, kind, args.timeout))


def _res(d: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in d.items() if k != "pods")


COLUMNS: dict[str, list[tuple[str, Any]]] = {
    "nodes": [("NAME", "name"), ("STATE", "state"), ("TASKS", "tasks"),
              ("ALLOCATABLE", lambda x: _res(x["allocatable"])), ("USED", lambda x: _res(x["used"]))],
    "queues": [("NAME", "name"), ("WEIGHT", "weight"), ("STATE", "state"), ("JOBS", "jobs")],
    "jobs": [("NAMESPACE", "namespace"), ("NAME", "name"), ("QUEUE", "queue"), ("MIN", "minMember"),
             ("PHASE", "phase"), ("TASKS", lambda x: ",".join(f"{k}={v}" for k, v in sorted(x["tasks"].items())))],
    "tasks": [("NAMESPACE", "namespace"), ("NAME", "name"), ("JOB", "job"), ("STATUS", "status"),
              ("NODE", "node"), ("ATTEMPT", "attempt"),
              ("REASON", lambda x: "; ".join(r for r in (x.get("reason", ""), x.get("refused", "")) if r))],
}


def print_table(kind: str, items: list[dict[str, Any]]) -> None:
    cols = COLUMNS[kind]
    rows = [[h for h, _ in cols]]
    for it in items:
        rows.append([str(f(it) if callable(f) else it.get(f, "")) for _, f in cols])
    widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
