"""The live scheduler's clock and creation times (issue 11, item 1), over a real nats-server.

A cycle's ``now`` is the scheduler's wall clock read once at the cycle's start (``wall_clock``, injected
here: no test waits for real time to pass), and each object's creation time is the ``created`` of its spec,
which `busched apply` fills with the submission time and keeps across updates (docs/bus.md, "Creation
times").  Jobs of equal priority are taken in submission order, then by identity (Volcano); sla, tdm and
rescheduling see the injected clock.
"""

from __future__ import annotations

import msgspec

from busched.agent import fleet_nodes
from busched.api.objects import ClusterSpec, JobSpec, QueueSpec, TaskSpec
from busched.api.timestamp import parse_time
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.apply import apply_cluster, cluster_events, rfc3339
from tests.nats_fixture import held_by_node, wait_until

T0 = parse_time("2026-03-02T09:00:00Z")  # a Monday, 09:00 UTC


class Clock:
    """An injected wall clock: epoch seconds, moved by the test."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def one_task_job(name: str, *, cpu: str = "1", ns: str = "t", job_kw: dict | None = None,
                 task_kw: dict | None = None) -> ClusterSpec:
    return ClusterSpec(jobs=[JobSpec(name=name, namespace=ns, min_member=1, **(job_kw or {}))],
                       tasks=[TaskSpec(name=f"{name}-0", namespace=ns, job=name,
                                       **{"requests": {"cpu": cpu}, **(task_kw or {})})])


QUEUE = ClusterSpec(queues=[QueueSpec(name="default")])


def status(sched, key: str) -> str:  # noqa: ANN001
    return next((t["status"] for t in sched.view("tasks") if f"{t['namespace']}/{t['name']}" == key), "")


def placed(*agents) -> set[str]:  # noqa: ANN002
    return {k for tasks in held_by_node(*agents).values() for k in tasks}


async def cycles(sched, n: int = 3) -> None:  # noqa: ANN001
    """Wait until ``n`` more cycles have run."""
    start = sched.cycle
    await wait_until(lambda: sched.cycle >= start + n, what=f"{n} cycles")


def never_skipped(sched) -> bool:  # noqa: ANN001
    """The quiet-cycle gate is off with a plugin that reads the clock: every cycle ran a session."""
    return not sched._gate.enabled and sched._gate.skipped == 0


# -- creation order ---------------------------------------------------------------------------------------------------
async def test_equal_priority_jobs_are_placed_in_submission_order(harness):
    sched = await harness.scheduler()
    bus = await harness.bus()
    await apply_cluster(bus, QUEUE)
    await apply_cluster(bus, one_task_job("b"))  # submitted first ...
    await apply_cluster(bus, one_task_job("a"))  # ... by name a would win
    await wait_until(lambda: {"t/a-0", "t/b-0"} <= set(sched.specs["task"]), what="both applied")
    specs = sched.specs["job"]
    assert parse_time(specs["t/b"].created) < parse_time(specs["t/a"].created)
    agent = await harness.agent(fleet_nodes(1, cpu="1", memory="1Gi"))  # room for one
    await wait_until(lambda: placed(agent), what="one placed")
    await cycles(sched)
    assert placed(agent) == {"t/b-0"}
    assert status(sched, "t/a-0") == "Pending"


async def test_submission_order_survives_an_update_and_a_scheduler_restart(harness):
    first = await harness.scheduler()
    bus = await harness.bus()
    await apply_cluster(bus, QUEUE)
    await apply_cluster(bus, one_task_job("b"))
    await wait_until(lambda: "t/b-0" in first.specs["task"], what="b applied")
    await first.stop()  # the scheduler restarts in between
    await apply_cluster(bus, one_task_job("a"))
    # b updated after a was submitted: it keeps its creation time (read back from the stream)
    created_b = msgspec.json.decode(msgspec.json.encode(first.specs["job"]["t/b"].created))
    await apply_cluster(bus, one_task_job("b", job_kw={"labels": {"updated": "yes"}},
                                          task_kw={"labels": {"updated": "yes"}}))
    last = m.decode((await bus.last_state(S.state_subject("job", "t/b")))[1])
    assert last.job.labels == {"updated": "yes"} and last.job.created == created_b

    second = await harness.scheduler()
    assert second.specs["job"]["t/b"].created == created_b
    agent = await harness.agent(fleet_nodes(1, cpu="1", memory="1Gi"))
    await wait_until(lambda: placed(agent), what="one placed")
    await cycles(second)
    assert placed(agent) == {"t/b-0"}
    assert status(second, "t/a-0") == "Pending"


async def test_without_created_identity_decides(harness):
    """A raw publisher that sends no ``created``: every such object has the epoch, so a comes first."""
    sched = await harness.scheduler()
    bus = await harness.bus()
    for spec in (QUEUE, one_task_job("b"), one_task_job("a")):
        acks = await bus.publish_all((subj, msg, None) for subj, msg in cluster_events(spec))
        assert all(a.ok for a in acks)
    await wait_until(lambda: {"t/a-0", "t/b-0"} <= set(sched.specs["task"]), what="both applied")
    assert sched.specs["job"]["t/b"].created is None
    agent = await harness.agent(fleet_nodes(1, cpu="1", memory="1Gi"))
    await wait_until(lambda: placed(agent), what="one placed")
    await cycles(sched)
    assert placed(agent) == {"t/a-0"}


async def test_apply_keeps_a_given_created_and_fills_the_others(harness):
    bus = await harness.bus()
    given = "2026-01-01T00:00:00Z"
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="q")],
                                         jobs=[JobSpec(name="j", created=given)],
                                         tasks=[TaskSpec(name="j-0", job="j")]), now=T0)
    job = m.decode((await bus.last_state(S.state_subject("job", "default/j")))[1]).job
    task = m.decode((await bus.last_state(S.state_subject("task", "default/j-0")))[1]).task
    queue = m.decode((await bus.last_state(S.state_subject("queue", "q")))[1]).queue
    assert job.created == given
    assert task.created == queue.created == rfc3339(T0) == "2026-03-02T09:00:00.000000Z"
    assert parse_time(task.created) == T0


# -- the clock: recorded on the report, seen by the plugins -----------------------------------------------------------
async def test_a_cycle_reads_the_wall_clock_once_and_records_it(harness):
    reads: list[float] = []

    def clock() -> float:
        reads.append(T0 + len(reads))
        return reads[-1]

    sched = await harness.scheduler(run=False, wall_clock=clock)
    report = await sched.run_once(force=True)
    assert reads == [T0] and report.now == T0
    report = await sched.run_once(force=True)
    assert reads == [T0, T0 + 1] and report.now == T0 + 1


SLA = """
actions: "enqueue, allocate"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: sla
- plugins:
  - name: overcommit
  - name: predicates
