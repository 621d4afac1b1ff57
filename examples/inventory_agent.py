"""A fleet adapter: the nodes of an inventory file, served from one process, kept in step with the file.

    python examples/inventory_agent.py --nats nats://127.0.0.1:4222 inventory.yaml [--every 5] [--heartbeat 1]

The inventory is a cluster file with nodes only (what `busched apply` takes). Every node gets a label
naming the inventory, so the adapter knows which nodes on the bus are its own: a node removed from
the file is deleted from the bus (pruned). Binds go to `on_bind`, where a bridge hands the task to the
system that runs it (sbatch, a Nomad job, an SSH command); here it only logs it.
"""
import argparse
import asyncio
import logging
import signal
from pathlib import Path

from busched.agent import Agent, Reject
from busched.api.objects import NodeSpec
from busched.bus import Bus
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.apply import ClusterFileError, load_cluster_file
from busched.bus.prune import on_bus

LABEL = "busched.io/inventory"  # the inventory a node comes from: the nodes this adapter may prune
log = logging.getLogger("inventory")


def load(path: Path, inventory: str) -> dict[str, NodeSpec]:
    nodes = load_cluster_file(path).nodes
    for n in nodes:
        n.labels = {**n.labels, LABEL: inventory}
        n.allocatable = {"pods": 110, **n.allocatable}  # without pods a node takes no task
    return {n.name: n for n in nodes}


async def prune(bus: Bus, inventory: str, keep: set[str]) -> list[str]:
    """Delete the nodes of this inventory that the file no longer has (also after the adapter restarts)."""
    gone = [n.name for n in await on_bus(bus, "node") if n.labels.get(LABEL) == inventory and n.name not in keep]
    for name in gone:
        await bus.publish(S.state_subject("node", name), m.NodeDelete(name=name))
        log.info("pruned %s", name)
    return gone


async def on_bind(node: str, bind: m.BindDecision) -> None:
    if bind.task.annotations.get("example.com/refuse"):
        raise Reject("this fleet does not take it")  # the scheduler places it elsewhere
    log.info("run %s/%s (attempt %d) on %s", bind.task.namespace, bind.task.name, bind.attempt, node)


async def on_evict(node: str, evict: m.EvictDecision) -> None:
    log.info("stop %s/%s on %s", evict.namespace, evict.name, node)


async def serve(bus: Bus, path: Path, inventory: str, every: float, stop: asyncio.Event,
                heartbeat: float = 1.0) -> None:
    agents: dict[str, Agent] = {}  # node -> its Agent, for as long as the node is in the file, unchanged
    while not stop.is_set():
        try:
            nodes = load(path, inventory)
        except ClusterFileError as e:  # a file being edited: keep serving what we have
            log.warning("%s", e)
            nodes = {name: a.nodes[name].spec for name, a in agents.items()}
        for name in list(agents):
            if nodes.get(name) != agents[name].nodes[name].spec:  # removed or changed
                await agents.pop(name).stop()
        await prune(bus, inventory, set(nodes))
        for name, spec in nodes.items():
            if name not in agents:
                agents[name] = Agent(bus, [spec], on_bind=on_bind, on_evict=on_evict, heartbeat_interval=heartbeat)
                await agents[name].start()
                log.info("serving %s", name)
        try:
            await asyncio.wait_for(stop.wait(), every)
        except asyncio.TimeoutError:
            pass
    for a in agents.values():
        await a.stop()


async def main() -> None:
    p = argparse.ArgumentParser(description="serve the nodes of an inventory file")
    p.add_argument("inventory", type=Path)
    p.add_argument("--nats", default="nats://127.0.0.1:4222")
    p.add_argument("--every", type=float, default=5.0, help="seconds between reads of the file")
    p.add_argument("--heartbeat", type=float, default=1.0, help="seconds between a node's heartbeats")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    bus = await Bus.connect(args.nats)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    try:
        await serve(bus, args.inventory, args.inventory.stem, args.every, stop, args.heartbeat)
    finally:
        await bus.close()


if __name__ == "__main__":
    asyncio.run(main())
