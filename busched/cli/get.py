"""`busched get nodes|queues|jobs|tasks [NAME] [-o wide|json|yaml] [-w]`: ask the running scheduler (NAME: ns/name
for jobs and tasks; one object's row).

-o json|yaml prints a cluster file that `busched apply` takes back (`busched.cli.documents`); -w polls the
scheduler every --interval seconds over the same request/reply and prints each object whose printed row (or
object) changed, as ``kubectl get -w`` does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from busched.cli import documents

KINDS = ("nodes", "queues", "jobs", "tasks")
LEASE_KINDS = ("scheduler", "schedulers")  # each shard's lease, read from its bucket (busched.cli.leases)
ALIASES = {"node": "nodes", "queue": "queues", "job": "jobs", "podgroups": "jobs", "podgroup": "jobs",
           "task": "tasks", "pods": "tasks", "pod": "tasks"}


def register(sub: argparse._SubParsersAction) -> None:
    from busched.cli.connection import add_nats_arguments

    p = sub.add_parser("get", help="show nodes, queues, jobs or tasks as the scheduler sees them",
                       description="Ask the running scheduler.  -o wide adds columns; -o json|yaml prints a cluster "
                                   "file (each object's spec as applied, its live state under status) that "
                                   "`busched apply -f` takes back.  -w keeps watching: it asks again every "
                                   "--interval seconds (polling over the same request/reply) and prints each object "
                                   "added, changed or deleted since, with an EVENT column (JSON: one event a line; "
                                   "YAML: one document an event), until Ctrl-C or --watch-timeout.")
    p.add_argument("kind", choices=KINDS + tuple(ALIASES) + LEASE_KINDS)
    p.add_argument("name", nargs="?", default="", help="one object (ns/name for jobs and tasks)")
    p.add_argument("-o", "--output", choices=["table", "wide", "json", "yaml"], default="table")
    p.add_argument("-w", "--watch", action="store_true", help="after the listing, print what changes")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between two polls while watching (2)")
    p.add_argument("--watch-timeout", type=float, default=None, metavar="S",
                   help="stop watching after S seconds (default: until Ctrl-C)")
    p.add_argument("--timeout", type=float, default=5.0)
    add_nats_arguments(p)
    p.set_defaults(func=cmd_get)


async def fetch(bus: Any, kind: str, timeout: float = 5.0, *, spec: bool = False) -> list[dict[str, Any]]:
    """Every row of ``kind``, a page at a time; ``spec``: each with its object's spec (`Bus.get_view`)."""
    rows: list[dict[str, Any]] = await bus.get_view(kind, spec=spec, timeout=timeout)
    return rows


async def lookup(bus: Any, op: str, kind: str, name: str, timeout: float = 5.0, *,
                 spec: bool = False) -> dict[str, Any]:
    """One object by name: ``op`` get, describe or explain (`busched.bus.messages.LookupRequest`)."""
    from busched.bus import messages as m
    from busched.bus import subjects as S

    reply = m.decode(await bus.request(S.API_GET, m.LookupRequest(op=op, kind=kind, name=name, spec=spec),
                                       timeout=timeout))
    if not isinstance(reply, m.GetReply):
        raise RuntimeError(f"unexpected reply {type(reply).__name__}")
    if reply.error:
        raise RuntimeError(reply.error)
    return reply.items[0]


async def connected(args: argparse.Namespace, client: str, fn: Any, *, wait: float | None = None) -> Any:
    """``await fn(bus)`` on a connection made from the command line's NATS arguments (waiting ``wait``
    seconds for the server, --timeout's when None)."""
    from busched.bus import Bus
    from busched.cli.connection import options_from_args

    bus = await Bus.connect(options_from_args(args, client), wait=args.timeout if wait is None else wait)
    try:
        return await fn(bus)
    finally:
        await bus.close()


