"""Queue statuses (busched.scheduler.queue_statuses): alone with a fake publisher, then over a real
nats-server: written by the scheduler after its cycles, only when changed, shown by `busched get queues`,
read back by a restarted scheduler (which then writes nothing again)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from busched.agent import fleet_nodes
from busched.api.objects import ClusterSpec, JobSpec, QueueSpec, TaskSpec
from busched.api.resource import Resource
from busched.api.task import TaskStatus, allocated_status
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.apply import apply_cluster
from busched.cli.main import main
from busched.scheduler.queue_statuses import QueueStatuses
from tests.nats_fixture import wait_until


@dataclass
class Ack:
    ok: bool


@dataclass
class Task:
    resreq: Resource


@dataclass
class Job:
    queue: str
    phase: str
    status_index: dict[TaskStatus, dict[str, Task]] = field(default_factory=dict)
    has_podgroup: bool = True

    @property
    def allocated(self) -> Resource:
        """What JobInfo keeps as its tasks change: the requests of its tasks in an allocated status."""
        held = Resource()
        for status, tasks in self.status_index.items():
            if allocated_status(status):
                for t in tasks.values():
                    held.add(t.resreq)
        return held


@dataclass
class Queue:
    state: str = "Open"
    parent: str = ""


@dataclass
class Ssn:
    queues: dict[str, Queue]
    jobs: dict[str, Job]


def cpu(milli: int) -> Task:
    return Task(Resource(milli, 0))


class Settings:
    status_interval = 0.0


def outbox() -> tuple[QueueStatuses, list[tuple[str, m.Msg]]]:
    published: list[tuple[str, m.Msg]] = []
    version = iter(range(1, 10**6))

    async def publish_all(items: Iterable[tuple[str, m.Msg, str | None]]) -> list[Ack]:
        out = []
        for subj, msg, _ in items:
            published.append((subj, msg))
            out.append(Ack(True))
        return out

    return QueueStatuses(Settings(), lambda: 0.0, publish_all, next_version=lambda: next(version),
                         on_error=lambda: None), published


def test_allocated_and_podgroup_counts_per_queue_written_only_when_changed():
    qs, published = outbox()
    ssn = Ssn({"a": Queue(), "b": Queue(state="Closed")}, {
        "j1": Job("a", "Running", {TaskStatus.Running: {"t1": cpu(1000)}, TaskStatus.Pending: {"t2": cpu(500)}}),
        "j2": Job("a", "Pending", {TaskStatus.Pending: {"t3": cpu(1000)}}),
        "j3": Job("a", "Inqueue", {TaskStatus.Allocated: {"t4": cpu(250)}, TaskStatus.Binding: {"t5": cpu(250)}}),
        "j4": Job("b", "Completed", {TaskStatus.Succeeded: {"t6": cpu(4000)}}),
        # no podgroup: counted in allocated only
        "j5": Job("a", "Running", {TaskStatus.Running: {"t7": cpu(1)}}, has_podgroup=False),
    })
    changed = qs.collect(ssn)
    by = {st.name: st for st in changed}
    assert (by["a"].allocated, by["a"].running, by["a"].pending, by["a"].inqueue) == ({"cpu": "1501m"}, 1, 1, 1)
    assert (by["b"].allocated, by["b"].completed, by["b"].state) == ({}, 1, "Closed")
    assert set(qs.waiting) == {S.queue_status_subject("a"), S.queue_status_subject("b")}
    asyncio.run(qs.write())
    assert [s for s, _ in published] == [S.queue_status_subject("a"), S.queue_status_subject("b")]
    assert qs.collect(ssn) == [] and not qs.waiting  # nothing changed: nothing written
    ssn.jobs["j2"].phase = "Running"
    assert [st.name for st in qs.collect(ssn)] == ["a"]


def test_under_a_root_queue_a_child_s_allocation_counts_for_its_ancestors():
    """Volcano's updateQueueStatus: with a root queue, each task's request is added up the parent chain."""
    qs, _ = outbox()
    ssn = Ssn({"root": Queue(), "eng": Queue(), "ml": Queue(parent="eng"), "ops": Queue(parent="root")}, {
        "j1": Job("ml", "Running", {TaskStatus.Running: {"t": cpu(2000)}}),
        "j2": Job("ops", "Running", {TaskStatus.Bound: {"t": cpu(1000)}}),
    })
    by = {st.name: st.allocated for st in qs.collect(ssn)}
    assert by == {"root": {"cpu": "3"}, "eng": {"cpu": "2"}, "ml": {"cpu": "2"}, "ops": {"cpu": "1"}}


def test_a_status_read_back_is_not_written_again():
    qs, _ = outbox()
    ssn = Ssn({"a": Queue()}, {"j": Job("a", "Pending")})
    qs.record("a", m.QueueStatus(name="a", state="Open", pending=1, version=7))
    assert qs.collect(ssn) == []


def gang(name: str, n: int) -> ClusterSpec:
    return ClusterSpec(jobs=[JobSpec(name=name, namespace="q", queue="team", min_member=n)],
                       tasks=[TaskSpec(name=f"{name}-{i}", namespace="q", job=name,
                                       requests={"cpu": "1", "memory": "1Gi"}) for i in range(n)])


async def last_status(bus: Any, queue: str) -> tuple[int, m.QueueStatus] | None:
    found = await bus.last_state(S.queue_status_subject(queue))
    return None if found is None else (found[0], m.decode(found[1]))


async def test_the_scheduler_writes_queue_statuses_and_busched_get_shows_them(harness: Any, capsys: Any):
    sched = await harness.scheduler(status_interval=0.05)
    await harness.agent(fleet_nodes(1, cpu="2", memory="8Gi"))
    bus = await harness.bus()
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="team")]))
    await apply_cluster(bus, gang("fits", 2))
    await apply_cluster(bus, gang("waits", 2))  # no room left: stays Pending (or Inqueue)

    async def written() -> bool:
        got = await last_status(bus, "team")
        return got is not None and got[1].running == 1 and got[1].allocated.get("cpu") == "2"
    await wait_until(written, what="team's status on the stream")
    seq, st = await last_status(bus, "team")
    assert isinstance(st, m.QueueStatus) and st.allocated["memory"] == str(2 * 2**30)
    assert st.pending + st.inqueue == 1

    assert await asyncio.to_thread(main, ["get", "queues", "--nats", harness.url]) == 0
    out = capsys.readouterr().out.splitlines()
    header, row = out[0].split(), next(r.split() for r in out if r.startswith("team"))
    assert dict(zip(header, row))["RUNNING"] == "1" and dict(zip(header, row))["ALLOCATED"] == "cpu=2,memory=2Gi"
    assert await asyncio.to_thread(main, ["get", "queues", "team", "-o", "yaml", "--nats", harness.url]) == 0
    doc = msgspec.yaml.decode(capsys.readouterr().out)["queues"][0]
    assert doc["status"]["allocated"] == {"cpu": "2", "memory": str(2 * 2**30), "pods": 2}
    assert doc["status"]["running"] == 1

    # quiet cycles change nothing: nothing written; a restarted scheduler reads it back and writes nothing either
    start = sched.cycle
    await wait_until(lambda: sched.cycle >= start + 5, what="more cycles")
    await sched.stop()
    again = await harness.scheduler(status_interval=0.05)
    start = again.cycle
    await wait_until(lambda: again.cycle >= start + 5, what="the restarted scheduler's cycles")
    assert (await last_status(bus, "team"))[0] == seq
    assert again.queue_statuses.recorded["team"].running == 1
