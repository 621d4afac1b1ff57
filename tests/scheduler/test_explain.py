"""`busched explain` over a real nats-server: one test per reason code of issue 11, item 8.

Each asks the running scheduler (request/reply, as the command does) and checks the stable reason code and
a fragment of the message; the analysis runs on a copy of the cache, so asking changes nothing.
"""

from __future__ import annotations

from typing import Any

import msgspec

from busched.agent import Reject, fleet_nodes
from busched.api.k8s_specs import Taint
from busched.api.objects import ClusterSpec, JobSpec, QueueSpec, TaskSpec
from busched.bus import messages as m
from busched.bus.apply import apply_cluster
from busched.cli.get import lookup
from tests.nats_fixture import held_by_node, wait_until


def cluster(*, queue: QueueSpec | None = None, job: JobSpec | None = None, tasks: list[TaskSpec] | None = None,
            cpu: str = "1", n: int = 1, **task_kw: Any) -> ClusterSpec:
    job = job or JobSpec(name="j", namespace="t", min_member=1)
    return ClusterSpec(queues=[queue or QueueSpec(name="default")], jobs=[job],
                       tasks=tasks if tasks is not None else [
                           TaskSpec(name=f"j-{i}", namespace="t", job=job.name, requests={"cpu": cpu}, **task_kw)
                           for i in range(n)])


async def explained(harness: Any, name: str, code: str, timeout: float = 5.0) -> dict[str, Any]:
    """Ask until the answer has ``code`` (the state reaches the scheduler asynchronously); the last answer."""
    bus = await harness.bus()
    last: dict[str, Any] = {}

    async def ask() -> bool:
        nonlocal last
        try:
            last = await lookup(bus, "explain", "", name, timeout=2)
        except RuntimeError as e:
            last = {"error": str(e)}
        return last.get("reason") == code
    try:
        await wait_until(ask, timeout=timeout, what=f"explain {name} -> {code}")
    except AssertionError:
        raise AssertionError(f"explain {name}: wanted {code}, last answer {last}") from None
    return last


async def test_node_too_small(harness):
    sched = await harness.scheduler()
    await harness.agent(fleet_nodes(2, cpu="4", memory="8Gi"))
    await apply_cluster(await harness.bus(), cluster(cpu="8"))
    out = await explained(harness, "t/j-0", "NodeTooSmall")
    assert out["message"] == "0/2 nodes are unavailable: 2 Insufficient cpu."
    assert out["nodes"] == {"Insufficient cpu": 2} and out["scores"] == {}
    # the job is explained by its first waiting task
    job = await explained(harness, "t/j", "NodeTooSmall")
    assert job["message"].startswith("task t/j-0: 0/2 nodes are unavailable")
    assert sched.view("tasks")[0]["status"] == "Pending"  # asking changed nothing


async def test_queue_capability_exhausted(harness):
    await harness.scheduler()
    await harness.agent(fleet_nodes(1, cpu="8", memory="8Gi"))
    await apply_cluster(await harness.bus(), cluster(
        queue=QueueSpec(name="default", capability={"cpu": "2"}),
        job=JobSpec(name="j", namespace="t", min_member=1, min_resources={"cpu": "4"}), cpu="4"))
    out = await explained(harness, "t/j-0", "QueueCapabilityExhausted")
    assert "job-enqueueable rejected by proportion" in out["message"]
    assert "capability cpu=2" in out["message"]


async def test_queue_capability_exhausted_per_task(harness):
    await harness.scheduler()
    await harness.agent(fleet_nodes(1, cpu="8", memory="8Gi"))
    await apply_cluster(await harness.bus(), cluster(queue=QueueSpec(name="default", capability={"cpu": "2"}),
                                                     cpu="4"))
    out = await explained(harness, "t/j-0", "QueueCapabilityExhausted")
    assert "queue default cannot take task t/j-0" in out["message"] and "proportion" in out["message"]


async def test_queue_closed(harness):
    await harness.scheduler()
    await harness.agent(fleet_nodes(1, cpu="8", memory="8Gi"))
    await apply_cluster(await harness.bus(), cluster(queue=QueueSpec(name="default", state="Closed")))
    out = await explained(harness, "t/j-0", "QueueClosed")
    assert "queue default is Closed" in out["message"]


async def test_queue_missing(harness):
    await harness.scheduler()
    await harness.agent(fleet_nodes(1, cpu="8", memory="8Gi"))
    await apply_cluster(await harness.bus(), cluster(job=JobSpec(name="j", namespace="t", queue="nope")))
    out = await explained(harness, "t/j-0", "QueueMissing")
    assert "names queue 'nope', which does not exist" in out["message"]


