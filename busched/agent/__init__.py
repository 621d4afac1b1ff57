"""busched.agent: run nodes for the busched scheduler (simulated, or wrapping real work through callbacks).

    from busched.agent import Agent, Reject
    from busched.bus import Bus

    bus = await Bus.connect("nats://127.0.0.1:4222")
    agent = Agent(bus, [NodeSpec(name="n1", allocatable={"cpu": "8", "memory": "16Gi"})],
                  on_bind=lambda node, bind: None, duration=30)
    await agent.start()
"""

from busched.agent.agent import Agent
from busched.agent.decisions import DURATION_KEY, Reject
from busched.agent.fleet import fleet_nodes
from busched.agent.node import AgentNode, HeldTask

__all__ = ["Agent", "AgentNode", "HeldTask", "Reject", "DURATION_KEY", "fleet_nodes"]
