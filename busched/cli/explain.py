"""`busched explain NS/NAME [--json]`: why a task or a job was (not) placed, asked of the running scheduler.

The scheduler computes it on a private copy of its cache (`busched.scheduler.explain`): a stable reason
code, a message, the nodes' predicate failures aggregated as Volcano does, and the best nodes' scores.

`busched explain NS/NAME --cycle N [SOURCE | --nats URL]` answers the same on a record: on the state before
the recorded cycle N (``N`` or ``BOOT:N``), rebuilt from a `busched record` file or from the bus as
`busched replay --cycle N --export` rebuilds it (`busched.replay.explain`); the answer adds ``cycle`` and
``boot``.  Exit status 0, 1 for an unknown name or an unreachable scheduler, 2 for a cycle that cannot be rebuilt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    from busched.cli.connection import add_nats_arguments

    p = sub.add_parser("explain", help="why a task or a job was (not) placed")
    p.add_argument("name", help="a task or a job: namespace/name")
    p.add_argument("source", nargs="?", help="with --cycle: a file written by `busched record` (default: the bus)")
    p.add_argument("--cycle", metavar="N", help="on the state before this recorded cycle (N, or BOOT:N)")
    p.add_argument("--json", action="store_true", help="one JSON object: reason, message, nodes, scores")
    p.add_argument("--timeout", type=float, default=10.0)
    add_nats_arguments(p)
    p.set_defaults(func=cmd_explain)


def cmd_explain(args: argparse.Namespace) -> int:
    from busched.cli.get import connected, lookup

    if args.source and not args.cycle:
        print("error: a record SOURCE goes with --cycle N", file=sys.stderr)
        return 2
    if args.cycle:
        return explain_recorded(args)

    try:
        out = asyncio.run(connected(args, "busched-explain",
                                    lambda bus: lookup(bus, "explain", "", args.name, args.timeout)))
    except Exception as e:  # noqa: BLE001 - reported as one line
        print(f"error: {e}", file=sys.stderr)
        return 1
    return show(out, args.json)


def explain_recorded(args: argparse.Namespace) -> int:
    """``--cycle N``: on the state before a recorded cycle, from a record file or the bus."""
    from busched.replay import decode_records
    from busched.replay.explain import explain_cycle
    from busched.replay.export import ExportError

    async def main() -> dict[str, Any]:
        if args.source:
            from busched.replay.file import read_file

            state, hist = read_file(args.source)
        else:
            from busched.cli.replay import read_bus

            state, hist = await read_bus(args)
        return await explain_cycle(state, decode_records(hist), args.name, args.cycle)

    try:
        out = asyncio.run(main())
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyError as e:
        print(f"error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - reported as one line
        print(f"error: {e}", file=sys.stderr)
        return 1
    return show(out, args.json, header=f"before cycle {out['boot']}:{out['cycle']}")


def show(out: dict[str, Any], as_json: bool, header: str = "") -> int:
    """Print an explanation as JSON or as text (live or on a record: one shape)."""
    if as_json:
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        if header:
            print(header)
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