async def test_job_missing(harness):
    await harness.scheduler()
    await harness.agent(fleet_nodes(1, cpu="8", memory="8Gi"))
    await apply_cluster(await harness.bus(), ClusterSpec(
        queues=[QueueSpec(name="default")], tasks=[TaskSpec(name="orphan", namespace="t", job="ghost",
                                                             requests={"cpu": "1"})]))
    out = await explained(harness, "t/orphan", "JobMissing")
    assert "names job 't/ghost', which does not exist" in out["message"]


async def test_gang_min_member_unreachable(harness):
    await harness.scheduler()
    await harness.agent(fleet_nodes(1, cpu="8", memory="8Gi"))
    await apply_cluster(await harness.bus(), cluster(job=JobSpec(name="j", namespace="t", min_member=3), n=2))
    out = await explained(harness, "t/j-0", "GangMinMemberUnreachable")
    assert "2 tasks, fewer than its minMember 3" in out["message"]
    job = await explained(harness, "t/j", "GangMinMemberUnreachable")
    assert "minMember 3" in job["message"]


async def test_untolerated_taint(harness):
    await harness.scheduler()
    node = msgspec.structs.replace(fleet_nodes(1, cpu="8", memory="8Gi")[0],
                                   taints=[Taint(key="gpu", value="true", effect="NoSchedule")])
    await harness.agent([node])
    await apply_cluster(await harness.bus(), cluster())
    out = await explained(harness, "t/j-0", "UntoleratedTaint")
    assert "1 node(s) had untolerated taint {gpu: true}" in out["message"]
    assert out["nodes"] == {"node(s) had untolerated taint {gpu: true}": 1}


async def test_selector_mismatch(harness):
    await harness.scheduler()
    await harness.agent(fleet_nodes(3, cpu="8", memory="8Gi"))
    await apply_cluster(await harness.bus(), cluster(node_selector={"zone": "mars"}))
    out = await explained(harness, "t/j-0", "SelectorMismatch")
    assert "3 node(s) didn't match Pod's node affinity/selector" in out["message"]


async def test_excluded_after_refusal(harness):
    sched = await harness.scheduler(exclusion_ttl=60)
    refusals: list[int] = []

    def on_bind(node: str, bind: m.BindDecision) -> None:
        if not refusals:
            refusals.append(bind.attempt)
            raise Reject("not yet")

    await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi"), on_bind=on_bind)
    await apply_cluster(await harness.bus(), cluster(node_selector={"kubernetes.io/hostname": "node-00"}))
    await wait_until(lambda: refusals and "t/j-0" in sched.excluded, what="refused once")
    out = await explained(harness, "t/j-0", "ExcludedAfterRefusal")
    assert "1 node node-00 refused this task recently" in out["message"]
    assert refusals == [1]


async def test_placed_with_scores_and_unknown_name(harness):
    await harness.scheduler()
    agent = await harness.agent(fleet_nodes(2, cpu="8", memory="8Gi"))
    await apply_cluster(await harness.bus(), cluster())
    await wait_until(lambda: any("t/j-0" in v for v in held_by_node(agent).values()), what="placed")
    out = await explained(harness, "t/j-0", "Running")
    assert out["node"] in ("node-00", "node-01")
    bus = await harness.bus()
    try:
        await lookup(bus, "explain", "", "t/nothing", timeout=2)
    except RuntimeError as e:
        assert "no task or job 't/nothing'" in str(e)
    else:
        raise AssertionError("an unknown name is an error")


async def test_schedulable_task_shows_best_nodes_by_plugin(harness):
    sched = await harness.scheduler(run=False)  # no cycle: the task stays Pending
    await harness.agent(fleet_nodes(3, cpu="8", memory="8Gi"))
    await apply_cluster(await harness.bus(), cluster())
    await wait_until(lambda: len(sched.specs["node"]) == 3 and all(
        lv.state == "alive" for lv in sched.live.values()) and "t/j-0" in sched.specs["task"], what="seen")
    out = await explained(harness, "t/j-0", "Schedulable")
    assert out["message"].startswith("3/3 nodes are available")
    assert len(out["scores"]) == 3
    for s in out["scores"].values():
        assert {"binpack", "nodeorder", "total"} <= set(s)
        assert abs(s["total"] - sum(v for k, v in s.items() if k != "total")) < 1e-9
