"""`busched node cordon|uncordon|drain NAME`: kubectl's cordon, uncordon and drain.

``cordon``/``uncordon`` set the node's ``unschedulable`` with a conditional write; an agent that
registers its node again keeps it (`busched.bus.edit.register_nodes`), as the kubelet never resets
``spec.unschedulable``.  ``drain`` cordons, then asks the scheduler to evict every task on the node
(reason ``drain``, `busched.scheduler.lifecycle`), which places them elsewhere; ``--wait`` waits until
no task runs on the node (at most ``--timeout`` seconds, exit 1 after).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

WAIT_POLL = 0.2  # seconds between two looks at the node while waiting for a drain


def register(sub: argparse._SubParsersAction) -> None:
    from busched.cli.connection import add_nats_arguments

    p = sub.add_parser("node", help="cordon, uncordon or drain a node")
    verbs = p.add_subparsers(dest="verb", required=True)
    for verb, helptext in (("cordon", "mark a node unschedulable: no new task is placed on it"),
                           ("uncordon", "mark a node schedulable again"),
                           ("drain", "cordon a node and evict its tasks, which are placed elsewhere")):
        v = verbs.add_parser(verb, help=helptext, description=helptext[0].upper() + helptext[1:] + ".")
        v.add_argument("name")
        if verb == "drain":
            v.add_argument("--wait", action="store_true", help="wait until no task runs on the node")
            v.add_argument("--timeout", type=float, default=60.0, help="seconds to wait with --wait (60)")
        add_nats_arguments(v)
        v.set_defaults(func=cmd_node)


def cmd_node(args: argparse.Namespace) -> int:
    from busched.cli.queue import run

    return run(args, "busched-node", lambda bus: node_command(bus, args.verb, args.name,
                                                              wait=getattr(args, "wait", False),
                                                              timeout=getattr(args, "timeout", 60.0)))


async def node_command(bus: Any, verb: str, name: str, *, wait: bool = False, timeout: float = 60.0) -> str:
    import msgspec

    from busched.api.objects import NodeSpec
    from busched.bus.edit import Refused, change_object

    def change(n: NodeSpec | None) -> Any:
        if n is None:
            raise Refused(f"no node {name!r}")
        return msgspec.structs.replace(n, unschedulable=verb != "uncordon")

    done = await change_object(bus, "node", name, change)
    if verb != "drain":
        return f"node {name} {'cordoned' if verb == 'cordon' else 'uncordoned'}"
    evicting = await drain(bus, name, after=done.seq)
    lines = [f"node {name} cordoned; evicting {len(evicting)} task{'s' if len(evicting) != 1 else ''}"]
    lines += [f"  {t}" for t in evicting]
    if wait:
        left = await wait_empty(bus, name, timeout)
        if left:
            raise RuntimeError(f"node {name} still runs {left} task{'s' if left != 1 else ''} after {timeout:g}s")
        lines.append(f"node {name} drained")
    return "\n".join(lines)


async def drain(bus: Any, name: str, *, after: int = 0, timeout: float = 10.0) -> list[str]:
    """Ask the scheduler to evict every task on the node (a `DrainRequest`); the tasks it is evicting."""
    from busched.bus import messages as m
    from busched.bus import subjects as S

    reply = m.decode(await bus.request(S.API_DRAIN, m.DrainRequest(node=name, after=after), timeout=timeout))
    if not isinstance(reply, m.GetReply):
        raise RuntimeError(f"unexpected reply {type(reply).__name__}")
    if reply.error:
        raise RuntimeError(reply.error)
    return [str(t) for t in reply.items[0].get("evicting", [])] if reply.items else []


async def wait_empty(bus: Any, name: str, timeout: float) -> int:
    """Wait until the scheduler shows no task on the node; the number still there when ``timeout`` ran out."""
    from busched.cli.get import lookup

    deadline = time.monotonic() + timeout
    while True:
        left = int((await lookup(bus, "get", "nodes", name))["tasks"])
        if left == 0 or time.monotonic() >= deadline:
            return left
        await asyncio.sleep(WAIT_POLL)
