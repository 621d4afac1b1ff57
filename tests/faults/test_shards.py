"""Issue 13, shards: two `busched run --shard NAME --shard-mode soft` processes whose shards are each other's
spill-over, with more work than fits at once, contending for the same nodes.  The agents do not check
capacity themselves (``--no-capacity-check``): only the node ledgers the sharded schedulers write with their
binds keep every node within its allocatable.  Checked while it runs (sampled from every heartbeat) and after
it settles (`check_invariants`): no node over-committed, no task placed twice, every task placed and run."""

from __future__ import annotations

import asyncio

from busched.api.objects import ClusterSpec, NodeShardSpec
from busched.api.resource import Resource
from busched.framework.config import DEFAULT_CONFIG
from tests.faults.cluster import check_invariants, wait_for, workload

# the second scheduler scores nodes without binpack: the two pick different nodes for the same free room
SPREAD = DEFAULT_CONFIG.replace("  - name: binpack\n", "")
NODE = Resource.from_list({"cpu": "4", "memory": "8Gi"})  # every agent node's allocatable


async def test_two_soft_shards_contending_for_the_same_nodes(cluster):  # noqa: ANN001
    obs = cluster.observer
    await cluster.apply(ClusterSpec(node_shards=[NodeShardSpec(name="sa", nodes_desired=["ta-00", "ta-01"]),
                                                 NodeShardSpec(name="sb", nodes_desired=["tb-00", "tb-01"])]),
                        name="shards")
    conf = cluster.dir / "spread.conf"
    conf.write_text(SPREAD)
    s1 = cluster.scheduler("sched-a", extra=["--shard", "sa", "--shard-mode", "soft"])
    s2 = cluster.scheduler("sched-b", period=0.3,
                           extra=["--shard", "sb", "--shard-mode", "soft", "--config", str(conf)])
    a = cluster.agent("ta", 2, extra=["--no-capacity-check"])
    b = cluster.agent("tb", 2, extra=["--no-capacity-check"])
    await s1.wait_ready()
    await s2.wait_ready()
    await cluster.wait_nodes(a.node_names + b.node_names)

    over: list[str] = []

    async def sample() -> None:
        """Every node's held tasks against its allocatable, from the agents' latest heartbeats."""
        while True:
            for v in list(obs.nodes.values()):
                total = Resource()
                for task in v.holding:
                    spec = cluster.applied.get(task)
                    if spec is not None:
                        total.add(Resource.from_list(spec.requests))
                if not total.less_equal(NODE):
                    over.append(f"{v.node} holds {sorted(v.holding)}")
            await asyncio.sleep(0.05)  # kept: a sampler beside the test (heartbeats come every 0.2 s)

    sampler = asyncio.create_task(sample())
    try:
        # 48 one-cpu tasks of 1.5 s on 16 cpu, in two applies: three waves, both schedulers placing in each
        for i in range(2):
            await cluster.apply(workload("sh", 24, cpu="1", duration=1.5, prefix=f"w{i}-", queue=(i == 0)),
                                name=f"w{i}")
        await wait_for(lambda: len(obs.held()) >= 12, 20, "the first wave running")

        async def all_ran() -> bool:
            tasks = await obs.get("tasks")
            return len(tasks) == 48 and all(t["status"] == "Succeeded" for t in tasks)
        await wait_for(all_ran, 60, "every task run to completion")
        view = await check_invariants(obs, timeout=30)
    finally:
        sampler.cancel()
    assert not over, f"nodes over-committed while running: {over[:5]}"
    doubled = {k: sorted(v) for k, v in obs.bind_decisions.items() if len({n for n, _ in v}) > 1}
    assert not doubled, f"tasks bound to more than one node: {doubled}"
    for t in view:
        assert len(obs.attempts(t)) == 1, f"{t} ran as attempts {sorted(obs.attempts(t))}"
    # every task had exactly one bind decision, whichever scheduler made it
    binds = [await asyncio.to_thread(s.metric_sum, "busched_bind_decisions_total") for s in (s1, s2)]
    assert sum(binds) == len(view) == 48, binds
