"""Leader election in process (`busched.scheduler.election`) over a real nats-server: a standby runs no cycle and
writes nothing, takes over a released lease, and every reader ignores a deposed leader's binding records."""

from __future__ import annotations

import asyncio

from busched.api.objects import ClusterSpec, JobSpec, QueueSpec, TaskSpec
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.apply import apply_cluster
from busched.bus.publish import FENCED
from busched.scheduler import overview
from busched.scheduler.election import Election
from busched.scheduler.records import Binding
from tests.faults.cluster import wait_for


async def test_one_leader_a_silent_standby_and_a_clean_handover(harness) -> None:  # noqa: ANN001
    s1 = await harness.scheduler(lease=1.0)
    await wait_for(lambda: s1.election.role == "leader", 5, "s1 leading")
    s2 = await harness.scheduler(lease=1.0)
    assert s2.election.role == "standby" and s2.ready
    assert overview.role(s2).startswith("standby (shard default")
    assert s1.metrics.leader.labels("default")._value.get() == 1
    assert s2.metrics.leader.labels("default")._value.get() == 0
    # the standby's writes are refused before they leave; its cycles do nothing
    ack = await s2.bus.publish(S.leader_subject("default"), m.LeaderEpoch(shard="default", epoch=99))
    assert ack.error == FENCED
    report = await s2.run_once(force=True)
    assert report.skipped and s2.cycle == 0
    epoch = s1.election.epoch
    assert s1.table.epoch == epoch and s1.table.fence_epoch == epoch  # written and read back
    # the standby follows the stream hot: what is applied reaches its cache while it waits
    await apply_cluster(await harness.bus(), ClusterSpec(
        queues=[QueueSpec(name="default")], jobs=[JobSpec(name="j", namespace="p", min_member=1)],
        tasks=[TaskSpec(name="j-0", namespace="p", job="j", requests={"cpu": "1"})]))
    await wait_for(lambda: "p/j-0" in s2.specs["task"] and not s2.effective.dirty_tasks, 5, "the standby's cache")
    assert s2.view("tasks")[0]["status"] == "Pending" and s2.cycle == 0
    # a clean stop releases the lease: the standby leads at its next step, with a newer epoch
    await s1.stop()
    await wait_for(lambda: s2.election.role == "leader", 2, "s2 leading after s1 released the lease")
    assert s2.election.epoch > epoch
    assert s2.table.fence_epoch == s2.election.epoch
    assert s2.metrics.leader_epoch.labels("default")._value.get() == s2.election.epoch


async def test_a_record_of_an_older_epoch_after_a_newer_one_counts_for_nothing(harness) -> None:  # noqa: ANN001
    s = await harness.scheduler(run=False)  # no election: the rule is the readers'
    subj = S.binding_subject("ns/t")

    def record(epoch: int, node: str) -> bytes:
        return m.encode(m.BindingRecord(namespace="ns", name="t", attempt=1, node=node, writer="w", epoch=epoch))

    assert s.handle_state(subj, record(3, "n1"), 10) == "applied"  # epoch 3 leads: its record holds
    assert s.handle_state(S.leader_subject("default"), m.encode(m.LeaderEpoch(shard="default", epoch=5)), 11) \
        == "applied"
    assert s.handle_state(subj, record(3, "n2"), 12) == "fenced"  # written by epoch 3 after epoch 5 took over
    b = s.bindings["ns/t"]
    assert (b.node, b.rec_seq) == ("n1", 12)  # unchanged, but the next record is written over it
    assert s.handle_state(subj, record(5, "n3"), 13) == "applied"
    assert s.bindings["ns/t"].node == "n3"
    # another shard's epoch fences nothing here
    assert s.handle_state(S.leader_subject("other"), m.encode(m.LeaderEpoch(shard="other", epoch=50)), 14) \
        == "stale"
    assert s.handle_state(subj, record(6, "n4"), 15) == "applied"


async def test_without_election_it_writes_with_the_newest_epoch_on_the_stream(harness) -> None:  # noqa: ANN001
    bus = await harness.bus()
    await bus.ensure_streams()
    ack = await bus.publish(S.leader_subject("default"), m.LeaderEpoch(shard="default", epoch=7))
    assert ack.ok
    s = await harness.scheduler(run=False)  # --lease 0 after an elected leader: not taken for a deposed one
    assert s.table.epoch == 7 and s.table.fence_epoch == 7
    assert overview.role(s) == overview.ROLE
    assert s.table.binding_record("ns/t", Binding(attempt=1, node="n1")).epoch == 7