def cmd_get(args: argparse.Namespace) -> int:
    kind = ALIASES.get(args.kind, args.kind)
    try:
        if kind in LEASE_KINDS:
            from busched.cli import leases

            return int(asyncio.run(connected(args, "busched-get", lambda bus: leases.get(bus, args))))
        return int(asyncio.run(connected(args, "busched-get", lambda bus: _get(bus, args, kind))))
    except KeyboardInterrupt:  # Ctrl-C ends a watch
        return 0
    except Exception as e:  # noqa: BLE001 - reported as one line
        print(f"error: {e}", file=sys.stderr)
        return 1


async def _rows(bus: Any, args: argparse.Namespace, kind: str) -> list[dict[str, Any]]:
    """The rows to print: all of ``kind``, or the one NAME (absent from a listing: deleted)."""
    spec = args.output != "table"  # wide, json and yaml read the spec too
    if not args.name:
        return await fetch(bus, kind, args.timeout, spec=spec)
    return [r for r in await fetch(bus, kind, args.timeout, spec=spec) if documents.key_of(kind, r) == args.name]


async def _get(bus: Any, args: argparse.Namespace, kind: str) -> int:
    if args.name:  # asked by name first: a missing object is an error, as in kubectl
        rows = [await lookup(bus, "get", kind, args.name, args.timeout, spec=args.output != "table")]
    else:
        rows = await fetch(bus, kind, args.timeout, spec=args.output != "table")
    out = Printer(kind, args.output, watch=args.watch)
    if not args.watch:
        if args.output in ("json", "yaml"):
            sys.stdout.write(documents.encode(args.output, documents.document(kind, rows, named=bool(args.name))))
        else:
            out.table(rows)
        return 0
    loop = asyncio.get_running_loop()
    deadline = None if args.watch_timeout is None else loop.time() + args.watch_timeout
    seen = out.first(rows)
    while deadline is None or loop.time() < deadline:
        await asyncio.sleep(args.interval if deadline is None else max(0.0, min(args.interval,
                                                                                  deadline - loop.time())))
        try:
            rows = await _rows(bus, args, kind)
        except Exception as e:  # noqa: BLE001 - a scheduler restarting: say so, ask again at the next poll
            print(f"error: {e}", file=sys.stderr, flush=True)
            continue
        seen = out.changes(seen, rows)
    return 0


class Printer:
    """Prints rows as a table (plain or wide), or objects as JSON/YAML; while watching, each printed line or
    document is an event (ADDED, MODIFIED, DELETED) and is flushed at once."""

    def __init__(self, kind: str, output: str, *, watch: bool = False, clock: Any = time.time) -> None:
        self.kind, self.output, self.watch = kind, output, watch
        self.clock = clock  # wall clock for the wide table's ages (the command line may read it)
        self.now = clock()
        cols: list[tuple[str, Any]] = list(COLUMNS[kind])
        if output == "wide":
            have = {h for h, _ in cols}
            cols += [(h, _at_now(f, self)) for h, f in documents.WIDE[kind] if h not in have]
        self.cols = cols
        self.widths: list[int] = []

    def cells(self, row: dict[str, Any]) -> list[str]:
        return [str(f(row) if callable(f) else row.get(f, "")) for _, f in self.cols]

    def table(self, rows: list[dict[str, Any]], event: str = "") -> None:
        lines = [[h for h, _ in self.cols]] + [self.cells(r) for r in rows]
        if self.watch:
            lines = [["EVENT"] + lines[0]] + [[event] + c for c in lines[1:]]
        self.widths = [max(len(r[i]) for r in lines) for i in range(len(lines[0]))]
        for r in lines:
            self._line(r)

    def _line(self, cells: list[str]) -> None:
        print("  ".join(c.ljust(w) for c, w in zip(cells, self.widths)).rstrip(), flush=self.watch)

    def _view(self, row: dict[str, Any]) -> Any:
        """What a change is judged on: the printed cells but the ages (which grow by themselves), or the
        printed object."""
        if self.output not in ("table", "wide"):
            return documents.as_object(self.kind, row)
        return tuple(c for (h, _), c in zip(self.cols, self.cells(row)) if h != "AGE")

    def first(self, rows: list[dict[str, Any]]) -> dict[str, tuple[dict[str, Any], Any]]:
        if self.output in ("table", "wide"):
            self.table(rows, "ADDED")
        else:
            for r in rows:
                self.event("ADDED", r)
        return {documents.key_of(self.kind, r): (r, self._view(r)) for r in rows}

    def changes(self, seen: dict[str, tuple[dict[str, Any], Any]],
                rows: list[dict[str, Any]]) -> dict[str, tuple[dict[str, Any], Any]]:
        """Print what differs from ``seen`` (key -> (row, view)); the new ``seen``."""
        self.now = self.clock()
        now = {documents.key_of(self.kind, r): (r, self._view(r)) for r in rows}
        for key, (row, view) in now.items():
            if key not in seen:
                self.event("ADDED", row)
            elif seen[key][1] != view:
                self.event("MODIFIED", row)
        for key, (row, _) in seen.items():
            if key not in now:
                self.event("DELETED", row)
        return now

    def event(self, what: str, row: dict[str, Any]) -> None:
        if self.output in ("table", "wide"):
            self._line([what] + self.cells(row))
            return
        doc = {"type": what, "kind": self.kind, "object": documents.as_object(self.kind, row)}
        if self.output == "json":
            print(json.dumps(doc), flush=True)
        else:
            sys.stdout.write("---\n" + documents.encode("yaml", doc))
            sys.stdout.flush()


