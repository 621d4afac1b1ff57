"""Fault 6: forged agent results.  A rogue publisher writes, on node B's own result subject, a ``task.phase
Running`` for a task bound to node A (with attempt + 1), and one for a task that was never bound.  The real
task keeps running on A; the never-bound task does not show Running."""

from __future__ import annotations

import asyncio

from busched.bus import messages as m
from busched.bus import subjects as S
from tests.faults.cluster import check_invariants, dump, workload

NS = "f6"


async def _two_nodes(cluster):  # noqa: ANN001, ANN202
    obs = cluster.observer
    sched = cluster.scheduler()
    a = cluster.agent("ga", 1)
    b = cluster.agent("gb", 1)
    await sched.wait_ready()
    await cluster.wait_nodes(a.node_names + b.node_names)
    return obs, a.node_names[0], b.node_names[0]


# issue 10 item 5: a result on another node's subject with a newer attempt is believed: the real task is
# evicted / moved (fixed: this test holds it)
async def test_forged_running_for_a_task_bound_elsewhere(cluster):  # noqa: ANN001
    obs, node_a, node_b = await _two_nodes(cluster)
    await cluster.apply(workload(NS, 3, duration=600, node_selector={"kubernetes.io/hostname": node_a}))
    before = await check_invariants(obs)
    key = f"{NS}/j000-0"
    assert before[key]["node"] == node_a and before[key]["status"] == "Running", dump(before)
    attempt = before[key]["attempt"]

    forged = m.TaskPhaseChanged(version=2**62, namespace=NS, name="j000-0", node=node_b, attempt=attempt + 1,
                                phase="Running", boot="rogue")
    await obs.publish_raw(S.result_subject(node_b, key), m.encode(forged))
    await asyncio.sleep(1.5)  # a few cycles and heartbeats

    after = await check_invariants(obs)
    assert (after[key]["status"], after[key]["node"], after[key]["attempt"]) == ("Running", node_a, attempt), \
        f"the forged result moved the task: {after[key]}"
    assert obs.attempts(key) == {attempt}, f"attempts seen on the agents: {obs.attempts(key)}"


# issue 10 item 5: a Running result for a task never bound is taken as a bind the scheduler lost
# (fixed: this test holds it)
async def test_forged_running_for_a_task_never_bound(cluster):  # noqa: ANN001
    obs, node_a, node_b = await _two_nodes(cluster)
    # fits nowhere (no node has the label): never bound
    await cluster.apply(workload(NS, 1, duration=600, prefix="nowhere", node_selector={"zone": "nowhere"}))
    await cluster.apply(workload(NS, 2, duration=600, queue=False), name="good")
    await check_invariants(obs, all_placed=False)
    key = f"{NS}/nowhere000-0"

    forged = m.TaskPhaseChanged(version=2**62, namespace=NS, name="nowhere000-0", node=node_b, attempt=1,
                                phase="Running", boot="rogue")
    await obs.publish_raw(S.result_subject(node_b, key), m.encode(forged))
    await asyncio.sleep(1.5)

    after = await check_invariants(obs, all_placed=False)
    assert after[key]["status"] == "Pending", f"a task never bound shows {after[key]}"
    assert all(after[k]["status"] == "Running" for k in after if k != key), dump(after)
