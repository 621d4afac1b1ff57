"""`busched agent`: one or many simulated nodes."""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import Any

from busched.cli.common import add_log_argument, add_replicas_argument, run_until_signal, setup_logging

log = logging.getLogger("busched.agent")


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
    g.add_argument("--heartbeat", type=float, default=1.0, help="heartbeat interval in seconds (default %(default)s)")
    g.add_argument("--no-capacity-check", action="store_true",
                   help="accept binds even when the node has no room left")


def register(sub: argparse._SubParsersAction) -> None:
    from busched.cli.connection import add_nats_arguments

    p = sub.add_parser("agent", help="run simulated nodes",
                       description="Register nodes, heartbeat, take binds from each node's durable consumer, run "
                                   "tasks, execute evictions and report every phase change.")
    add_nats_arguments(p)
    add_fleet_arguments(p)
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


async def serve(args: argparse.Namespace, nodes, stop: asyncio.Event) -> int:  # noqa: ANN001
    from busched.agent import Agent
    from busched.bus import Bus, BusError, StreamSettings

    try:
        bus = await Bus.connect(connect_options(args, nodes), wait=60)
    except BusError as e:
        log.error("%s", e)
        return 1
    from busched.web.server import parse_listen, start_http

    agent = Agent(bus, nodes, heartbeat_interval=args.heartbeat, duration=args.duration,
                  check_capacity=not args.no_capacity_check, streams=StreamSettings(replicas=args.replicas))
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
