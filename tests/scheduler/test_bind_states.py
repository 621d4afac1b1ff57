"""The bind life cycle, transition by transition: one row per (state, event) -> state, status, what is written.

The scheduler's inbound handlers are driven directly (no cycle, no bus I/O: a stub stands where the bus
would be asked to delete a decision); tests/scheduler/test_trust.py and tests/faults/ drive the same transitions
over a real nats-server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import pytest

from busched.api.objects import JobSpec, NodeSpec, QueueSpec, TaskSpec
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.scheduler import Scheduler, SchedulerSettings
from busched.scheduler.records import Binding, NodeLive

KEY = "t/a"


class _NoBus:
    """Where the bus would be: connected, and a decision delete that does nothing."""

    connected = True

    def __init__(self) -> None:
        self.connection_listeners: list[Any] = []
        self.deleted: list[int] = []

    async def delete_decision(self, seq: int) -> bool:
        self.deleted.append(seq)
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make() -> tuple[Scheduler, Clock]:
    clock = Clock()
    s = Scheduler(_NoBus(), settings=SchedulerSettings(max_attempts=3), clock=clock)  # type: ignore[arg-type]
    s.ready = True
    s._caught_up = True
    specs = (("queue", QueueSpec(name="default")), ("job", JobSpec(name="j", namespace="t", min_member=1)),
             ("node", NodeSpec(name="n1", allocatable={"cpu": "4"})),
             ("node", NodeSpec(name="n2", allocatable={"cpu": "4"})),
             ("task", TaskSpec(name="a", namespace="t", job="j", requests={"cpu": "1"})))
    for seq, (kind, spec) in enumerate(specs, start=1):
        key = f"{spec.namespace}/{spec.name}" if hasattr(spec, "namespace") else spec.name
        assert s.handle_state(S.state_subject(kind, key), m.encode(m.upsert(kind, spec, 1)), seq) == "applied"
    for n in ("n1", "n2"):
        s.live[n] = NodeLive(state="alive", last_seen=clock.now, boot=f"boot-{n}", consumer=f"agent-{n}")
    return s, clock


def bound(s: Scheduler, state: str = "binding", *, stop: str = "", boot: str = "", seq: int = 50) -> Binding:
    b = s.bindings[KEY] = Binding(attempt=1, node="n1", state=state, rec_seq=10, seq=seq, stop=stop, boot=boot,
                                  decided=s.clock())
    return b


def result(what: str, *, node: str = "n1", attempt: int = 1, boot: str = "boot-n1", seq: int = 100) -> Callable:
    def go(s: Scheduler) -> str:
        if what == "rejected":
            msg: m.Msg = m.BindRejected(namespace="t", name="a", node=node, attempt=attempt, reason="full", boot=boot)
        elif what == "accepted":
            msg = m.BindAccepted(namespace="t", name="a", node=node, attempt=attempt, boot=boot)
        else:
            msg = m.TaskPhaseChanged(namespace="t", name="a", node=node, attempt=attempt, phase=what, boot=boot,
                                     reason="Evicted: x" if what == "Failed" else "")
        return s.handle_state(S.result_subject(node, KEY), m.encode(msg), seq)
    return go


def heartbeat(boot: str, holding: dict[str, int] | None = None, through: int = 0) -> Callable:
    def go(s: Scheduler) -> str:
        s.handle_heartbeat(S.heartbeat_subject("n1"), m.encode(m.NodeHeartbeat(
            node="n1", boot=boot, holding=holding or {}, through_seq=through)))
        return "heartbeat"
    return go


@dataclass
class Row:
    name: str
    given: Callable[[Scheduler], Any]
    when: list[Callable[[Scheduler], Any]]
    state: str  # the binding's state after
    status: str  # what `busched get tasks` shows
    returns: str = ""  # what the last event returned, when it matters
    written: bool = True  # a binding record queued
    extra: Callable[[Scheduler], Any] = field(default=lambda s: None)


def released_with(reason_part: str, *, excluded: bool, backoff: bool) -> Callable[[Scheduler], None]:
    def check(s: Scheduler) -> None:
        assert reason_part in s.reasons[KEY]
        assert (KEY in s.excluded) == excluded
        assert (KEY in s.backoff_until) == backoff
    return check


ROWS = [
    Row("binding + accepted -> Bound", bound, [result("accepted")], "binding", "Bound", "applied", written=False),
    Row("binding + Running -> Running, the boot pinned", bound, [result("Running")], "binding", "Running", "applied",
        written=False, extra=lambda s: s.bindings[KEY].boot == "boot-n1" or pytest.fail("boot not pinned")),
    Row("binding + rejected -> Pending, excluded, backoff", bound, [result("rejected")], "released", "Pending",
        extra=released_with("rejected by n1", excluded=True, backoff=True)),
    Row("running + Succeeded -> done (final)", bound, [result("Running"), result("Succeeded", seq=101)], "done",
        "Succeeded"),
    Row("running + Failed -> done Failed", bound, [result("Running"), result("Failed", seq=101)], "done", "Failed"),
    Row("done + late Failed -> stale", bound, [result("Succeeded"), result("Failed", seq=101)], "done", "Succeeded",
        "stale"),
    Row("done + Running -> stale", bound, [result("Succeeded"), result("Running", seq=101)], "done", "Succeeded",
        "stale"),
    Row("running + accepted -> no step back", bound, [result("Running"), result("accepted", seq=101)], "binding",
        "Running", "stale", written=False),
    Row("evicting(evict) + Failed -> Pending, no backoff", lambda s: bound(s, "evicting", stop="evict"),
        [result("Failed")], "released", "Pending", extra=released_with("evicted from n1", excluded=False,
                                                                         backoff=False)),
    Row("evicting(lease) + Failed -> Pending, excluded", lambda s: bound(s, "evicting", stop="lease"),
        [result("Failed")], "released", "Pending", extra=released_with("", excluded=True, backoff=True)),
    Row("evicting + Succeeded -> done (it ended first)", lambda s: bound(s, "evicting", stop="evict"),
        [result("Succeeded")], "done", "Succeeded"),
    Row("result from another node -> refused", bound, [result("Running", node="n2")], "binding", "Binding",
        "identity", written=False),
    Row("result for the next attempt -> refused", bound, [result("Running", attempt=2)], "binding", "Binding",
        "identity", written=False),
    Row("result for an older attempt -> stale", lambda s: (bound(s), setattr(s.bindings[KEY], "attempt", 2)),
        [result("Running", attempt=1)], "binding", "Binding", "stale", written=False),
    Row("Running from another boot -> refused", lambda s: bound(s, boot="boot-n1"),
        [result("Running"), result("Running", boot="other", seq=101)], "binding", "Running", "identity",
        written=False),
    Row("evicting + Failed from the new boot -> Pending (proof of stop)",
        lambda s: bound(s, "evicting", stop="restart", boot="boot-n1"), [result("Failed", boot="new")],
        "released", "Pending"),
    Row("agent restarted, attempt answered -> stopped", bound,
        [result("Running"), heartbeat("boot-new")], "evicting", "Releasing",
        extra=lambda s: s.bindings[KEY].stop == "restart" or pytest.fail("not stopped as restart")),
    Row("agent restarted, bind not read yet -> kept (the new boot reads it)", lambda s: bound(s, seq=50),
        [heartbeat("boot-new", through=10)], "binding", "Binding", written=False),
    Row("agent restarted, bind read by the old boot -> stopped",
        lambda s: (bound(s, seq=50), setattr(s.live["n1"], "through_seq", 60)), [heartbeat("boot-new")],
        "evicting", "Releasing"),
    Row("agent restarted but holds the attempt -> kept", bound,
        [result("Running"), heartbeat("boot-new", {KEY: 1})], "binding", "Running", written=False),
    Row("node lost -> Pending", bound, [result("Running"), lambda s: s.liveness.node_lost("n1", "node n1 lost")],
        "released", "Pending", extra=released_with("node n1 lost", excluded=False, backoff=False)),
    Row("task deleted while running -> stopped, kept until stopped", bound,
        [result("Running"), lambda s: s.handle_state(S.state_subject("task", KEY), m.encode(
            m.TaskDelete(name="a", namespace="t")), 200)],
        "evicting", "Releasing", extra=lambda s: (KEY in s.table.deleting and KEY in s.specs["task"])
        or pytest.fail("not kept while stopping")),
    Row("deleted task stopped -> gone, subjects purged", bound,
        [result("Running"), lambda s: s.handle_state(S.state_subject("task", KEY), m.encode(
            m.TaskDelete(name="a", namespace="t")), 200), result("Failed", seq=201)],
        "", "", written=False, extra=lambda s: (KEY not in s.specs["task"] and (S.binding_subject(KEY), None) in
                                                 s.feed.purges) or pytest.fail("not gone and purged")),
    Row("another writer's record -> adopted", bound,
        [lambda s: s.handle_state(S.binding_subject(KEY), m.encode(m.BindingRecord(
            namespace="t", name="a", attempt=2, node="n2", writer="other")), 300)],
        "binding", "Binding", written=False,
        extra=lambda s: (s.bindings[KEY].node, s.bindings[KEY].rec_seq) == ("n2", 300) or pytest.fail("not adopted")),
    Row("our own record heard before its ack -> only its sequence", bound,
        [lambda s: s.handle_state(S.binding_subject(KEY), m.encode(m.BindingRecord(
            namespace="t", name="a", attempt=1, node="n1", writer=s.boot)), 300)],
        "binding", "Binding", "own", written=False,
        extra=lambda s: s.bindings[KEY].rec_seq == 300 or pytest.fail("sequence not taken")),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
async def test_transition(row: Row) -> None:
    s, _ = make()
    row.given(s)
    s._outbox.clear()
    out = ""
    for event in row.when:
        out = event(s)
    b = s.bindings.get(KEY)
    assert (b.state if b is not None else "") == row.state
    assert (s.task_status(KEY) if KEY in s.specs["task"] else "") == row.status
    if row.returns:
        assert out == row.returns
    assert (S.binding_subject(KEY) in s._outbox) == row.written
    row.extra(s)


async def test_refusals_in_a_row_end_in_failed_and_stay_failed() -> None:
    s, clock = make()  # max_attempts=3
    for attempt in (1, 2, 3):
        s.bindings[KEY] = Binding(attempt=attempt, node="n1", rec_seq=10)
        result("rejected", attempt=attempt, seq=100 + attempt)(s)
        clock.now += 120  # past the exclusion and the backoff
    b = s.bindings[KEY]
    assert b.state == "failed" and b.final and s.task_status(KEY) == "Failed"
    assert s.reasons[KEY] == "gave up after 3 failed attempts; the last: rejected by n1: full"
    rec = s._outbox[S.binding_subject(KEY)][0]
    assert isinstance(rec, m.BindingRecord) and rec.state == "failed"


async def test_silence_is_unreachable_then_lost_after_the_grace_and_never_while_disconnected() -> None:
    s, clock = make()
    bound(s)
    result("Running")(s)
    st = s.settings
    from busched.scheduler.records import CycleReport

    s.bus.connected = False  # type: ignore[misc]
    clock.now += st.heartbeat_timeout + st.node_lost_grace + 10
    await s._expire(CycleReport(1))
    assert s.live["n1"].state == "alive" and s.bindings[KEY].state == "binding"
    s.bus.connected = True  # type: ignore[misc]
    s.liveness.on_connection(True)  # every agent gets a fresh window
    await s._expire(CycleReport(2))
    assert s.live["n1"].state == "alive"
    clock.now += st.heartbeat_timeout + 1
    s.live["n2"].last_seen = clock.now
    await s._expire(CycleReport(3))
    assert s.live["n1"].state == "unreachable" and s.bindings[KEY].state == "binding"  # held, not released
    clock.now += st.node_lost_grace
    s.live["n2"].last_seen = clock.now
    await s._expire(CycleReport(4))
    assert s.live["n1"].state == "lost" and s.bindings[KEY].state == "released"
