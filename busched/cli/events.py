"""`busched events [KIND/NAME] [--follow] [-o json] [--since DURATION]`: the scheduling events, as
`kubectl get events` shows Volcano's.

Reads the events stream (`busched.bus.events`; docs/bus.md, "Scheduling events"): the latest state of
every series it holds, sorted by when it was last seen, in kubectl's columns (LAST SEEN, TYPE, REASON,
OBJECT, COUNT, MESSAGE).  KIND/NAME keeps one object's (``task/ns/name``, ``job/ns/name``,
``queue/name``, ``node/name``; a task or job without a namespace is in ``default``) and KIND alone one
kind's.  ``--follow`` then prints every new or updated series until Ctrl-C (or ``--exit-after``
seconds); ``-o json`` prints a JSON list, or one JSON object a line while following.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

__all__ = ["register", "parse_object", "row", "age"]

KINDS = {"task": "task", "tasks": "task", "pod": "task", "pods": "task", "job": "job", "jobs": "job",
         "podgroup": "job", "podgroups": "job", "queue": "queue", "queues": "queue", "node": "node", "nodes": "node"}
NAMESPACED = ("task", "job")
HEADER = ("LAST SEEN", "TYPE", "REASON", "OBJECT", "COUNT", "MESSAGE")


def register(sub: argparse._SubParsersAction) -> None:
    from busched.cli.connection import add_nats_arguments

    p = sub.add_parser("events", help="scheduling events: Scheduled, FailedScheduling, Preempted, Unschedulable, ...")
    p.add_argument("object", nargs="?", default="",
                   help="KIND/NAME: task/ns/name, job/ns/name, queue/name, node/name (or KIND alone)")
    p.add_argument("-f", "--follow", action="store_true", help="go on printing new and updated events")
    p.add_argument("-o", "--output", choices=["table", "json"], default="table")
    p.add_argument("--since", default="", help="only events last seen within this long (e.g. 10m, 1h)")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds to connect and read what is held")
    p.add_argument("--exit-after", type=float, default=0.0, help="with --follow: stop after this many seconds")
    add_nats_arguments(p)
    p.set_defaults(func=cmd_events)


def parse_object(text: str) -> tuple[str, str]:
    """``KIND/NAME`` -> (kind, key): ``key`` ``ns/name`` for tasks and jobs, ``name`` otherwise, "" for a kind."""
    if not text:
        return "", ""
    kind, _, rest = text.partition("/")
    k = KINDS.get(kind.lower())
    if k is None:
        raise ValueError(f"unknown kind {kind!r} (one of task, job, queue, node)")
    if not rest:
        return k, ""
    if k in NAMESPACED:
        ns, _, name = rest.partition("/") if "/" in rest else ("", "", rest)
        return k, f"{ns or 'default'}/{name}"
    if "/" in rest:
        raise ValueError(f"{k} names have no namespace: {text!r}")
    return k, rest


def age(seconds: float) -> str:
    """kubectl's short human duration: 45s, 3m12s, 17m, 5h, 3d."""
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    if s < 600:
        return f"{s // 60}m{s % 60}s" if s % 60 else f"{s // 60}m"
    if s < 3 * 3600:
        return f"{s // 60}m"
    if s < 48 * 3600:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def row(ev: Any, now: float) -> tuple[str, ...]:
    o = ev.involved_object
    obj = f"{o.kind}/{o.namespace}/{o.name}" if o.namespace else f"{o.kind}/{o.name}"
    return (age(now - ev.last_timestamp), ev.event_type, ev.reason, obj, str(ev.count), ev.message)


def _json(ev: Any) -> dict[str, Any]:
    """An event as kubectl's JSON names it (``type`` Normal | Warning), every field present."""
    o = ev.involved_object
    return {"involvedObject": {"kind": o.kind, "namespace": o.namespace, "name": o.name}, "type": ev.event_type,
            "reason": ev.reason, "message": ev.message, "count": ev.count, "firstTimestamp": ev.first_timestamp,
            "lastTimestamp": ev.last_timestamp,
            "source": {"component": ev.source.component, "instance": ev.source.instance}, "series": ev.series}


def _series(ev: Any) -> tuple[str, str, str, str]:
    o = ev.involved_object
    return (o.kind, o.namespace, o.name, ev.series)


def cmd_events(args: argparse.Namespace) -> int:
    from busched.api.duration import DurationError, parse_duration
    from busched.cli.common import run_until_signal

    try:
        kind, key = parse_object(args.object)
        since = parse_duration(args.since) if args.since else 0.0
    except (ValueError, DurationError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(run_until_signal(lambda stop: _run(args, kind, key, since, stop)))
    except Exception as e:  # noqa: BLE001 - reported as one line
        print(f"error: {e}", file=sys.stderr)
        return 1


async def _run(args: argparse.Namespace, kind: str, key: str, since: float, stop: asyncio.Event) -> int:
    from busched.bus import subjects as S
    from busched.cli.get import connected

    async def go(bus: Any) -> int:
        seen: asyncio.Queue[Any] = asyncio.Queue()
        watch = await bus.watch_events(seen.put_nowait, subject=S.events_filter(kind, key))
        try:
            try:
                await asyncio.wait_for(watch.caught_up.wait(), args.timeout)
            except asyncio.TimeoutError:
                print("warning: not every event held was read in time", file=sys.stderr)
            if not watch.exists and not args.follow:
                print("no events stream (no scheduler has run on this bus yet)", file=sys.stderr)
            latest: dict[tuple[str, str, str, str], Any] = {}
            while not seen.empty():
                ev = seen.get_nowait()
                latest[_series(ev)] = ev
            now = time.time()
            held = sorted((ev for ev in latest.values() if not since or ev.last_timestamp >= now - since),
                          key=lambda ev: (ev.last_timestamp, ev.first_timestamp))
            widths = _print_held(args.output, held, now)
            if args.follow:
                await _follow(args, seen, widths, stop)
        finally:
            await watch.stop()
        return 0

    return int(await connected(args, "busched-events", go))


def _print_held(output: str, held: list[Any], now: float) -> list[int]:
    if output == "json":
        json.dump([_json(ev) for ev in held], sys.stdout, indent=2)
        sys.stdout.write("\n")
        sys.stdout.flush()
        return []
    rows = [HEADER] + [row(ev, now) for ev in held]
    widths = [max(10, *(len(r[i]) for r in rows)) for i in range(len(HEADER) - 1)]
    if held:
        for r in rows:
            _print_row(r, widths)
    else:
        print("No events found.", file=sys.stderr)
    sys.stdout.flush()
    return widths


def _print_row(r: tuple[str, ...], widths: list[int]) -> None:
    print("  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1])


async def _follow(args: argparse.Namespace, seen: asyncio.Queue[Any], widths: list[int], stop: asyncio.Event) -> None:
    """Print each new or updated series as it arrives, until ``stop`` (Ctrl-C) or ``--exit-after``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + args.exit_after if args.exit_after > 0 else None
    stopped = asyncio.ensure_future(stop.wait())
    if not widths:
        widths = [10, 8, 17, 30, 5]
    try:
        while not stop.is_set():
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return
            got = asyncio.ensure_future(seen.get())
            done, _ = await asyncio.wait({got, stopped}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            if got not in done:
                got.cancel()
                continue
            ev = got.result()
            if args.output == "json":
                print(json.dumps(_json(ev)))
            else:
                _print_row(row(ev, time.time()), widths)
            sys.stdout.flush()
    finally:
        stopped.cancel()
