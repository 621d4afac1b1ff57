"""Fault 4: two scheduler processes on one bus (e.g. a second deployment started by mistake, or an old one not
yet gone).  Whatever they do, no task may be bound to two nodes, none left Failed, and no reservation left
behind: every task eventually runs, once."""

from __future__ import annotations

import asyncio

from busched.framework.config import DEFAULT_CONFIG
from tests.faults.cluster import check_invariants, dump, wait_for, workload

# the default configuration without binpack
SPREAD = DEFAULT_CONFIG.replace("  - name: binpack\n", "")


# issue 10 item 6: two schedulers on one bus bind a task twice, leave tasks Failed as stale and nodes with
# phantom reservations (fixed: this test holds it)
async def test_two_schedulers_on_one_bus_bind_each_task_once(cluster):  # noqa: ANN001
    obs = cluster.observer
    s1 = cluster.scheduler("sched-1", period=0.2)
    # the second is an older deployment: it cycles on its timer alone and orders nodes without binpack, so the two
    # decide at different moments, from different states, by different scores
    conf = cluster.dir / "spread.conf"
    conf.write_text(SPREAD)
    s2 = cluster.scheduler("sched-2", period=0.35, extra=["--no-trigger", "--config", str(conf)])
    a = cluster.agent("ta", 2)
    b = cluster.agent("tb", 2)
    await s1.wait_ready()
    await s2.wait_ready()
    await cluster.wait_nodes(a.node_names + b.node_names)

    # 24 tasks x 500m on 16 cpu: all fit once each (12 cpu).  The agents are paused (SIGSTOP, shorter than the
    # heartbeat timeout) while the work arrives in three applies, so both schedulers decide before any agent
    # answers, each from the batches it has seen by its own cycle.
    a.pause()
    b.pause()
    for i in range(3):
        await cluster.apply(workload("t4", 8, prefix=f"w{i}-", queue=(i == 0), durations=[600, 600, 2.0]),
                            name=f"w{i}")
        await asyncio.sleep(0.2)
    await asyncio.sleep(0.4)
    a.resume()
    b.resume()
    await wait_for(lambda: len(obs.held()) >= 16, 20, "the work running")
    await asyncio.sleep(4.0)  # longer than the bind lease (3 s): what either scheduler holds against the other shows
    view = await check_invariants(obs, timeout=30)

    doubled = {k: sorted(v) for k, v in obs.bind_decisions.items() if len({n for n, _ in v}) > 1}
    assert not doubled, f"tasks bound to more than one node: {doubled}"
    for s in (s1, s2):
        failed = await asyncio.to_thread(s.metric_sum, "busched_tasks", status="Failed")
        assert failed == 0, f"{s.name} counts {failed} Failed tasks\n{dump(view)}"
    for t in view:
        assert len(obs.attempts(t)) <= 1, f"{t} ran as attempts {sorted(obs.attempts(t))}"
