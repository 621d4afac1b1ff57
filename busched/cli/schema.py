"""`busched schema export`: write a JSON Schema per wire message into schemas/."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("schema", help="JSON Schemas of the bus messages")
    ss = p.add_subparsers(dest="schema_command", required=True)
    e = ss.add_parser("export", help="write one JSON Schema per message (generated with msgspec)")
    e.add_argument("--dir", default="schemas", help="output directory (default %(default)s)")
    e.add_argument("--check", action="store_true", help="write nothing; exit 1 if the directory is out of date")
    e.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    from busched.bus.schema import export, stale_files

    if args.check:
        bad = stale_files(args.dir)
        for name in bad:
            print(f"{args.dir}/{name}: out of date (run `busched schema export`)", file=sys.stderr)
        return 1 if bad else 0
    names = export(args.dir)
    print(f"wrote {len(names)} schemas to {args.dir}/")
    return 0
