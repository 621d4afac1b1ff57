"""A bind whose record its readers would refuse fails cleanly while other tasks bind (real nats-server): a vGPU
task taking 100 cards whose register names are long gets an assignment of more than 4,096 characters
(busched.scheduler.write_bounds).  No record of that bind and no decision reach the stream or the agent; the
task goes back to Pending, its FailedScheduling event and metric name it and the field, and the cards it was
given are free for the next task."""

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
    arguments: {deviceshare.VGPUEnable: true}
"""
CARDS = 100
REGISTER = "".join(f"GPU-{i:04d}-0123456789abcdef0123456789abcdef,10,1000,NVIDIA-Tesla-V100,true,hami-core:"
                   for i in range(CARDS))
NODE = NodeSpec(name="vgpu-0", annotations={"volcano.sh/node-vgpu-register": REGISTER},
                allocatable={"cpu": "64", "memory": "64Gi", "pods": 110, "volcano.sh/vgpu-number": 10 * CARDS,
                             "volcano.sh/vgpu-memory": 1000 * CARDS, "volcano.sh/vgpu-cores": 100 * CARDS})
IDS = "volcano.sh/vgpu-ids-new"


def job(name: str, cards: int) -> ClusterSpec:
    return ClusterSpec(queues=[QueueSpec(name="default")],
                       jobs=[JobSpec(name=name, namespace="p", min_member=1)],
                       tasks=[TaskSpec(name=name, namespace="p", job=name,
                                       requests={"volcano.sh/vgpu-number": cards, "volcano.sh/vgpu-memory": 900})])


async def test_an_oversized_assignment_fails_its_bind_cleanly_while_the_others_bind(harness):
    bus = await harness.bus()
    await bus.ensure_streams()
    decisions: list[str] = []
    records: list[tuple[str, str, int]] = []

    def seen(subject: str, data: bytes) -> None:
        msg = m.decode(data)  # (whatever is written decodes: a refused one would raise here, in the callback)
        if isinstance(msg, m.BindDecision):
            decisions.append(msg.task.name)
        elif isinstance(msg, m.BindingRecord):
            records.append((msg.name, msg.state, len(msg.annotations.get(IDS, ""))))

    await bus.subscribe(f"{S.DECISION_PREFIX}.>", seen)
    await bus.subscribe(f"{S.STATE_PREFIX}.binding.>", seen)
    await bus.flush()
    agent = await harness.agent([NODE])
    sched = await harness.scheduler(CONFIG, max_attempts=2, exclusion_ttl=0.3)  # (its only node: tried again)
    await wait_until(lambda: sched.live.get("vgpu-0") is not None and sched.live["vgpu-0"].state == "alive",
                     what="agent alive")
    await apply_cluster(bus, job("big", CARDS))  # 100 cards: an assignment of about 6,000 characters
    await wait_until(lambda: sched.table.bindings.get("p/big") is not None
                     and sched.table.bindings["p/big"].state == "failed", timeout=20, what="big Failed")
    # then a task taking every card's memory but a tenth on 10 cards: it fits only if big's cards were freed
    await apply_cluster(bus, job("small", 10))
    await wait_until(lambda: sched.task_status("p/small") == "Running", timeout=20, what="small Running")
    await bus.flush()

    b = sched.table.bindings["p/big"]
    assert "gave up after 2 failed attempts" in b.reason
    assert f"bind to vgpu-0 not written: annotations.{IDS}: " in b.reason and "more than 4096" in b.reason
    assert sched.task_status("p/big") == "Failed"
    # no bind of big reached the stream or the agent; its records are released ones, without annotations
    assert "big" not in decisions and "p/big" not in agent.nodes["vgpu-0"].tasks
    assert [(state, n) for name, state, n in records if name == "big"] == [("released", 0), ("failed", 0)]
    assert [state for name, state, n in records if name == "small" and 0 < n <= 4096] == ["binding"]
    assert decisions == ["small"]
    # the event and the metrics name the task and the field
    events = [(k[1], k[3], k[4]) for k in sched.sched_events.series if k[3] == "FailedScheduling"]
    assert any(task == "p/big" and f"failed to bind to node vgpu-0: annotations.{IDS}: " in msg
               for task, _, msg in events), events
    assert sched.metrics.writes_refused.labels("binding", "annotations")._value.get() == 2
    assert sched.metrics.releases.labels("invalid")._value.get() == 2