"""


async def test_sla_admits_a_job_once_it_has_waited_its_waiting_time(harness):
    clock = Clock(T0)
    sched = await harness.scheduler(SLA, wall_clock=clock)
    agent = await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi"))
    bus = await harness.bus()
    await apply_cluster(bus, QUEUE)
    # its minResources exceed what overcommit lets in (4 cpu x 1.2): rejected until sla permits it
    await apply_cluster(bus, one_task_job("slow", job_kw={
        "min_resources": {"cpu": "8"}, "annotations": {"sla-waiting-time": "1h"}, "created": rfc3339(T0 - 60)}))
    await wait_until(lambda: "t/slow-0" in sched.specs["task"], what="applied")
    await cycles(sched)
    assert not placed(agent) and status(sched, "t/slow-0") == "Pending"
    clock.t = T0 + 3539  # 59:59 after its creation
    await cycles(sched)
    assert not placed(agent)
    clock.t = T0 + 3540  # one hour
    await wait_until(lambda: placed(agent) == {"t/slow-0"}, what="admitted by sla and placed")
    assert never_skipped(sched)


TDM = """
actions: "enqueue, allocate, shuffle"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: tdm
    arguments:
      tdm.revocable-zone.rz1: "10:00-12:00"
      tdm.evict.period: 1m
- plugins:
  - name: predicates
"""


async def test_tdm_lends_a_revocable_node_during_its_window_and_takes_it_back(harness):
    clock = Clock(T0)  # 09:00 UTC: the zone is closed
    sched = await harness.scheduler(TDM, wall_clock=clock)
    agent = await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi", prefix="rz",
                                            labels={"volcano.sh/revocable-zone": "rz1"}))
    bus = await harness.bus()
    await apply_cluster(bus, QUEUE)
    await apply_cluster(bus, one_task_job("spot", task_kw={"annotations": {"volcano.sh/preemptable": "true"}}))
    await wait_until(lambda: "t/spot-0" in sched.specs["task"], what="applied")
    await cycles(sched)
    assert not placed(agent) and status(sched, "t/spot-0") == "Pending"
    clock.t = T0 + 5400  # 10:30: open
    await wait_until(lambda: placed(agent) == {"t/spot-0"}, what="placed on the revocable node")
    await wait_until(lambda: status(sched, "t/spot-0") == "Running", what="running")
    await cycles(sched)
    assert not [e for e in agent.history if e[0] == "evict"]
    clock.t = T0 + 12600  # 12:30: closed again, its preemptable tasks are evicted
    await wait_until(lambda: [e for e in agent.history if e[0] == "evict"], what="evicted by tdm")
    await wait_until(lambda: not placed(agent), what="stopped")
    await cycles(sched)
    assert not placed(agent) and status(sched, "t/spot-0") == "Pending"
    assert never_skipped(sched)


RESCHEDULING = """
actions: "enqueue, allocate, shuffle"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: rescheduling
    arguments:
      interval: 5m
      strategies:
      - name: lowNodeUtilization
        params:
          thresholds: {cpu: 20, memory: 20}
          targetThresholds: {cpu: 50, memory: 50}
- plugins:
  - name: predicates
"""


async def test_rescheduling_runs_once_its_interval_has_passed(harness):
    clock = Clock(T0)
    sched = await harness.scheduler(RESCHEDULING, wall_clock=clock)
    hot = await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi", prefix="hot"))
    bus = await harness.bus()
    await apply_cluster(bus, QUEUE)
    for i in range(4):
        await apply_cluster(bus, one_task_job(f"w{i}", task_kw={"requests": {"cpu": "1", "memory": "1Gi"}}))
    await wait_until(lambda: len(placed(hot)) == 4, what="the hot node full")
    cold = await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi", prefix="cold"))
    await wait_until(lambda: sched.live.get("cold-00") is not None and sched.live["cold-00"].state == "alive",
                     what="the cold node alive")
    clock.t = T0 + 299  # within the interval of the scheduler's first session
    await cycles(sched)
    assert not [e for e in hot.history if e[0] == "evict"]
    clock.t = T0 + 301
    await wait_until(lambda: [e for e in hot.history if e[0] == "evict"], what="rescheduled")
    await cycles(sched, 5)
    evicts = [e for e in hot.history if e[0] == "evict"]
    assert 1 <= len(evicts) <= 2  # lowNodeUtilization: until the cold node's room (50%) is used up
    clock.t = T0 + 301 + 299  # the next run is one interval after this one: nothing more meanwhile
    await cycles(sched, 5)
    assert [e for e in hot.history if e[0] == "evict"] == evicts
    await wait_until(lambda: len(placed(hot, cold)) == 4, what="the evicted tasks placed again")
    assert never_skipped(sched)
