"""`busched agent-check` against busched's own simulated agent (every rule passes) and against deliberately
broken agents (each fails the rule it breaks, and only that one), over a real nats-server."""

from __future__ import annotations

from typing import Any

import pytest

from busched.agent import Agent
from busched.agent.fleet import fleet_nodes
from busched.agentcheck import RULES, check_agent

NODE = "ac-00"


async def _run(harness: Any, *, breakage: Any = None) -> dict[str, Any]:
    nodes = fleet_nodes(1, prefix="ac")
    agents: list[Any] = []

    async def start() -> Agent:
        a = Agent(await harness.bus(), nodes, heartbeat_interval=0.05)
        if breakage is not None:
            breakage(a)
        await a.start()
        agents.append(a)
        return a

    async def restart() -> None:
        await agents[-1].stop()
        await start()

    await start()
    try:
        results = await check_agent(await harness.bus(), NODE, timeout=5.0, restart=restart, restart_timeout=10.0)
    finally:
        for a in agents:
            await a.stop()
    assert [r.rule for r in results] == list(RULES)
    return {r.rule: r for r in results}


async def test_busched_agent_passes_every_rule(harness):
    got = await _run(harness)
    assert {k: (r.verdict, r.detail) for k, r in got.items() if r.verdict != "pass"} == {}


# -- deliberately broken agents: each breaks one rule of the protocol --------------------------------------------------
def _ignores_fences(a: Agent) -> None:
    for n in a.nodes.values():
        n.fenced = lambda *_: False  # type: ignore[method-assign]


def _silent_on_unknown_evicts(a: Agent) -> None:
    evict = a._decider.evict

    async def wrapped(n, d, e):
        held = f"{e.namespace}/{e.name}" in n.tasks
        out = await evict(n, d, e)
        if not held:
            out.messages = []  # says nothing about an attempt it does not run
        return out
    a._decider.evict = wrapped  # type: ignore[method-assign]


def _forgets_its_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    async def nothing(*args: Any) -> None:
        return None
    monkeypatch.setattr("busched.agent.agent.load_answers", nothing)


@pytest.mark.parametrize("breakage, broken", [
    (_ignores_fences, {"stale-fence"}),
    # the restart check evicts the attempt the new boot lost: an evict of an attempt it does not run too
    (_silent_on_unknown_evicts, {"evict-unknown", "restart"}),
    ("forgets", {"restart"}),
])
async def test_a_broken_agent_fails_the_rule_it_breaks(harness, monkeypatch, breakage, broken):
    if breakage == "forgets":
        _forgets_its_answers(monkeypatch)
        breakage = None
    got = await _run(harness, breakage=breakage)
    assert {k for k, r in got.items() if r.failed} == broken
    assert all(got[k].detail for k in broken)  # a failure says what the agent did instead
