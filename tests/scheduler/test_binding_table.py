"""The binding table alone (busched.scheduler.bindings.BindingTable): a fake bus, plain dicts for the specs,
liveness and outbox, the clock injected; no nats-server and no Scheduler."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from busched.api import objects as o
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.client import Ack
from busched.metrics import SchedulerMetrics
from busched.scheduler.bindings import BindingTable
from busched.scheduler.records import CycleReport, NodeLive, SchedulerSettings

KEY = "t/a"


@dataclass
class Decision:
    task: str
    node: str
    kind: str = "bind"
    reason: str = ""
    annotations: dict[str, str] = field(default_factory=dict)


class FakeBus:
    """Records what is published; every write is stored unless told otherwise."""

    def __init__(self) -> None:
        self.seq = 0
        self.records: list[tuple[str, Any, int | None]] = []  # (subject, message, expected sequence)
        self.decisions: list[tuple[str, Any, str]] = []
        self.conflict: set[str] = set()  # subjects whose conditional write loses
        self.last: dict[str, tuple[int, bytes]] = {}
        self.deleted: list[int] = []
        self.delete_answer: bool | None = True  # True deleted, False gone already, None unknown
        self.delivered: int | None = None

    async def publish_all(self, items: Iterable[tuple[Any, ...]]) -> list[Ack]:
        acks = []
        for subj, msg, mid, *expect in items:
            if subj in self.conflict:
                acks.append(Ack(error="wrong last sequence", conflict=True))
                continue
            self.seq += 1
            if mid is None:  # (binding records come encoded: the table keeps their bytes until acknowledged)
                self.records.append((subj, m.decode(msg) if isinstance(msg, bytes) else msg,
                                     expect[0] if expect else None))
            else:
                self.decisions.append((subj, msg, mid))
            acks.append(Ack(seq=self.seq))
        return acks

    async def last_state(self, subject: str) -> tuple[int, bytes] | None:
        return self.last.get(subject)

    async def last_decision(self, subject: str) -> tuple[int, bytes] | None:
        return None

    async def delete_decision(self, seq: int) -> bool | None:
        self.deleted.append(seq)
        return self.delete_answer

    async def consumer_delivered(self, consumer: str) -> int | None:
        return self.delivered


class World:
    def __init__(self, **settings: Any) -> None:
        self.now = 100.0
        self.bus = FakeBus()
        self.live: dict[str, NodeLive] = {"n1": NodeLive(state="alive", consumer="c1"),
                                          "n2": NodeLive(state="alive", consumer="c2")}
        self.outbox: dict[str, tuple[m.Msg, str | None]] = {}
        self.tasks = {KEY: o.TaskSpec(name="a", namespace="t", job="j")}
        self.nodes = {"n1": o.NodeSpec(name="n1"), "n2": o.NodeSpec(name="n2")}
        self.refreshed: list[str] = []
        self.finished: list[str] = []
        self.work = 0
        self.version = 0
        self.cycle = 0
        self.specs = {"task": self.tasks}

        def next_version() -> int:
            self.version += 1
            return self.version

        def new_work() -> None:
            self.work += 1

        self.table = BindingTable(SchedulerSettings(**settings), lambda: self.now, self.bus, boot="me",
                                  metrics=SchedulerMetrics(), next_version=next_version, task_specs=self.tasks,
                                  node_specs=self.nodes, live=self.live, outbox=self.outbox,
                                  refresh_task=self.refreshed.append, new_work=new_work,
                                  finish_delete=self.finished.append, purge_object=lambda kind, key: None,
                                  reject=lambda reason, kind, text: reason, count=lambda kind, what: None,
                                  ready=lambda: True, journal=self)
        self.table.caught_up = True

    def wall_clock(self) -> float:  # the journal's (events_log)
        return 1.0e9

    async def bind(self, node: str = "n1") -> CycleReport:
        report = CycleReport(1)
        await self.table.publish_binds([Decision(KEY, node)], report)
        return report

    def result(self, what: str, node: str = "n1", attempt: int | None = None, reason: str = "") -> str:
        b = self.table.bindings[KEY]
        attempt = b.attempt if attempt is None else attempt
        msg: m.BindAccepted | m.BindRejected | m.TaskPhaseChanged
        if what == "accepted":
            msg = m.BindAccepted(namespace="t", name="a", node=node, attempt=attempt, boot="agent1")
        elif what == "rejected":
            msg = m.BindRejected(namespace="t", name="a", node=node, attempt=attempt, reason=reason, boot="agent1")
        else:
            msg = m.TaskPhaseChanged(namespace="t", name="a", node=node, attempt=attempt, phase=what,
                                     reason=reason, boot="agent1")
        self.bus.seq += 1
        return self.table.apply_result(KEY, msg, self.bus.seq)


async def test_a_bind_is_written_ahead_then_sent_with_its_fence() -> None:
    w = World()
    report = await w.bind()
    b = w.table.bindings[KEY]
    assert (b.state, b.attempt, b.node) == ("binding", 1, "n1")
    (subj, rec, expect), = w.bus.records
    assert subj == S.binding_subject(KEY) and rec.attempt == 1 and rec.writer == "me" and expect == 0
    (dsubj, dec, mid), = w.bus.decisions
    assert dsubj == S.decision_subject("n1", "bind", KEY) and mid == f"bind:{KEY}:1" and dec.fence == b.rec_seq
    assert report.binds == [(KEY, "n1")] and b.published and b.seq == w.bus.seq


async def test_accepted_running_succeeded_is_final_and_recorded() -> None:
    w = World()
    await w.bind()
    assert w.result("accepted") == "applied"
    assert w.result("Running") == "applied"
    assert w.result("Succeeded") == "applied"
    b = w.table.bindings[KEY]
    assert (b.state, b.outcome, b.boot) == ("done", "Succeeded", "agent1") and b.final
    assert S.binding_subject(KEY) in w.outbox
    assert w.result("Failed") == "stale"  # a final state is not rewritten


async def test_a_refusal_sends_the_task_back_with_backoff_and_keeps_it_off_the_node() -> None:
    w = World(backoff_initial=1.0, exclusion_ttl=60.0)
    await w.bind()
    w.result("rejected", reason="no room")
    b = w.table.bindings[KEY]
    assert b.state == "released" and "rejected by n1: no room" in b.reason
    assert w.table.backoff_until[KEY] == 101.0 and w.table.failures[KEY] == 1
    assert w.table.excluded[KEY] == {"n1": 160.0}
    # the backoff ends with the clock
    w.now = 102.0
    await w.table.expire(CycleReport(2), w.now, calm=True)
    assert KEY not in w.table.backoff_until


async def test_max_attempts_failures_in_a_row_fail_the_task() -> None:
    w = World(max_attempts=2)
    for _ in range(2):
        await w.bind()
        w.result("rejected")
    b = w.table.bindings[KEY]
    assert b.state == "failed" and b.final and "gave up after 2 failed attempts" in b.reason
    report = await w.bind()
    assert report.binds == []  # given up: not placed again


async def test_a_lease_ending_on_an_undelivered_bind_releases_it_at_once() -> None:
    w = World(bind_lease=10.0)
    await w.bind()
    seq = w.table.bindings[KEY].seq
    w.bus.delivered = seq - 1  # the agent's consumer never got that far
    w.now += 11.0
    report = CycleReport(2)
    await w.table.expire(report, w.now, calm=True)
    assert w.bus.deleted == [seq]
    assert w.table.bindings[KEY].state == "released" and report.released == [(KEY, "lease")]


async def test_a_lease_ending_whose_decision_may_still_be_on_the_stream_is_not_released() -> None:
    """The delete's outcome unknown (unanswered, or a deposed scheduler's): the decision may still reach the
    agent later, so the consumer's position says nothing; the attempt is stopped, not released."""
    w = World(bind_lease=10.0)
    await w.bind()
    seq = w.table.bindings[KEY].seq
    w.bus.delivered = seq - 1  # not delivered yet: but it may be, since it may not be deleted
    w.bus.delete_answer = None
    w.now += 11.0
    await w.table.expire(CycleReport(2), w.now, calm=True)
    b = w.table.bindings[KEY]
    assert (b.state, b.stop) == ("evicting", "lease") and KEY not in w.table.excluded