class FakeLease:
    """A lease whose steps the test decides (the real one is tested over a server in tests/bus/test_lease.py)."""

    def __init__(self) -> None:
        self.epoch, self.duration, self.current = 0, 0.3, None
        self.answers: list[bool] = []
        self.is_valid = True
        self.released = False

    async def step(self) -> bool:
        held = self.answers.pop(0) if self.answers else False
        if held:
            self.epoch = max(self.epoch, 4)
        return held

    def valid(self, now: float | None = None) -> bool:
        return self.is_valid

    def lost(self) -> None:
        self.is_valid = False

    async def release(self) -> None:
        self.released = True


async def test_a_leader_that_cannot_renew_or_whose_lease_lapsed_is_deposed() -> None:
    elected: list[int] = []

    async def on_elected(epoch: int) -> None:
        elected.append(epoch)

    # not renewed: deposed at the step that failed, and the loop ends
    lease = FakeLease()
    lease.answers = [False, True, True, False]
    e = Election(lease, shard="default", on_elected=on_elected)
    assert e.role == "standby" and not e.may_write()
    await asyncio.wait_for(e.run(asyncio.Event()), 5)
    assert elected == [4] and e.deposed and not e.may_write() and "not renewed" in e.reason
    # its lease lapsed by its own clock (a pause) while the renewals still answer: the next check deposes it
    lease = FakeLease()
    lease.answers = [True] * 100
    e = Election(lease, shard="default", on_elected=on_elected)
    stop = asyncio.Event()
    task = asyncio.create_task(e.run(stop))
    await wait_for(lambda: e.role == "leader", 5, "leading")
    assert e.check() and e.may_write()
    lease.is_valid = False
    assert not e.may_write()  # the bus refuses every write from this instant
    assert not e.check() and e.deposed and "lapsed" in e.reason
    await asyncio.wait_for(task, 5)
    await e.release()
    assert not lease.released  # a deposed leader does not release what may be another's


async def test_a_record_queued_while_standing_by_is_written_with_the_epoch_won(harness) -> None:  # noqa: ANN001
    """What a standby queues (a record of an agent's result it heard) goes out only once it leads, and then
    with the epoch it holds: written with epoch 0 after its own epoch, every reader, itself included, took it
    for a deposed leader's record, and the task ran again (bench failover, 5,000 tasks)."""
    s1 = await harness.scheduler(lease=1.0)
    await wait_for(lambda: s1.election.role == "leader", 5, "s1 leading")
    s2 = await harness.scheduler(lease=1.0)
    assert s2.election.role == "standby"
    b = Binding(attempt=1, node="n1", state="done", outcome="Succeeded")
    s2.table.bindings["ns/q"] = b
    s2.table.write_binding("ns/q", b)  # queued: a standby writes nothing
    queued = s2._outbox[S.binding_subject("ns/q")][0]
    assert isinstance(queued, m.BindingRecord) and queued.epoch == 0
    # and a stale evict its liveness queued from a heartbeat it heard meanwhile
    evict_subject = S.decision_subject("n1", "evict", "ns/old")
    s2.liveness.send_evict(evict_subject, m.EvictDecision(namespace="ns", name="old", node="n1", attempt=1), "e")
    seen: list[m.BindingRecord] = []
    evicts: list[m.EvictDecision] = []
    bus = await harness.bus()
    await bus.subscribe(S.binding_subject("ns/q"), lambda _s, data: seen.append(m.decode(data)))
    await bus.subscribe(evict_subject, lambda _s, data: evicts.append(m.decode(data)))
    await bus.flush()
    await s1.stop()
    await wait_for(lambda: s2.election.role == "leader", 3, "s2 leading")
    await s2.run_once(force=True)
    await wait_for(lambda: seen, 5, "the queued record written")
    assert seen[-1].epoch == s2.election.epoch > 0 and seen[-1].writer == s2.boot
    await wait_for(lambda: evicts, 5, "the queued evict sent")
    assert evicts[-1].epoch == s2.election.epoch  # at epoch 0 an agent that saw a newer one ignores it
    assert s2.handle_state(S.binding_subject("ns/q"), m.encode(seen[-1]), 10**9) != "fenced"
