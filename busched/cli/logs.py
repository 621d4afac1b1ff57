"""`busched logs NS/NAME [-f]`: a task's output, from the agent of the node it ran on.

The scheduler says which node the task is (or was last) on (a lookup, as `busched get` does); the
request then goes to that node's agent (``busched.api.logs.<node>``, `busched.agent.logs`), which
reads it from its executor's files.  ``-f`` asks again from where the last answer ended every
``--interval`` seconds until the run ends or Ctrl-C.  Only agents whose executor keeps logs answer
(``busched agent --exec``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    from busched.cli.connection import add_nats_arguments

    p = sub.add_parser("logs", help="a task's output, from its node's agent (busched agent --exec)")
    p.add_argument("name", help="ns/name of the task")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new output until the task ends")
    p.add_argument("--tail", type=int, default=65536, metavar="BYTES",
                   help="start this many bytes before the end (default %(default)s; 0: from the start)")
    p.add_argument("--attempt", type=int, default=0, help="this attempt's run (default: the node's newest)")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between reads while following")
    p.add_argument("--timeout", type=float, default=5.0)
    add_nats_arguments(p)
    p.set_defaults(func=cmd_logs)


def cmd_logs(args: argparse.Namespace) -> int:
    from busched.cli.common import namespaced
    from busched.cli.get import connected

    args.name = namespaced(args.name)
    try:
        return int(asyncio.run(connected(args, "busched-logs", lambda bus: logs(bus, args))))
    except KeyboardInterrupt:
        return 0
    except Exception as e:  # noqa: BLE001 - reported as one line
        print(f"error: {e}", file=sys.stderr)
        return 1


async def logs(bus: Any, args: argparse.Namespace) -> int:
    from busched.bus import BusError
    from busched.bus import messages as m
    from busched.bus import subjects as S
    from busched.cli.get import lookup

    task = await lookup(bus, "get", "tasks", args.name, args.timeout)
    node = task.get("node") or ""
    if not node:
        print(f"error: task {args.name} has not run on any node", file=sys.stderr)
        return 1
    ns, name = args.name.split("/", 1)
    offset = -min(args.tail, m.MAX_LOG_READ) if args.tail else 0
    while True:
        req = m.LogsRequest(namespace=ns, name=name, attempt=args.attempt, offset=offset, limit=m.MAX_LOG_READ)
        try:
            reply = m.decode(await bus.request(S.logs_subject(node), req, timeout=args.timeout))
        except BusError as e:
            raise RuntimeError(f"the agent of node {node} does not answer for logs ({e}); only an agent that "
                               f"runs tasks (busched agent --exec) keeps them") from None
        if not isinstance(reply, m.LogsReply):
            raise RuntimeError(f"unexpected reply {type(reply).__name__}")
        if reply.error:
            raise RuntimeError(reply.error)
        sys.stdout.write(reply.data)
        sys.stdout.flush()
        offset = reply.next
        if reply.data:
            continue  # more may be there already
        if not args.follow or reply.ended:
            return 0
        await asyncio.sleep(args.interval)
