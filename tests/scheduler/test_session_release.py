"""The scheduler's loop releases each session once it has read it (`Session.release`), so a finished
session is freed by reference counting: a running scheduler collects rarely (busched.scheduler.memory)
and what a session left in reference cycles would otherwise pile up cycle over cycle.  Over a real
nats-server."""

from __future__ import annotations

import gc

from busched.agent import fleet_nodes
from busched.api.objects import ClusterSpec, JobSpec, TaskSpec
from busched.bus.apply import apply_cluster
from tests.helpers import sessions_left_for_the_collector
from tests.nats_fixture import wait_until


async def test_the_loops_sessions_leave_nothing_for_the_collector(harness):
    sched = await harness.scheduler(run=False)
    await harness.agent(fleet_nodes(2, cpu="4", memory="8Gi"))
    # two tasks that fit and one that fits no node (its fit errors are kept on the job)
    tasks = [TaskSpec(name=f"a-{i}", namespace="t", job="a", requests={"cpu": "1"}) for i in range(2)]
    tasks.append(TaskSpec(name="big-0", namespace="t", job="big", requests={"cpu": "64"}))
    await apply_cluster(await harness.bus(), ClusterSpec(
        jobs=[JobSpec(name="a", namespace="t", min_member=1), JobSpec(name="big", namespace="t", min_member=1)],
        tasks=tasks))
    await wait_until(lambda: len(sched.cache.objects["node"]) == 2 and len(sched.specs["task"]) == 3,
                     what="the nodes and tasks in the cache")
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        binds = []
        for _ in range(3):
            binds += (await sched.run_once(force=True)).binds
        assert sorted(t for t, _ in binds) == ["t/a-0", "t/a-1"]  # the cycles did decide something
        left = sessions_left_for_the_collector()
        assert not left, f"left for the collector: {left}"
    finally:
        if was:
            gc.enable()
