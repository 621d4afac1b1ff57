"""`busched apply -f FILE` / `busched delete -f FILE`: publish a cluster file's objects as state events."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (the command imports what it uses when it runs: a fast `busched --help`)
    from busched.api.objects import ClusterSpec
    from busched.bus import Bus


def register(sub: argparse._SubParsersAction) -> None:
    from busched.cli.connection import add_nats_arguments

    for name, helptext in (("apply", "publish every object of a cluster file"),
                           ("delete", "delete every object of a cluster file")):
        p = sub.add_parser(name, help=helptext,
                           description=f"{helptext[0].upper()}{helptext[1:]} (the shape of a scenario's cluster: "
                                       "block; a whole scenario file works too)."
                                       + (" Warns (without failing) about a job naming a queue, or a task naming "
                                          "a job, that is neither in the files nor on the bus (the default "
                                          "queue is built in)."
                                          if name == "apply" else ""))
        p.add_argument("-f", "--filename", action="append", required=True, metavar="FILE",
                       help="cluster or scenario YAML/JSON file ('-' for standard input); may repeat")
        p.add_argument("--dry-run", action="store_true",
                       help="check the files and print what would be published, publish nothing"
                            + (" (the references are also checked against the bus when it answers)"
                               if name == "apply" else ""))
        if name == "apply":
            p.add_argument("--prune", action="store_true",
                           help="after applying, delete each object on the bus whose labels match -l and that no "
                                "file has (kubectl's apply --prune); only nodes, jobs and tasks carry labels, and "
                                "only the kinds the files have an object of are pruned: queues, priority classes, "
                                "hypernodes and quotas never are.  With --dry-run: print what would be deleted")
            p.add_argument("-l", "--selector", default=None, metavar="SELECTOR",
                           help="with --prune (required there): k=v, k!=v, k, !k, 'k in (a,b)', 'k notin (a,b)', "
                                "comma-separated (all must match)")
        add_nats_arguments(p)
        p.set_defaults(func=cmd_apply, delete=(name == "delete"), prune=False, selector=None)


def cmd_apply(args: argparse.Namespace) -> int:
    from busched.api.selectors import SelectorError, parse_selector
    from busched.bus.apply import ClusterFileError, check_cluster, load_cluster_file

    if args.prune and args.selector is None:
        print("error: --prune needs -l/--selector (which objects the files are the whole of)", file=sys.stderr)
        return 2
    if args.selector is not None and not args.prune:
        print("error: -l/--selector is used with --prune only", file=sys.stderr)
        return 2
    try:
        args.requirements = parse_selector(args.selector) if args.prune else ()
    except SelectorError as e:
        print(f"error: -l: {e}", file=sys.stderr)
        return 2
    clusters: list[tuple[str, ClusterSpec]] = []
    for f in args.filename:  # every file loaded and (to apply) checked before anything is published
        try:
            clusters.append((f, load_cluster_file(f, sys.stdin.buffer.read() if f == "-" else None)))
            if not args.delete:
                check_cluster(clusters[-1][1], f)
        except ClusterFileError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    return asyncio.run(_publish(args, clusters))


def _references(clusters: list[tuple[str, ClusterSpec]]) -> list[tuple[str, tuple[str, str, str, str]]]:
    """(file, reference) for each job/task naming a queue/job that no file of this apply has."""
    from busched.api.objects import ClusterSpec
    from busched.bus.apply import missing_references

    out: list[tuple[str, tuple[str, str, str, str]]] = []
    for i, (f, cluster) in enumerate(clusters):
        others = [c for j, (_, c) in enumerate(clusters) if j != i]
        also = ClusterSpec(queues=[q for c in others for q in c.queues], jobs=[j for c in others for j in c.jobs])
        out += [(f, r) for r in missing_references(cluster, also=also)]
    return out


async def _warn_closed_queues(bus: Any, clusters: list[tuple[str, ClusterSpec]]) -> None:
    """Volcano admits no new job into a queue that is not Open; apply warns (the job waits, Pending)."""
    from busched.api.objects import ClusterSpec
    from busched.bus import BusError
    from busched.bus.apply import jobs_in_closed_queues

    for i, (f, cluster) in enumerate(clusters):
        others = [c for j, (_, c) in enumerate(clusters) if j != i]
        try:
            found = await jobs_in_closed_queues(bus, cluster, also=ClusterSpec(queues=[q for c in others
                                                                                      for q in c.queues]))
        except BusError as e:
            print(f"warning: cannot check the queues' states against the bus: {e}", file=sys.stderr)
            return
        for job, queue, state in found:
            print(f"warning: {f}: job {job} names queue {queue}, which is {state}: none of its tasks is placed "
                  f"until the queue is opened (busched queue open {queue})", file=sys.stderr)


def _warn(f: str, ref: tuple[str, str, str, str], where: str) -> None:
    kind, key, target_kind, target = ref
    print(f"warning: {f}: {kind} {key} names {target_kind} {target}, which is {where}", file=sys.stderr)


async def _publish(args: argparse.Namespace, clusters: list[tuple[str, ClusterSpec]]) -> int:
    from busched.bus import Bus, BusError
    from busched.bus.apply import apply_cluster, describe_events, missing_on_bus
    from busched.cli.connection import options_from_args

    refs = [] if args.delete else _references(clusters)
    try:
        bus = await Bus.connect(options_from_args(args, "busched-apply"), wait=2 if args.dry_run else 5)
    except BusError as e:
        if not args.dry_run:
            print(f"error: {e}", file=sys.stderr)
            return 1
        bus = None
        if refs:
            print(f"warning: cannot check the references against the bus ({e})", file=sys.stderr)
        for f, ref in refs:
            _warn(f, ref, "not in the files (the bus was not asked)")
    rc = 0
    try:
        if bus is not None and refs:
            try:
                missing = set(await missing_on_bus(bus, [r for _, r in refs]))
            except BusError as e:
                print(f"warning: cannot check the references against the bus: {e}", file=sys.stderr)
                missing = {r for _, r in refs}
            for f, ref in refs:
                if ref in missing:
                    _warn(f, ref, "neither in the files nor on the bus")
        if bus is not None and not args.delete:
            await _warn_closed_queues(bus, clusters)
        for f, cluster in clusters:
            if args.dry_run:
                lines = describe_events(cluster, delete=args.delete)
                print(f"{f}: would {'delete' if args.delete else 'apply'} {len(lines)} objects (dry run: nothing "
                      f"published)")
                for line in lines:
                    print(f"  {line}")
                continue
            assert bus is not None  # (only a dry run goes on without the bus)
            n, errors = await apply_cluster(bus, cluster, delete=args.delete)
            verb = "deleted" if args.delete else "applied"
            print(f"{f}: {verb} {n} objects")
            for err in errors:
                print(f"error: {err}", file=sys.stderr)
                rc = 1
        if args.prune and bus is None:
            print("warning: --prune: the bus did not answer, so what would be pruned is not known", file=sys.stderr)
        elif args.prune and rc:
            print("error: nothing pruned: not every object was applied", file=sys.stderr)
        elif args.prune and bus is not None:
            rc = await _prune(args, bus, [c for _, c in clusters])
    finally:
        if bus is not None:
            await bus.close()
    return rc


async def _prune(args: argparse.Namespace, bus: Bus, clusters: list[ClusterSpec]) -> int:
    """Delete (or, in a dry run, list) what the selector matches on the bus and no file has
    (`busched.bus.prune`)."""
    from busched.bus import BusError
    from busched.bus.apply import apply_cluster, describe_events
    from busched.bus.prune import to_prune

    try:
        gone = await to_prune(bus, clusters, args.requirements)
    except (BusError, TimeoutError) as e:
        print(f"error: cannot read the bus to prune: {e}", file=sys.stderr)
        return 1
    lines = describe_events(gone, delete=True)
    if args.dry_run:
        print(f"would prune {len(lines)} objects (dry run: nothing deleted)")
        for line in lines:
            print(f"  {line}")
        return 0
    n, errors = await apply_cluster(bus, gone, delete=True)
    print(f"pruned {n} objects")
    for line in lines:
        print(f"  {line}")
    for err in errors:
        print(f"error: {err}", file=sys.stderr)
    return 1 if errors else 0
