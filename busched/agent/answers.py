"""Reading back what a node's agent answered before, so a restarted agent never runs an attempt twice.

Every answer an agent gives (``bind.rejected``, ``task.phase``) stays on the state stream under its
node's result subjects; a new incarnation reads the last one per task before it takes decisions.
Its own module because it is the agent's one read of the state stream, done once at start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from busched.agent.node import AgentNode
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.client import Bus

__all__ = ["load_answers"]

log = logging.getLogger("busched.agent")


async def load_answers(bus: Bus, nodes: Mapping[str, AgentNode], boot: str) -> None:
    """Remember in ``nodes`` what their agent answered before (any incarnation).  What an earlier
    incarnation ran is not running now: it is remembered as lost (its bind is not run again; an evict
    of it is answered).  A read that fails (e.g. not permitted) leaves the memory empty."""
    sem = asyncio.Semaphore(16)

    async def read(name: str) -> list[tuple[str, int, bytes]]:
        async with sem:
            return await bus.last_per_subject(S.node_results(name))
    try:
        found = [x for part in await asyncio.gather(*(read(name) for name in nodes)) for x in part]
    except Exception as e:  # noqa: BLE001 - e.g. not permitted: carry on with an empty memory
        log.warning("cannot read this agent's earlier answers: %s", e)
        return
    n_loaded = 0
    for _subject, _seq, data in found:
        try:
            r = m.decode(data)
        except m.DecodeError:
            continue
        if not isinstance(r, (m.BindAccepted, m.BindRejected, m.TaskPhaseChanged)):
            continue
        n = nodes.get(r.node)
        if n is None:
            continue
        if isinstance(r, m.BindRejected):
            outcome = "rejected"
        elif isinstance(r, m.TaskPhaseChanged) and r.phase in ("Succeeded", "Failed"):
            outcome = "evicted" if r.reason.startswith("Evicted") else r.phase
        else:
            outcome = "lost"
        n.remember(f"{r.namespace}/{r.name}", r.attempt, outcome)
        n_loaded += 1
    if n_loaded:
        log.info("agent %s: remembered %d earlier answers", boot, n_loaded)
