"""Fault 1: an agent process is SIGKILLed mid-run and restarted with the same node names (a new boot)."""

from __future__ import annotations

import asyncio

from tests.faults.cluster import check_invariants, wait_for, workload


async def test_agent_sigkill_restarted_tasks_replaced_exactly_once(cluster):  # noqa: ANN001
    obs = cluster.observer
    sched = cluster.scheduler(heartbeat_timeout=2.0, bind_lease=3.0)
    a = cluster.agent("fa", 2)
    b = cluster.agent("fb", 2)
    await sched.wait_ready()
    await cluster.wait_nodes(a.node_names + b.node_names)

    # 20 tasks of 500m on 4 x 4 cpu: all fit; some finish during the test, most run on
    await cluster.apply(workload("f1", 20, durations=[600, 600, 600, 3.0]))
    await wait_for(lambda: len(obs.held()) == 20, 20, "all 20 tasks held by the agents")

    before = dict(obs.held())
    on_a = {t: at for t, (node, at) in before.items() if node in a.node_names}
    assert on_a, f"no task landed on {a.node_names}: {before}"
    a.kill()
    await asyncio.sleep(0.5)
    cluster.restart_agent(a)  # same nodes, new boot, same durable consumer

    async def replaced() -> bool:
        view = await obs.tasks()
        return all(view[t]["status"] in ("Running", "Succeeded") and view[t]["attempt"] > at
                   for t, at in on_a.items())
    await wait_for(replaced, 20, f"the {len(on_a)} tasks of the killed agent placed again")
    view = await check_invariants(obs)

    # re-placed exactly once: one more attempt, and never more than two attempts seen on the agents
    for t, at in on_a.items():
        assert view[t]["attempt"] == at + 1, f"{t}: attempt {view[t]['attempt']}, expected {at + 1}"
        assert obs.attempts(t) <= {at, at + 1}, f"{t}: attempts seen on the agents {obs.attempts(t)}"
    # the tasks elsewhere were left alone
    for t, (node, at) in before.items():
        if t not in on_a:
            assert view[t]["attempt"] == at, f"{t} (on {node}) was moved: attempt {at} -> {view[t]['attempt']}"
