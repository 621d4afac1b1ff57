"""`busched queue create|open|close|update|delete NAME`: a queue's life, with Volcano's semantics.

Every change is a conditional write on the queue's subject (`busched.bus.edit.change_object`): a
concurrent change is read again, never lost.  ``close`` sets the desired state Closed; the scheduler
shows the queue ``Closing`` while any of its jobs has not finished and ``Closed`` after, and places
no new work in a queue that is not Open (the proportion and capacity plugins refuse it).  ``delete``
follows Volcano's admission webhook and vcctl: refused for the ``default`` queue, for a queue that is
not Closed, and while the queue has jobs.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from busched.api.objects import DEFAULT_QUEUE


def register(sub: argparse._SubParsersAction) -> None:
    from busched.cli.connection import add_nats_arguments

    p = sub.add_parser("queue", help="create, open, close, update or delete a queue")
    verbs = p.add_subparsers(dest="verb", required=True)
    for verb, helptext in (("create", "create a queue (Open)"), ("open", "open a queue"),
                           ("close", "close a queue: Closing until its jobs finish, then Closed"),
                           ("update", "change a queue's weight or capability"),
                           ("delete", "delete a Closed queue that has no jobs")):
        v = verbs.add_parser(verb, help=helptext, description=helptext[0].upper() + helptext[1:] + ".")
        v.add_argument("name")
        if verb in ("create", "update"):
            v.add_argument("--weight", type=int, default=None, help="share of the cluster (create: 1)")
            v.add_argument("--capability", type=resource_list, default=None, metavar="cpu=..,memory=..",
                           help="the most the queue may use")
        if verb == "create":
            v.add_argument("--parent", default="", help="the parent queue (hierarchical queues)")
            v.add_argument("--reclaimable", type=boolean, default=True, metavar="true|false",
                           help="whether other queues may reclaim what it uses over its share (true)")
        add_nats_arguments(v)
        v.set_defaults(func=cmd_queue)


def resource_list(text: str) -> dict[str, str]:
    """``cpu=4,memory=8Gi`` -> {"cpu": "4", "memory": "8Gi"} (quantities are checked with the queue)."""
    out = {}
    for part in text.split(","):
        name, eq, value = part.strip().partition("=")
        if not eq or not name or not value:
            raise argparse.ArgumentTypeError(f"expected name=quantity[,name=quantity...], got {text!r}")
        out[name.strip()] = value.strip()
    return out


def boolean(text: str) -> bool:
    if text.lower() in ("true", "yes", "1"):
        return True
    if text.lower() in ("false", "no", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def cmd_queue(args: argparse.Namespace) -> int:
    if args.verb == "update" and args.weight is None and args.capability is None:
        print("error: queue update: give --weight and/or --capability", file=sys.stderr)
        return 2
    if getattr(args, "weight", None) is not None and args.weight < 0:
        print("error: --weight: must be 0 or more", file=sys.stderr)
        return 2
    return run(args, "busched-queue", lambda bus: queue_command(bus, args))


def run(args: argparse.Namespace, client: str, fn: Callable[[Any], Awaitable[str]]) -> int:
    """Connect, run ``fn(bus)`` and print what it says; a refusal or a bus error is exit 1."""
    from busched.api.build import SpecError
    from busched.bus import BusError
    from busched.bus.edit import Refused
    from busched.cli.get import connected

    try:
        print(asyncio.run(connected(args, client, fn, wait=5)))
    except (Refused, SpecError, BusError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


async def queue_command(bus: Any, args: argparse.Namespace) -> str:
    import msgspec

    from busched.api.objects import QueueSpec
    from busched.bus.apply import rfc3339
    from busched.bus.edit import DELETE, Refused, change_object, read_kind

    name = args.name
    verb = args.verb
    jobs: list[Any] = []
    if verb == "delete" and name != DEFAULT_QUEUE:
        jobs = [j for j in await read_kind(bus, "job") if j.queue == name]

    def change(q: QueueSpec | None) -> Any:
        if verb == "create":
            if q is not None:
                raise Refused(f"queue {name!r} already exists")
            return QueueSpec(name=name, weight=1 if args.weight is None else args.weight, capability=args.capability,
                             parent=args.parent, reclaimable=args.reclaimable, created=rfc3339(time.time()))
        if verb == "delete" and name == DEFAULT_QUEUE:  # applied or the scheduler's built-in one
            raise Refused(f"queue {name!r} cannot be deleted (the default queue)")
        if q is None:
            raise Refused(f"no queue {name!r}")
        if verb in ("open", "close"):
            return msgspec.structs.replace(q, state="Open" if verb == "open" else "Closed")
        if verb == "update":
            kw: dict[str, Any] = {}
            if args.weight is not None:
                kw["weight"] = args.weight
            if args.capability is not None:
                kw["capability"] = args.capability
            return msgspec.structs.replace(q, **kw)
        # delete (Volcano's queue admission webhook)
        if q.state != "Closed":
            raise Refused(f"queue {name!r} is {q.state}: only a Closed queue can be deleted, as in Volcano "
                          f"(busched queue close {name} first)")
        if jobs:
            raise Refused(f"queue {name!r} has {len(jobs)} job{'s' if len(jobs) != 1 else ''} "
                          f"({', '.join(sorted(f'{j.namespace}/{j.name}' for j in jobs)[:5])}"
                          f"{', ...' if len(jobs) > 5 else ''}): delete them first")
        return DELETE

    await bus.ensure_streams()
    await change_object(bus, "queue", name, change)
    past = {"create": "created", "open": "opened", "close": "closed", "update": "updated", "delete": "deleted"}
    return f"queue {name} {past[verb]}"
