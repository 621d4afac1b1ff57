"""`run_agent`: the smallest complete agent program around an `Executor`, and nodes that can run something.

    import asyncio
    from busched.agent import NodeSpec, run_agent
    from busched.agent.process import ProcessExecutor

    asyncio.run(run_agent([NodeSpec(name="n1", allocatable={"cpu": "4", "memory": "8Gi"})],
                          ProcessExecutor("/var/lib/my-agent"), nats="nats://127.0.0.1:4222"))

It completes the nodes (`complete_nodes`: ``pods`` 110 as Kubernetes' kubelet when absent, and a clear
error for a node without cpu or memory, which could take no task), connects, runs an `Agent` with the
executor until ``stop`` is set (or for ever), and stops it cleanly: runs go on and the next incarnation
recovers them (`busched.agent.executor.Recovering`).
"""

from __future__ import annotations

import asyncio
import logging

import msgspec

from busched.agent.agent import Agent
from busched.agent.executor import Executor
from busched.api.objects import NodeSpec
from busched.api.resource import PODS
from busched.bus.client import Bus
from busched.bus.connect import NatsOptions

__all__ = ["run_agent", "complete_nodes", "DEFAULT_PODS", "REQUIRED_RESOURCES"]

log = logging.getLogger("busched.agent")

DEFAULT_PODS = 110  # Kubernetes' kubelet default (--max-pods): every task takes one pod slot
REQUIRED_RESOURCES = ("cpu", "memory")


def complete_nodes(nodes: list[NodeSpec]) -> list[NodeSpec]:
    """``nodes`` with ``pods`` 110 where they give none; a `ValueError` naming the node for one without
    cpu or memory, or with a name given twice."""
    out, seen = [], set()
    for n in nodes:
        if not n.name:
            raise ValueError("a node needs a name")
        if n.name in seen:
            raise ValueError(f"node {n.name}: given twice")
        seen.add(n.name)
        missing = [r for r in REQUIRED_RESOURCES if r not in n.allocatable]
        if missing:
            raise ValueError(f"node {n.name}: allocatable has no {' and no '.join(missing)} "
                             f"(e.g. allocatable={{'cpu': '8', 'memory': '16Gi'}}): no task could fit it")
        if PODS not in n.allocatable:
            n = msgspec.structs.replace(n, allocatable={**n.allocatable, PODS: DEFAULT_PODS})
        out.append(n)
    return out


async def run_agent(nodes: list[NodeSpec], executor: Executor, *, nats: str | NatsOptions | Bus,
                    stop: asyncio.Event | None = None, heartbeat: float = 1.0, grace: float = 30.0,
                    concurrency: int = 4, check_capacity: bool = True) -> None:
    """Serve ``nodes`` with ``executor`` over ``nats`` (a URL, connection options, or a connected `Bus`, which
    is left open) until ``stop`` is set."""
    specs = complete_nodes(nodes)
    own = not isinstance(nats, Bus)
    bus = await Bus.connect(nats, name="busched-agent") if not isinstance(nats, Bus) else nats
    agent = Agent(bus, specs, heartbeat_interval=heartbeat, executor=executor, grace=grace,
                  concurrency=concurrency, check_capacity=check_capacity)
    try:
        await agent.start()
        log.info("serving %s", ", ".join(n.name for n in specs))
        await (stop or asyncio.Event()).wait()
    finally:
        await agent.stop()
        if own:
            await bus.close()
