"""An agent's heartbeats: every interval, per node, the tasks it holds, how far it has read its decisions,
and the node's measured load (`busched.agent.usage`).

The scheduler judges a node alive, and a bind received, by these (docs/bus.md, "Agents"); they
go over core NATS on their own timer, independent of the decision handling, so they live apart.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

from busched.agent.node import AgentNode
from busched.api.objects import NodeUsageSpec
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.client import Bus
from busched.bus.resources import resource_list

__all__ = ["Heartbeat", "UsageSource"]

# a node's measured load for its heartbeat (busched.agent.usage), None when unknown
UsageSource = Callable[[AgentNode], Awaitable[NodeUsageSpec | None]]

log = logging.getLogger("busched.agent")


class Heartbeat:
    """Beats for ``nodes`` every ``interval`` seconds while ``running()`` says so, unless ``paused``."""

    def __init__(self, bus: Bus, nodes: Mapping[str, AgentNode], *, boot: str, interval: float, consumer: str,
                 version: Callable[[], int], usage: UsageSource | None = None) -> None:
        self.bus = bus
        self.nodes = nodes
        self.boot = boot
        self.interval = interval
        self.consumer = consumer  # the decision consumer the agent reads, so the scheduler can ask how far it got
        self.version = version
        self.usage = usage
        self.paused = False

    async def run(self, running: Callable[[], bool]) -> None:
        while running():
            await asyncio.sleep(self.interval)
            try:
                await self.once()
            except Exception as e:  # noqa: BLE001 - keep beating through reconnects
                log.warning("heartbeat failed: %s", e)

    async def once(self) -> None:
        if self.paused:
            return
        for n in self.nodes.values():
            n.hb_seq += 1
            used = resource_list(n.used(), skip_zero=True)
            await self.bus.publish_core(S.heartbeat_subject(n.name), m.NodeHeartbeat(
                version=self.version(), node=n.name, boot=self.boot, seq=n.hb_seq,
                interval=self.interval, holding={k: t.attempt for k, t in n.tasks.items()},
                through_seq=n.through_seq, used=used, consumer=self.consumer, usage=await self._usage(n)))

    async def _usage(self, n: AgentNode) -> NodeUsageSpec | None:
        """The node's load, or None: a measurement that fails (an integrator's code) never stops a beat."""
        if self.usage is None:
            return None
        try:
            return await self.usage(n)
        except Exception as e:  # noqa: BLE001
            log.warning("node %s: cannot measure its usage: %s", n.name, e)
            return None
