"""`busched describe KIND NAME [-o json]`: one object as the scheduler sees it.

Its row (status, node, reason, why its last change was refused, exit code), its spec, conditions,
and its recent binds, evicts, releases and stops with their reasons (`busched.scheduler.events_log`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from busched.cli.get import ALIASES, KINDS


def register(sub: argparse._SubParsersAction) -> None:
    from busched.cli.connection import add_nats_arguments

    p = sub.add_parser("describe", help="one node, queue, job or task in detail, with its recent events")
    p.add_argument("kind", choices=KINDS + tuple(ALIASES))
    p.add_argument("name", help="ns/name for jobs and tasks")
    p.add_argument("-o", "--output", choices=["text", "json"], default="text")
    p.add_argument("--timeout", type=float, default=5.0)
    add_nats_arguments(p)
    p.set_defaults(func=cmd_describe)


def cmd_describe(args: argparse.Namespace) -> int:
    from busched.cli.get import connected, lookup

    kind = ALIASES.get(args.kind, args.kind)
    try:
        out = asyncio.run(connected(args, "busched-describe",
                                    lambda bus: lookup(bus, "describe", kind, args.name, args.timeout)))
    except Exception as e:  # noqa: BLE001 - reported as one line
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.output == "json":
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_describe(out)
    return 0


def print_describe(out: dict[str, Any]) -> None:
    from busched.cli.get import phase

    skip = {"spec", "events", "conditions"}
    for k, v in out.items():
        if k == "phase" and out.get("failed"):
            v = phase(out)  # a job whose tasks failed is not shown plainly Completed
        if k not in skip and v not in ("", None, {}, []):
            print(f"{k}: {json.dumps(v) if isinstance(v, (dict, list)) else v}")
    print("spec:")
    for k, v in out.get("spec", {}).items():
        print(f"  {k}: {json.dumps(v) if isinstance(v, (dict, list)) else v}")
    if out.get("conditions"):
        print("conditions:")
        for c in out["conditions"]:
            print(f"  {c.get('type')}={c.get('status')}  {c.get('reason', '')}  {c.get('message', '')}".rstrip())
    print("events:" if out.get("events") else "events: none recent")
    for e in out.get("events", []):
        when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(e["time"]))
        print(f"  {when}  cycle {e['cycle']}  {e['event']:8s} {e['task']} -> {e['node']} "
              f"(attempt {e['attempt']}){'  ' + e['reason'] if e['reason'] else ''}")
