"""Fault 7: decisions around an agent's death and a task's end.

* An agent acks a bind (reports Running) and dies; the scheduler releases the task; the agent comes back (a new
  boot) and consumes the newer decision: the task runs once, as the newer attempt, and both views agree.
* A late evict for a task that already Succeeded (its attempt, on its node): the scheduler keeps it Succeeded.
"""

from __future__ import annotations

import asyncio

from busched.bus import messages as m
from busched.bus import subjects as S
from tests.faults.cluster import check_invariants, dump, wait_for, workload

NS = "r7"


async def test_agent_acks_bind_dies_restarts_with_a_newer_decision(cluster):  # noqa: ANN001
    obs = cluster.observer
    sched = cluster.scheduler(heartbeat_timeout=2.0, bind_lease=3.0)
    a = cluster.agent("ha", 1)
    other = cluster.agent("hb", 1)  # an idle second node: the fleet is not silent as a whole
    await sched.wait_ready()
    await cluster.wait_nodes(a.node_names + other.node_names)
    node = a.node_names[0]
    await cluster.apply(workload(NS, 4, duration=600, node_selector={"kubernetes.io/hostname": node}))
    before = await check_invariants(obs)
    assert all(t["attempt"] == 1 and t["node"] == node for t in before.values()), dump(before)

    a.kill()  # it had acked every bind (Running reported)
    await asyncio.sleep(3.0)  # past the heartbeat timeout (2 s): the scheduler may have released the tasks
    cluster.restart_agent(a)  # new boot; its consumer has the old binds acked, the newer ones waiting

    async def rerun() -> bool:
        view = await obs.tasks()
        return all(t["status"] == "Running" and t["attempt"] == 2 for t in view.values())
    await wait_for(rerun, 25, "every task running again as attempt 2")
    after = await check_invariants(obs)
    assert all(obs.held()[k] == (node, 2) for k in after), obs.held()
    late = {k: sorted(obs.attempts(k)) for k in after if obs.attempts(k) - {1, 2}}
    assert not late, f"unexpected attempts on the agent: {late}"


# issue 10 item 8: a late evict for a Succeeded task turns it Failed (fixed: this test holds it)
async def test_late_evict_for_a_succeeded_task_keeps_it_succeeded(cluster):  # noqa: ANN001
    obs = cluster.observer
    sched = cluster.scheduler()
    a = cluster.agent("ia", 2)
    await sched.wait_ready()
    await cluster.wait_nodes(a.node_names)
    await cluster.apply(workload(NS, 4, durations=[1.0, 600]))
    key = f"{NS}/j000-0"

    async def succeeded() -> bool:
        return (await obs.tasks())[key]["status"] == "Succeeded"
    await wait_for(succeeded, 15, f"{key} Succeeded")
    before = await check_invariants(obs)
    node, attempt = before[key]["node"], before[key]["attempt"]
    assert node and attempt == 1, dump(before)

    # the evict of its attempt arrives after it finished (e.g. decided by a scheduler just before the Succeeded)
    ev = m.EvictDecision(version=2**62, namespace=NS, name="j000-0", node=node, attempt=attempt, reason="late")
    await obs.publish_raw(S.decision_subject(node, "evict", key), m.encode(ev), msg_id=f"evict:{key}:{attempt}")
    await asyncio.sleep(1.5)

    after = await check_invariants(obs)
    assert after[key]["status"] == "Succeeded", f"a late evict changed a Succeeded task: {after[key]}"
    assert {k: v["status"] for k, v in after.items() if k != key} == \
        {k: v["status"] for k, v in before.items() if k != key}, dump(after)
