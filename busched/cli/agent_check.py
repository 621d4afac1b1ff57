"""`busched agent-check --node NAME`: the conformance kit (`busched.agentcheck`) against a running agent.

It stands in for the scheduler towards one node, so it connects with the scheduler's credential
(it writes binding records and decisions) and should be pointed at a node no running scheduler is
using.  A restart of the agent is the operator's: ``--restart-cmd`` runs a shell command that
restarts it (what CI uses), ``--restart-manual`` asks whoever runs the check to do it; without
either the restart rule is skipped.  Exit 1 when any rule fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from busched.cli.common import add_log_argument, setup_logging

log = logging.getLogger("busched.cli")


def register(sub: argparse._SubParsersAction) -> None:
    from busched.cli.connection import add_nats_arguments

    p = sub.add_parser("agent-check", help="check a running agent against the protocol's rules",
                       description="Drive one node's running agent through the protocol without a scheduler "
                                   "(bind, duplicate bind, stale attempt and fence, evict, evict of an unknown "
                                   "task, a restart, heartbeats, results for its own node) and print pass or "
                                   "fail per rule (docs/agents.md). Point it at a node no scheduler is using.")
    add_nats_arguments(p)
    p.add_argument("--node", required=True, help="the node whose agent is checked")
    p.add_argument("--timeout", type=float, default=10.0,
                   help="seconds to wait for each answer or heartbeat (default %(default)s)")
    p.add_argument("--namespace", default="agentcheck", help="namespace of the check's tasks (default %(default)s)")
    p.add_argument("--task", metavar="FILE", default=None,
                   help="a task spec (YAML or JSON, as in a cluster file) the check's tasks are made from: the "
                        "command an executing agent runs, requests; name and namespace are the check's")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--restart-cmd", metavar="CMD", default=None,
                   help="shell command that restarts the agent (it is checked that the agent comes back with a "
                        "new boot and neither runs twice nor forgets what it ran)")
    g.add_argument("--restart-manual", action="store_true",
                   help="ask on stderr for the agent to be restarted by hand")
    p.add_argument("--restart-timeout", type=float, default=60.0,
                   help="seconds to wait for the restarted agent's first heartbeat (default %(default)s)")
    p.add_argument("--json", action="store_true", help="the results as JSON")
    add_log_argument(p)
    p.set_defaults(func=cmd_agent_check)


def _task(path: str | None) -> Any:
    if path is None:
        return None
    import msgspec

    from busched.api.objects import TaskSpec

    text = Path(path).read_bytes()
    raw = msgspec.yaml.decode(text) if not path.endswith(".json") else msgspec.json.decode(text)
    if isinstance(raw, dict):
        raw = {"name": "template", **raw}
    return msgspec.convert(raw, TaskSpec)


def _restart(args: argparse.Namespace) -> Any:
    if args.restart_cmd:
        async def run_cmd() -> None:
            # its own session, so a command that hangs is killed with whatever it started so far
            proc = await asyncio.create_subprocess_shell(args.restart_cmd, stdin=asyncio.subprocess.DEVNULL,
                                                         start_new_session=True)
            try:
                rc = await asyncio.wait_for(proc.wait(), args.restart_timeout)
            except asyncio.TimeoutError:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                await proc.wait()
                raise RuntimeError(f"--restart-cmd did not finish within {args.restart_timeout:g}s") from None
            if rc != 0:
                raise RuntimeError(f"--restart-cmd exited {rc}")
        return run_cmd
    if args.restart_manual:
        async def ask() -> None:
            print(f"restart the agent of {args.node} now (waiting up to {args.restart_timeout:g}s for a heartbeat "
                  f"with a new boot)", file=sys.stderr, flush=True)
        return ask
    return None


def cmd_agent_check(args: argparse.Namespace) -> int:
    setup_logging(args.log_level)
    try:
        task = _task(args.task)
    except Exception as e:  # noqa: BLE001 - a bad file is the user's error, named
        print(f"error: --task {args.task}: {e}", file=sys.stderr)
        return 2
    return asyncio.run(_check(args, task))


async def _check(args: argparse.Namespace, task: Any) -> int:
    from busched.agentcheck import RULES, check_agent
    from busched.bus import Bus, BusError
    from busched.cli.connection import options_from_args

    try:
        bus = await Bus.connect(options_from_args(args, "busched-agent-check"))
    except BusError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    try:
        results = await check_agent(bus, args.node, timeout=args.timeout, namespace=args.namespace,
                                    restart=_restart(args), restart_timeout=args.restart_timeout, task=task)
    finally:
        await bus.close()
    if args.json:
        print(json.dumps([{"rule": r.rule, "result": r.verdict, "detail": r.detail, "checks": RULES[r.rule]}
                          for r in results], indent=2))
    else:
        width = max(len(r.rule) for r in results)
        for r in results:
            print(f"{r.verdict.upper():<5} {r.rule:<{width}}  {r.detail or RULES[r.rule]}")
        failed = sum(r.failed for r in results)
        passed = sum(r.verdict == "pass" for r in results)
        print(f"{passed} passed, {failed} failed, {len(results) - passed - failed} skipped")
    return 1 if any(r.failed for r in results) else 0