def _at_now(f: Any, printer: Printer) -> Any:
    return lambda row: f(row, printer.now)


COLUMNS: dict[str, list[tuple[str, Any]]] = {
    "nodes": [("NAME", "name"),
              ("STATE", lambda x: x["state"] + (",SchedulingDisabled" if x.get("unschedulable") else "")),
              ("TASKS", "tasks"),
              ("ALLOCATABLE", lambda x: documents.resources_text(x["allocatable"])),
              ("USED", lambda x: documents.resources_text(x["used"]))],
    "queues": [("NAME", "name"), ("WEIGHT", "weight"), ("STATE", "state"), ("JOBS", "jobs"),
               ("ORIGIN", "origin"), ("PENDING", lambda x: x.get("pending", 0)),
               ("RUNNING", lambda x: x.get("running", 0)), ("INQUEUE", lambda x: x.get("inqueue", 0)),
               ("ALLOCATED", lambda x: documents.resources_text(x.get("allocated")))],
    "jobs": [("NAMESPACE", "namespace"), ("NAME", "name"), ("QUEUE", "queue"), ("MIN", "minMember"),
             ("PHASE", lambda x: phase(x)),
             ("TASKS", lambda x: ",".join(f"{k}={v}" for k, v in sorted(x["tasks"].items()))),
             ("REASON", "reason")],  # (why its last change was refused: -o wide's REFUSED)
    "tasks": [("NAMESPACE", "namespace"), ("NAME", "name"), ("JOB", "job"), ("STATUS", "status"),
              ("NODE", "node"), ("ATTEMPT", "attempt"), ("EXIT", lambda x: _exit(x)),
              ("REASON", lambda x: _reason(x.get("exitReason") or x.get("reason", ""), x.get("refused", "")))],
}


def phase(job: dict[str, Any]) -> str:
    """The podgroup's phase, and how many of its tasks failed: Volcano's phase says Completed either way."""
    failed = job.get("failed", 0)
    return f"{job['phase']} ({failed} failed)" if failed else str(job["phase"])


def _exit(task: dict[str, Any]) -> str:
    """A finished task's exit code, as its agent reported it (blank while it runs, or when none was given)."""
    code = task.get("exitCode")
    return str(code) if code is not None and task.get("status") in ("Succeeded", "Failed") else ""


def _reason(*parts: str) -> str:
    return "; ".join(p for p in parts if p)