async def test_a_lease_ending_on_a_decision_gone_from_the_stream_and_never_delivered_releases_it() -> None:
    w = World(bind_lease=10.0)
    await w.bind()
    seq = w.table.bindings[KEY].seq
    w.bus.delivered = seq - 1
    w.bus.delete_answer = False  # gone already (the stream's limits): it can never be delivered now
    w.now += 11.0
    await w.table.expire(CycleReport(2), w.now, calm=True)
    assert w.table.bindings[KEY].state == "released"


async def test_a_lease_ending_on_a_delivered_bind_stops_the_attempt_and_waits_for_the_agent() -> None:
    w = World(bind_lease=10.0)
    await w.bind()
    w.bus.delivered = w.table.bindings[KEY].seq  # delivered: its outcome is unknown
    w.now += 11.0
    await w.table.expire(CycleReport(2), w.now, calm=True)
    b = w.table.bindings[KEY]
    assert (b.state, b.stop) == ("evicting", "lease") and KEY in w.table.unpublished
    # the agent answers the evict: only now is the task free (and kept off the node)
    w.result("Failed", reason="stopped")
    assert w.table.bindings[KEY].state == "released" and "n1" in w.table.excluded[KEY]


async def test_no_lease_ends_while_silence_means_nothing() -> None:
    w = World(bind_lease=10.0)
    await w.bind()
    w.now += 100.0
    await w.table.expire(CycleReport(2), w.now, calm=False)
    assert w.table.bindings[KEY].state == "binding"


