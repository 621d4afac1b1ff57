"""`busched agent`: one or many simulated nodes, or (``--exec``) nodes that run their tasks' commands here."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from pathlib import Path
from typing import Any

from busched.cli.common import add_log_argument, add_replicas_argument, run_until_signal, setup_logging

log = logging.getLogger("busched.agent")


def _interval(text: str) -> float:
    """A heartbeat interval: what a heartbeat's readers take (`busched.bus.messages.NodeHeartbeat`), else every
    heartbeat would be refused and the nodes never alive."""
    v = float(text)
    if not 0 < v <= 3600:
        raise argparse.ArgumentTypeError(f"a heartbeat interval is over 0 and at most 3600 seconds: {text}")
    return v


def add_fleet_arguments(p: argparse.ArgumentParser, *, nodes: int = 1) -> None:
    g = p.add_argument_group("simulated nodes")
    g.add_argument("--nodes", type=int, default=nodes, help="how many nodes (default %(default)s)")
    g.add_argument("--cpu", default="8", help="allocatable cpu per node (default %(default)s)")
    g.add_argument("--memory", default="16Gi", help="allocatable memory per node (default %(default)s)")
    g.add_argument("--gpu", default=None, help="nvidia.com/gpu per node")
    g.add_argument("--pods", type=int, default=110, help="pods per node (default %(default)s)")
    g.add_argument("--labels", default="", help="node labels, k=v,k2=v2")
    g.add_argument("--prefix", default="node", help="node names are PREFIX-00, PREFIX-01, ... (default %(default)s)")
    g.add_argument("--start", type=int, default=0, help="first node index (default %(default)s)")
    g.add_argument("--duration", type=float, default=None,
                   help="seconds a task runs before Succeeded (default: until evicted; the task annotation "
                        "busched.io/duration overrides)")
    g.add_argument("--heartbeat", type=_interval, default=1.0,
                   help="heartbeat interval in seconds, over 0 and at most 3600 (default %(default)s)")
    g.add_argument("--no-capacity-check", action="store_true",
                   help="accept binds even when the node has no room left")


def register(sub: argparse._SubParsersAction) -> None:
    from busched.cli.connection import add_nats_arguments

    p = sub.add_parser("agent", help="run simulated nodes",
                       description="Register nodes, heartbeat, take binds from each node's durable consumer, run "
                                   "tasks, execute evictions and report every phase change.")
    add_nats_arguments(p)
    add_fleet_arguments(p)
    g = p.add_argument_group("running tasks (busched.agent.process)")
    g.add_argument("--exec", dest="executor", choices=["process"], default=None,
                   help="run each task's command as a process group on this host (instead of simulating it)")
    g.add_argument("--state-dir", default=None,
                   help="where runs keep their logs and records (default $XDG_STATE_HOME/busched/agent-PREFIX, "
                        "else ~/.local/state/busched/agent-PREFIX); a restarted agent recovers its runs from it")
    g.add_argument("--grace", type=float, default=30.0,
                   help="seconds between SIGTERM and SIGKILL when a task is evicted (default %(default)s)")
    g.add_argument("--concurrency", type=int, default=4,
                   help="task starts under way at once per node (default %(default)s)")
    g.add_argument("--log-max", type=int, default=10 * 2**20, help="bytes per task log file before it rotates "
                                                                    "(default %(default)s)")
    g.add_argument("--log-keep", type=int, default=2, help="rotated log files kept per task (default %(default)s)")
    p.add_argument("--http", default="", metavar="HOST:PORT",
                   help="serve /metrics, /healthz and /readyz for this agent (default: off)")
    add_replicas_argument(p)
    add_log_argument(p)
    p.set_defaults(func=cmd_agent)


def nodes_from_args(args: argparse.Namespace):  # noqa: ANN201
    from busched.agent.fleet import fleet_nodes, parse_labels

    return fleet_nodes(args.nodes, cpu=args.cpu, memory=args.memory, gpu=args.gpu, pods=args.pods,
                       labels=parse_labels(args.labels), prefix=args.prefix, start=args.start)


def cmd_agent(args: argparse.Namespace) -> int:
    setup_logging(args.log_level)
    if args.concurrency < 1:
        log.error("--concurrency: at least 1")
        return 2
    try:
        nodes = nodes_from_args(args)
    except ValueError as e:
        log.error("%s", e)
        return 2
    return asyncio.run(run_until_signal(lambda stop: serve(args, nodes, stop)))


def connect_options(args: argparse.Namespace, nodes: list[Any]) -> Any:
    """How the agent connects: its flags, else the credential made for exactly its ``nodes``."""
    from busched.cli.connection import options_from_args

    args.agent_nodes = [n.name for n in nodes]
    return options_from_args(args, "busched-agent")


def state_dir(args: argparse.Namespace) -> Path:
    """--state-dir, else one per node prefix under $XDG_STATE_HOME (the cli is where the environment is read)."""
    if args.state_dir:
        return Path(args.state_dir)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "busched" / f"agent-{args.prefix}"


def make_executor(args: argparse.Namespace) -> Any:
    if getattr(args, "executor", None) != "process":
        return None
    from busched.agent.process import ProcessExecutor

    where = state_dir(args)
    log.info("running tasks as processes; state in %s", where)
    base_env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TZ") if k in os.environ}
    return ProcessExecutor(where, log_max=args.log_max, log_keep=args.log_keep, base_env=base_env)


async def serve(args: argparse.Namespace, nodes, stop: asyncio.Event) -> int:  # noqa: ANN001
    from busched.agent import Agent
    from busched.bus import Bus, BusError, StreamSettings

    try:
        bus = await Bus.connect(connect_options(args, nodes), wait=60)
    except BusError as e:
        log.error("%s", e)
        return 1
    from busched.web.server import parse_listen, start_http

    executor = make_executor(args)
    agent = Agent(bus, nodes, heartbeat_interval=args.heartbeat, duration=args.duration,
                  check_capacity=not args.no_capacity_check, streams=StreamSettings(replicas=args.replicas),
                  executor=executor, grace=args.grace, concurrency=args.concurrency)
    http = None
    try:
        if args.http:
            host, port = parse_listen(args.http)
            http = await start_http(host, port, agent.metrics.registry, ready=lambda: agent.started,
                                    healthy=lambda: bus.connected)
            log.info("metrics at %s/metrics", http.url)
        await agent.start()
        log.info("serving %s", ", ".join(n.name for n in nodes))
        await stop.wait()
        log.info("stopping")
        await agent.stop()
        return 0
    finally:
        if http is not None:
            await http.stop()
        await bus.close()
