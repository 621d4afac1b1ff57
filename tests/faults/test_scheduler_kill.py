"""Fault 2: the scheduler process is SIGKILLed mid-burst and restarted."""

from __future__ import annotations

import asyncio

from tests.faults.cluster import check_invariants, dump, wait_for, workload


def _row(t: dict) -> tuple:  # noqa: ANN001
    return (t["status"], t.get("node"), t.get("attempt"))


async def test_scheduler_sigkill_mid_burst_nothing_lost_or_doubled(cluster):  # noqa: ANN001
    obs = cluster.observer
    sched = cluster.scheduler()
    a = cluster.agent("sa", 2)
    b = cluster.agent("sb", 2)
    await sched.wait_ready()
    await cluster.wait_nodes(a.node_names + b.node_names)

    # phase 1: a first batch, settled; the scheduler's view before the kill
    await cluster.apply(workload("s2", 10, prefix="early"))
    before = await check_invariants(obs)

    # phase 2: a burst in several applies; the scheduler is killed while it is arriving
    async def burst() -> None:
        for i in range(5):
            await cluster.apply(workload("s2", 4, prefix=f"burst{i}-", queue=False), name=f"burst{i}")
            await asyncio.sleep(0.15)
    feeder = asyncio.create_task(burst())
    await wait_for(lambda: any(k.startswith("s2/burst") for k in obs.held()), 20, "the burst starting to run")
    sched.kill()
    await feeder  # the burst goes on while no scheduler runs
    await asyncio.sleep(0.5)
    cluster.scheduler(name="sched-r")
    await cluster.schedulers[-1].wait_ready()

    after = await check_invariants(obs)
    assert len(after) == 30, f"{len(after)} tasks in the view after the restart, 30 applied"
    # the first batch is exactly as it was before the kill
    changed = {k: (_row(before[k]), _row(after[k])) for k in before if _row(before[k]) != _row(after[k])}
    assert not changed, f"tasks changed across the restart (before, after): {changed}\n{dump(after)}"
    # no task bound twice: one bind attempt per task on the wire and on the agents
    doubled = {k: sorted(v) for k, v in obs.bind_decisions.items() if len(v) != 1}
    assert not doubled, f"tasks with more than one bind decision: {doubled}"
    assert all(t["attempt"] == 1 for t in after.values()), dump(after)
    assert all(len(obs.attempts(k)) == 1 for k in after), {k: obs.attempts(k) for k in after}
