"""`busched apply -f FILE` / `busched delete -f FILE`: publish a cluster file's objects as state events."""

from __future__ import annotations

import argparse
import asyncio
import sys


def register(sub: argparse._SubParsersAction) -> None:
    from busched.bus.connect import add_nats_arguments

    for name, helptext in (("apply", "publish every object of a cluster file"),
                           ("delete", "delete every object of a cluster file")):
        p = sub.add_parser(name, help=helptext,
                           description=f"{helptext[0].upper()}{helptext[1:]} (the shape of a scenario's cluster: "
                                       "block; a whole scenario file works too).")
        p.add_argument("-f", "--filename", action="append", required=True, metavar="FILE",
                       help="cluster or scenario YAML/JSON file ('-' for standard input); may repeat")
        add_nats_arguments(p)
        p.set_defaults(func=cmd_apply, delete=(name == "delete"))


def cmd_apply(args: argparse.Namespace) -> int:
    from busched.bus.apply import ClusterFileError, check_cluster, load_cluster_file

    clusters = []
    for f in args.filename:  # every file loaded and (to apply) checked before anything is published
        try:
            clusters.append((f, load_cluster_file(f, sys.stdin.buffer.read() if f == "-" else None)))
            if not args.delete:
                check_cluster(clusters[-1][1], f)
        except ClusterFileError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    return asyncio.run(_publish(args, clusters))


async def _publish(args: argparse.Namespace, clusters) -> int:  # noqa: ANN001
    from busched.bus import Bus, BusError
    from busched.bus.apply import apply_cluster
    from busched.bus.connect import options_from_args

    try:
        bus = await Bus.connect(options_from_args(args, "busched-apply"), wait=5)
    except BusError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    rc = 0
    try:
        for f, cluster in clusters:
            n, errors = await apply_cluster(bus, cluster, delete=args.delete)
            verb = "deleted" if args.delete else "applied"
            print(f"{f}: {verb} {n} objects")
            for e in errors:
                print(f"error: {e}", file=sys.stderr)
                rc = 1
    finally:
        await bus.close()
    return rc
