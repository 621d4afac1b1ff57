"""`busched explain NS/NAME [--json]`: why a task or a job was (not) placed, asked of the running scheduler.

The scheduler computes it on a private copy of its cache (`busched.scheduler.explain`): a stable reason
code, a message, the nodes' predicate failures aggregated as Volcano does, and the best nodes' scores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    from busched.bus.connect import add_nats_arguments

    p = sub.add_parser("explain", help="why a task or a job was (not) placed")
    p.add_argument("name", help="a task or a job: namespace/name")
    p.add_argument("--json", action="store_true", help="one JSON object: reason, message, nodes, scores")
    p.add_argument("--timeout", type=float, default=10.0)
    add_nats_arguments(p)
    p.set_defaults(func=cmd_explain)


def cmd_explain(args: argparse.Namespace) -> int:
    from busched.cli.get import connected, lookup

    try:
        out = asyncio.run(connected(args, "busched-explain",
                                    lambda bus: lookup(bus, "explain", "", args.name, args.timeout)))
    except Exception as e:  # noqa: BLE001 - reported as one line
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.json:
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_explain(out)
    return 0


def print_explain(out: dict[str, Any]) -> None:
    print(f"{out['reason']}: {out['message']}")
    if out.get("nodes"):
        print("nodes:")
        for reason, n in out["nodes"].items():
            print(f"  {n:6d}  {reason}")
    if out.get("scores"):
        print("best nodes:")
        for node, s in out["scores"].items():
            parts = ", ".join(f"{k}={v:g}" for k, v in s.items() if k != "total" and isinstance(v, (int, float)))
            total = s.get("total")
            print(f"  {node}  total={total:g}  {parts}" if isinstance(total, (int, float)) else f"  {node}  {s}")
