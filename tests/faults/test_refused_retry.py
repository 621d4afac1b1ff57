"""Fault 8: an agent refuses a task's first bind.  With nothing else changing in the cluster, the task must be
bound again once its exclusion from the node (and its backoff) has passed, plus a margin.

`busched run` has no flag for the exclusion time (`SchedulerSettings.exclusion_ttl`, 60 s), so this one runs the
scheduler in process (tests/nats_fixture.py's `Harness`) with a 2 s exclusion, on the fault cluster's server; the
agent is in process too (its `on_bind` raises `Reject` once)."""

from __future__ import annotations

import time

from busched.agent import Reject, fleet_nodes
from busched.bus.apply import apply_cluster
from tests.faults.cluster import check_invariants, wait_for, workload
from tests.nats_fixture import Harness

EXCLUSION = 2.0
BACKOFF = 0.2
MARGIN = 4.0


# issue 10 item 10: a refused task is not retried when its exclusion ends unless something else changes in
# the cluster (fixed: this test holds it)
async def test_refused_task_is_retried_after_its_exclusion(cluster):  # noqa: ANN001
    obs = cluster.observer
    h = Harness(cluster.url)
    refused: list[tuple[str, int, float]] = []
    bound: list[tuple[str, int, float]] = []

    def on_bind(node, bind):  # noqa: ANN001, ANN202
        key = f"{bind.task.namespace}/{bind.task.name}"
        if not refused:
            refused.append((key, bind.attempt, time.monotonic()))
            raise Reject("disk full (once)")
        bound.append((key, bind.attempt, time.monotonic()))

    try:
        await h.scheduler(exclusion_ttl=EXCLUSION, backoff_initial=BACKOFF, backoff_max=BACKOFF, period=0.2,
                          heartbeat_timeout=2.0, bind_lease=3.0)
        await h.agent(fleet_nodes(1, cpu="4", memory="8Gi", prefix="ka"), on_bind=on_bind, heartbeat_interval=0.2)
        await cluster.wait_nodes(["ka-00"])
        spec = workload("k8", 1, duration=600)
        await apply_cluster(await h.bus(), spec)
        cluster.applied.update({f"{t.namespace}/{t.name}": t for t in spec.tasks})

        await wait_for(lambda: refused, 10, "the first bind refused")
        await wait_for(lambda: bound, EXCLUSION + BACKOFF + MARGIN,
                       f"the refused task bound again within {EXCLUSION + BACKOFF + MARGIN:g}s")
        assert bound[0][1] == refused[0][1] + 1, (refused, bound)
        view = await check_invariants(obs)
        assert view["k8/j000-0"]["status"] == "Running" and view["k8/j000-0"]["attempt"] == 2, view
        print(f"\nrefused task bound again {bound[0][2] - refused[0][2]:.2f}s after the refusal")
    finally:
        await h.close()