async def test_a_lost_conditional_write_adopts_the_winners_record() -> None:
    w = World()
    w.bus.conflict.add(S.binding_subject(KEY))
    theirs = m.BindingRecord(version=9, namespace="t", name="a", attempt=1, node="n2", state="binding",
                             writer="other")
    w.bus.last[S.binding_subject(KEY)] = (42, m.encode(theirs))
    report = await w.bind()
    assert report.binds == [] and w.bus.decisions == []
    b = w.table.bindings[KEY]
    assert (b.node, b.rec_seq) == ("n2", 42)


def _many(w: World, n: int) -> list[str]:
    keys = [f"t/b{i}" for i in range(n)]
    for k in keys:
        w.tasks[k] = o.TaskSpec(name=k[2:], namespace="t", job="j")
    return keys


async def test_a_lost_condition_in_one_chunk_loses_only_its_task(monkeypatch) -> None:
    from busched.scheduler import bindings

    monkeypatch.setattr(bindings, "WRITE_AHEAD_CHUNK", 2)
    w = World()
    keys = _many(w, 6)
    w.bus.conflict.add(S.binding_subject(keys[3]))
    theirs = m.BindingRecord(version=9, namespace="t", name="b3", attempt=1, node="n2", state="binding",
                             writer="other")
    w.bus.last[S.binding_subject(keys[3])] = (42, m.encode(theirs))
    report = CycleReport(1)
    await w.table.publish_binds([Decision(k, "n1") for k in keys], report)
    assert report.binds == [(k, "n1") for k in keys if k != keys[3]]
    assert {dec.task.name for _, dec, _ in w.bus.decisions} == {k[2:] for k in keys if k != keys[3]}
    assert (w.table.bindings[keys[3]].node, w.table.bindings[keys[3]].rec_seq) == ("n2", 42)


async def test_a_result_from_another_node_or_an_unbound_attempt_is_refused() -> None:
    w = World()
    await w.bind()
    assert w.result("Running", node="n2") == "identity"
    assert w.result("Running", attempt=5) == "identity"


async def test_a_deleted_task_is_stopped_then_finished_when_its_agent_answers() -> None:
    w = World()
    await w.bind()
    w.result("Running")
    assert w.table.stopping_delete(KEY)
    b = w.table.bindings[KEY]
    assert (b.state, b.stop) == ("evicting", "deleted") and KEY in w.table.deleting
    w.result("Failed", reason="evicted")
    assert w.finished == [KEY]


async def test_records_heard_from_another_scheduler_hold_and_ours_are_own() -> None:
    w = World()
    rec = m.BindingRecord(version=1, namespace="t", name="a", attempt=3, node="n2", state="released",
                          reason="rejected", backoff=2.0, writer="other")
    assert w.table.apply_binding(KEY, rec, 50) == "applied"
    assert w.table.reasons[KEY] == "rejected" and w.table.backoff_until[KEY] == 102.0
    assert w.table.max_rec_seq == 50
    mine = m.BindingRecord(version=2, namespace="t", name="a", attempt=4, node="n1", state="binding", writer="me")
    assert w.table.apply_binding(KEY, mine, 51) == "own"
    assert w.table.apply_binding(KEY, rec, 40) == "stale"


async def test_forget_drops_everything_of_a_task() -> None:
    w = World()
    await w.bind()
    w.result("rejected")
    w.table.forget(KEY)
    t = w.table
    assert not any(KEY in d for d in (t.bindings, t.results, t.backoff_until, t.failures, t.excluded, t.reasons))
