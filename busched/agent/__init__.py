"""busched.agent: run nodes for the busched scheduler: simulated, through callbacks, or through an executor.

The public API (docs/executors.md):

* `run_agent(nodes, executor, nats=...)`: a complete agent around an `Executor`; `complete_nodes`
  (``pods`` 110 by default, a clear error for a node without cpu or memory).
* `Executor` (start, wait, stop with grace, status), `Recovering` (recover, forget) for executors whose
  runs outlive the agent, `TaskRun`, `Exit`, `StartError` (busched.agent.executor).
* `ProcessExecutor` (busched.agent.process): tasks as process groups on this host, ``busched agent --exec``.
* `Agent`: the lower level, with callbacks (``on_bind``, ``on_evict``, `Reject`) or ``executor=``.

    from busched.agent import Agent, Reject
    from busched.bus import Bus

    bus = await Bus.connect("nats://127.0.0.1:4222")
    agent = Agent(bus, [NodeSpec(name="n1", allocatable={"cpu": "8", "memory": "16Gi", "pods": 110})],
                  on_bind=lambda node, bind: None, duration=30)
    await agent.start()
"""

from busched.agent.agent import Agent
from busched.agent.decisions import DURATION_KEY, Reject
from busched.agent.executor import Executor, Exit, Recovering, StartError, TaskRun
from busched.agent.fleet import fleet_nodes
from busched.agent.node import AgentNode, HeldTask
from busched.agent.process import ProcessExecutor
from busched.agent.sdk import DEFAULT_PODS, complete_nodes, run_agent
from busched.api.objects import NodeSpec

__all__ = ["Agent", "AgentNode", "HeldTask", "Reject", "DURATION_KEY", "fleet_nodes", "Executor", "Recovering",
           "TaskRun", "Exit", "StartError", "ProcessExecutor", "run_agent", "complete_nodes", "DEFAULT_PODS",
           "NodeSpec"]
