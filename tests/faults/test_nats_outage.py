"""Fault 3: the nats-server is stopped for longer than the heartbeat timeout, then restarted on the same port and
store.  Nobody failed but the bus: running tasks must not be restarted."""

from __future__ import annotations

import asyncio

from tests.faults.cluster import check_invariants, dump, wait_for, workload


# issue 10 item 9: a bus outage is taken for node failure (fixed: this test holds it)
async def test_nats_outage_longer_than_heartbeat_timeout_restarts_nothing(cluster):  # noqa: ANN001
    obs = cluster.observer
    sched = cluster.scheduler(heartbeat_timeout=2.0, bind_lease=3.0)
    a = cluster.agent("na", 2)
    b = cluster.agent("nb", 2)
    await sched.wait_ready()
    await cluster.wait_nodes(a.node_names + b.node_names)
    await cluster.apply(workload("n3", 16, duration=600))
    before = await check_invariants(obs)
    releases_before = await asyncio.to_thread(sched.metric_sum, "busched_task_releases_total")

    cluster.stop_nats()
    await asyncio.sleep(5.0)  # 2.5 x the heartbeat timeout, under load (16 tasks running)
    cluster.start_nats()
    await wait_for(lambda: all(obs.fresh(n) for n in a.node_names + b.node_names), 20,
                   "the agents heartbeating again after the outage")
    await sched.wait_ready()

    after = await check_invariants(obs)
    moved = {k: (before[k]["node"], before[k]["attempt"], after[k]["node"], after[k]["attempt"], after[k]["status"])
             for k in before if (after[k]["node"], after[k]["attempt"]) != (before[k]["node"], before[k]["attempt"])}
    assert not moved, f"tasks restarted by a bus outage (node, attempt before -> after, status): {moved}"
    restarted = {k: sorted(obs.attempts(k)) for k in before if len(obs.attempts(k)) > 1}
    assert not restarted, f"attempts seen on the agents: {restarted}"
    lost = [(k, r.attempt, r.reason) for k, recs in (await obs.binding_history()).items() for r in recs
            if r.state == "released"]
    assert not lost, f"binding records released during the outage: {lost}"
    releases = await asyncio.to_thread(sched.metric_sum, "busched_task_releases_total")
    assert releases == releases_before, f"busched_task_releases_total went {releases_before} -> {releases}\n" \
                                        f"{dump(after)}"
