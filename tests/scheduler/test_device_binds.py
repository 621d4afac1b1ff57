"""A bind carries the devices deviceshare gave its task (real nats-server): the agent gets them in the task's
annotations, the binding record keeps them, and the next cycle counts them as held."""

from __future__ import annotations

from busched.api.objects import ClusterSpec, JobSpec, NodeSpec, QueueSpec, TaskSpec
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.apply import apply_cluster
from tests.nats_fixture import wait_until

CONFIG = """actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: predicates
  - name: deviceshare
    arguments: {deviceshare.GPUSharingEnable: true}
"""
GPU_NODE = NodeSpec(name="gpu-0", allocatable={"cpu": "8", "memory": "16Gi", "pods": 110,
                                               "volcano.sh/gpu-memory": 2000, "volcano.sh/gpu-number": 2})


def one(name: str) -> ClusterSpec:
    return ClusterSpec(queues=[QueueSpec(name="default")],
                       jobs=[JobSpec(name=name, namespace="p", min_member=1)],
                       tasks=[TaskSpec(name=name, namespace="p", job=name, requests={"volcano.sh/gpu-memory": 700})])


async def test_the_bind_names_the_card_and_the_next_cycle_counts_it(harness):
    bus = await harness.bus()
    await bus.ensure_streams()
    binds: dict[str, dict[str, str]] = {}
    records: dict[str, dict[str, str]] = {}

    def seen(subject: str, data: bytes) -> None:
        msg = m.decode(data)
        if isinstance(msg, m.BindDecision):
            binds[msg.task.name] = msg.task.annotations
        elif isinstance(msg, m.BindingRecord) and msg.state == "binding":
            records[msg.name] = msg.annotations

    await bus.subscribe(f"{S.DECISION_PREFIX}.>", seen)
    await bus.subscribe(f"{S.STATE_PREFIX}.binding.>", seen)
    await bus.flush()
    await harness.agent([GPU_NODE])
    sched = await harness.scheduler(CONFIG)
    await wait_until(lambda: sched.live.get("gpu-0") is not None and sched.live["gpu-0"].state == "alive",
                     what="agent alive")
    await apply_cluster(bus, one("first"))
    await wait_until(lambda: sched.task_status("p/first") == "Running", timeout=20, what="first Running")
    await apply_cluster(bus, one("second"))
    await wait_until(lambda: sched.task_status("p/second") == "Running", timeout=20, what="second Running")
    await bus.flush()
    # card 0 has 300 left after the first: the second gets card 1, which it can only if the first is counted
    assert binds["first"]["volcano.sh/gpu-index"] == "0"
    assert binds["second"]["volcano.sh/gpu-index"] == "1"
    assert records["first"]["volcano.sh/gpu-index"] == "0"
    assert sched.specs["task"]["p/first"].annotations == {}  # the task's own spec is not changed
