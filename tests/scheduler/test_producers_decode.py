"""What the scheduler and the agent write, their readers accept: every producer, fed adversarial but accepted
inputs (reasons as long as a message its reader takes can carry, control characters that JSON writes in 6
bytes, long names and task keys, many conditions), makes messages that pass the strict decoder of their
readers: the state feed's (`busched.scheduler.events`: at most ``max_event_bytes``, then the `Message`
union's types, then its own checks), the agent's (`busched.bus.messages.decode`) and the events' readers'.

The producers are the real ones: the binding table's records (`busched.scheduler.binding_writes`) after
agents' answers and evictions, the agent's answers (`busched.agent.decisions.Decider`, `Agent.report_phase`),
the podgroup statuses (`busched.scheduler.statuses`), the node ledgers (`busched.scheduler.ledger`) and the
scheduling events (`busched.scheduler.sched_events`).  The bind's own annotations are
tests/scheduler/test_write_bounds.py's."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from busched.agent import Agent, fleet_nodes
from busched.agent.node import HeldTask
from busched.api import objects as o
from busched.api.build import JOB_PHASES
from busched.api.resource import Resource
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.publish import Ack
from busched.bus.wire import MAX_REASON
from busched.scheduler.ledger import NodeLedgers
from busched.scheduler.records import CycleReport, SchedulerSettings
from busched.scheduler.sched_events import EventRecorder, EventSettings
from busched.scheduler.statuses import PodGroupStatuses
from tests.agent.test_agent_parts import FakeBus as AgentBus
from tests.agent.test_agent_parts import FakeDelivery, _bind, _decider, _node
from tests.scheduler.test_binding_table import KEY, Decision, World

LIMIT = SchedulerSettings().max_event_bytes
_SETTINGS = settings(max_examples=60, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def state_reader_takes(msg: m.Msg) -> bool:
    """The state feed's checks, in its order: the size, then the types (`busched.scheduler.events`)."""
    data = m.encode(msg)
    if len(data) > LIMIT:
        return False
    try:
        got = m.decode(data)
    except m.DecodeError:
        return False
    return not isinstance(got, m.PodGroupStatus) or got.phase in JOB_PHASES


def decodes(msg: m.Msg) -> bool:
    try:
        m.decode(m.encode(msg))
    except m.DecodeError:
        return False
    return True


# a reason up to what a result message its reader takes can carry; ASCII or control characters (6 bytes in JSON)
_lengths = st.sampled_from([0, 100, 4096, 4097, 40_000, LIMIT // 6 - 200, LIMIT - 400, LIMIT - 150])
_chars = st.sampled_from(["r", "\x01", "é"])


@st.composite
def reasons(draw: st.DrawFn) -> str:
    return draw(_chars) * draw(_lengths)


# -- the scheduler's binding records, after the agents' answers and evictions ---------------------------------------
@_SETTINGS
@given(reason=reasons(), attempts=st.sampled_from([0, 1, 3]), answer=st.sampled_from(["rejected", "Failed",
                                                                                       "Succeeded", "evict"]))
def test_binding_records_pass_the_state_feed(reason: str, attempts: int, answer: str) -> None:
    # the agent's answer itself is one the feed takes
    assume(state_reader_takes(m.BindRejected(namespace="t", name="a", node="n1", attempt=1, reason=reason,
                                             boot="agent1")))
    w = World(max_attempts=attempts)

    async def run() -> None:
        await w.table.publish_binds([Decision(KEY, "n1", annotations={"volcano.sh/gpu-index": "0"})],
                                    CycleReport(1))
        if answer == "evict":
            await w.table.publish_evicts([Decision(KEY, "n1", kind="evict", reason=reason)], CycleReport(2))
        else:
            w.result("accepted")
            w.result(answer, reason=reason)

    asyncio.run(run())
    written = [r for _, r, _ in w.bus.records] + [r for r, _ in w.outbox.values()]
    assert written
    for rec in written:
        assert state_reader_takes(rec), (rec.state, len(m.encode(rec)))
    for _, msg, _ in w.bus.decisions:  # the agent's decoder
        assert decodes(msg)


# -- the agent's answers ---------------------------------------------------------------------------------------------
@_SETTINGS
@given(reason=reasons())
def test_the_agents_answers_pass_the_state_feed(reason: str) -> None:
    # a bind refused by the agent's own code, with whatever reason it gives
    n = _node()
    bus = AgentBus()
    d, _ = _decider(n, bus, on_bind=lambda node, b: reason or None)
    asyncio.run(d.handle_batch([FakeDelivery(*_bind(n.name, "j-0", 1), seq=1)]))
    # an evict of a task the agent runs, whose reason is long (passed on as the Failed phase's)
    d, _ = _decider(n, bus)
    subj, bind = _bind(n.name, "j-1", 1)
    ev = m.EvictDecision(namespace="t", name="j-1", node=n.name, attempt=1, reason=reason)
    asyncio.run(d.handle_batch([FakeDelivery(subj, bind, seq=2),
                                FakeDelivery(S.decision_subject(n.name, "evict", "t/j-1"), ev, seq=3)]))
    evicted = [msg for _, msg in bus.published if isinstance(msg, m.TaskPhaseChanged) and msg.name == "j-1"
               and msg.phase == "Failed"]
    assert [msg.reason[:9] for msg in evicted] == ["Evicted: "]
    assert bus.published
    for _, msg in bus.published:
        assert state_reader_takes(msg), (type(msg).__name__, len(m.encode(msg)))
        # (a reason its producer writes is cut: busched.bus.wire.MAX_REASON)
        assert len(getattr(msg, "reason", "")) <= MAX_REASON, (type(msg).__name__, len(msg.reason))

    # a phase the agent's owner reports (`Agent.report_phase`: the SDK's), with the reason it gives
    class Bus:
        published: list[m.Msg] = []

        async def publish(self, subject: str, msg: m.Msg, msg_id: str | None = None) -> Ack:
            self.published.append(msg)
            return Ack(seq=1)

    spec = fleet_nodes(1)[0]
    pbus = Bus()
    agent = Agent(pbus, [spec], consume=False, register=False)  # type: ignore[arg-type]
    agent.nodes[spec.name].tasks["t/x"] = HeldTask("t/x", 1, o.TaskSpec(name="x", namespace="t"), Resource(),
                                                   started=0.0)
    assert asyncio.run(agent.report_phase(spec.name, "t/x", "Failed", reason=reason, exit_code=1))
    assert state_reader_takes(pbus.published[-1])


# -- podgroup statuses -----------------------------------------------------------------------------------------------
@_SETTINGS
@given(message=reasons(), n=st.sampled_from([1, 2, 8, 40, 300]))
def test_podgroup_statuses_pass_the_state_feed(message: str, n: int) -> None:
    """A gang message carries the first task's fit error, which may quote the task's annotations (a vGPU UUID
    constraint): as long as a task spec can be; a job spec's own conditions come along."""
    spec = o.JobSpec(name="j", namespace="t")
    conds = [{"type": f"C{i}", "status": "True", "reason": "r" * 100, "message": message, "transitionID": "s"}
             for i in range(n)]
    job = SimpleNamespace(has_podgroup=True, conditions=conds, phase="Pending")
    queued: list[m.PodGroupStatus] = []
    statuses = PodGroupStatuses(SimpleNamespace(status_interval=1.0), lambda: 0.0, None,  # type: ignore[arg-type]
                                job_specs={"t/j": spec}, next_version=lambda: 1, refresh_job=lambda key: None,
                                on_error=lambda: None)
    statuses.queue = lambda subject, st: queued.append(st)  # type: ignore[method-assign]
    asyncio.run(statuses.collect(SimpleNamespace(jobs={"t/j": job})))
    assert len(queued) == 1
    assert state_reader_takes(queued[0]), len(m.encode(queued[0]))
    # and the same conditions again are no change (they are compared as written)
    queued.clear()
    asyncio.run(statuses.collect(SimpleNamespace(jobs={"t/j": job})))
    assert queued == []


# -- node ledgers ----------------------------------------------------------------------------------------------------
@_SETTINGS
@given(name_len=st.sampled_from([1, 253, 254, 600, 601, 3000]), writer_len=st.sampled_from([1, 253, 254, 400]),
       count=st.sampled_from([1, 999, 1000, 1500]), char=st.sampled_from(["x", "\x01", "é"]))
def test_node_ledgers_pass_the_state_feed(name_len: int, writer_len: int, count: int, char: str) -> None:
    # (keys of control characters take 6 bytes a character in JSON)
    batches: list[Any] = []

    class Bus:
        async def publish_batches(self, bs: Any, timeout: float = 10.0) -> list[Ack]:
            bs = [list(b) for b in bs]
            batches.extend(bs)
            return [Ack(seq=len(b)) for b in bs]

        async def last_state(self, subject: str) -> None:
            return None

    ledgers = NodeLedgers("s" * writer_len, "w" * writer_len)
    ledgers.snapshot_taken()
    items = [(f"t/{char * name_len}{i}", "n1", f"busched.state.binding.t.{i}",
              m.BindingRecord(namespace="t", name=str(i), attempt=1, node="n1"), 0) for i in range(count)]
    asyncio.run(ledgers.write(Bus(), items))  # type: ignore[arg-type]
    found = [msg for b in batches for _, msg, _ in b if isinstance(msg, m.NodeLedger)]
    assert found
    keys = {key for key, *_ in items}
    for msg in found:
        assert state_reader_takes(msg), len(m.encode(msg))
        # (informational: the batch's tasks, each cut to its bound, as many as fit)
        assert msg.tasks and all(t in keys or (len(t) == 600 and t.endswith("...")) for t in msg.tasks)


# -- scheduling events -----------------------------------------------------------------------------------------------
@_SETTINGS
@given(name_len=st.sampled_from([1, 1024, 1025, 4000]), message=reasons(), reason_len=st.sampled_from([1, 128, 500]))
def test_scheduling_events_pass_their_readers(name_len: int, message: str, reason_len: int) -> None:
    rec = EventRecorder(EventSettings(), lambda items: None, boot=lambda: "b" * 300, on_error=lambda: None)
    rec.publish_due = lambda now: None  # type: ignore[method-assign]
    key = f"{'n' * name_len}/{'x' * name_len}"
    rec.add("task", key, "Warning", "R" * reason_len, message, 1.0)
    rec.add("queue", "q" * name_len, "Warning", "Overused", message, 1.0)
    for k, s in rec.series.items():
        assert decodes(rec.event(k, s))


# -- the agent's heartbeats ------------------------------------------------------------------------------------------
def test_an_agent_is_not_made_with_a_heartbeat_interval_its_readers_refuse() -> None:
    """`NodeHeartbeat.interval` is over 0 and at most 3600: an agent beating slower would never be heard."""
    import argparse

    import pytest

    from busched.cli.agent import _interval

    spec = fleet_nodes(1)[0]
    for bad in (0.0, 3601.0, -1.0):
        with pytest.raises(ValueError, match="heartbeat_interval"):
            Agent(None, [spec], consume=False, register=False, heartbeat_interval=bad)  # type: ignore[arg-type]
        with pytest.raises(argparse.ArgumentTypeError):
            _interval(str(bad))
    assert _interval("3600") == 3600.0
    hb = m.NodeHeartbeat(node=spec.name, interval=Agent(None, [spec], consume=False, register=False,  # type: ignore
                                                        heartbeat_interval=3600).heartbeat_interval)
    assert state_reader_takes(hb)


# -- what `busched apply` publishes ------------------------------------------------------------------------------------
@_SETTINGS
@given(tolerations=st.sampled_from([0, 100, 240, 300, 1024]), value=st.sampled_from([0, 500, 1000]))
def test_busched_apply_publishes_only_messages_the_scheduler_takes(tolerations: int, value: int) -> None:
    """A spec valid in every field can still make a message over the state stream's limit (1,024 tolerations of
    1,024 characters are 1 MiB): `check_cluster` refuses the file then, as the scheduler would refuse the message."""
    import pytest

    from busched.api import k8s_specs as k
    from busched.bus.apply import ClusterFileError, check_cluster

    task = o.TaskSpec(name="a", namespace="t", tolerations=[k.Toleration(key=f"k{i}", operator="Equal",
                                                                         value="v" * value)
                                                            for i in range(tolerations)])
    cluster = o.ClusterSpec(tasks=[task])
    taken = state_reader_takes(m.upsert("task", msgspec_replace_created(task), 2**63 - 1))
    if taken:
        check_cluster(cluster)
    else:
        with pytest.raises(ClusterFileError, match=r"task t/a: its message would be \d+ bytes, more than the 262144"):
            check_cluster(cluster)


@pytest.mark.parametrize("short", [1, 30, 64, 100])
def test_busched_apply_counts_the_creation_time_it_adds(short: int) -> None:
    """A task whose message is ``short`` bytes under the limit as written in the file, and over it once `busched
    apply` stamps its creation time (`with_created`): refused before anything is published.  (The room kept for it
    is 64 bytes, its widest with a comma: a little more than it takes.)"""
    from busched.bus.apply import ClusterFileError, check_cluster, cluster_events, with_created

    def task(n: int) -> o.TaskSpec:
        return o.TaskSpec(name="a", namespace="t", annotations={"a": "v" * n})

    base = len(m.encode(m.upsert("task", task(0), 2**63 - 1)))
    spec = task(LIMIT - short - base)
    assert len(m.encode(m.upsert("task", spec, 2**63 - 1))) == LIMIT - short
    cluster = o.ClusterSpec(tasks=[spec])
    ((_, published),) = cluster_events(with_created(cluster, 1.8e9), version=2**63 - 1)
    if not state_reader_takes(published):
        with pytest.raises(ClusterFileError, match=r"task t/a: its message would be \d+ bytes, more than the 262144"):
            check_cluster(cluster)
    else:
        assert short >= 64  # (the cases here: over the limit with its creation time, or 64 bytes to spare)
        check_cluster(cluster)


def msgspec_replace_created(task: o.TaskSpec) -> o.TaskSpec:
    """The task as `busched apply` publishes it: with a creation time (`busched.bus.apply.with_created`)."""
    import msgspec

    return msgspec.structs.replace(task, created="2026-03-01T10:30:00.123456Z")


@_SETTINGS
@given(cards=st.sampled_from([1, 100, 4000]), ctrl=st.sampled_from([0, 10]))
def test_an_agent_registers_only_nodes_the_scheduler_takes(cards: int, ctrl: int) -> None:
    """A valid node's message can pass 256 KiB (its annotations are bounded in characters, and a control
    character takes 6 bytes in JSON): the agent is not made with such a node (`register=False`: another
    registers it, and the agent does not check)."""
    import pytest

    from busched.api import build

    spec = o.NodeSpec(name="gpu-0", allocatable={"cpu": "8", "memory": "8Gi"}, annotations={
        "volcano.sh/node-vgpu-register": "".join(f"GPU-{i:06d},10,1000,NVIDIA-Tesla-V100{chr(1) * ctrl},true,"
                                                 "hami-core:" for i in range(cards))})
    build.validate("node", spec)  # (valid in every field)
    if state_reader_takes(m.upsert("node", spec, 2**63 - 1)):
        Agent(None, [spec], consume=False)  # type: ignore[arg-type]
    else:
        with pytest.raises(ValueError, match=r"cannot register node gpu-0: its node.upsert would be \d+ bytes"):
            Agent(None, [spec], consume=False)  # type: ignore[arg-type]
    Agent(None, [spec], consume=False, register=False)  # type: ignore[arg-type]


@pytest.mark.parametrize("field, spec", [
    ("allocatable.cpu", o.NodeSpec(name="n1", allocatable={"cpu": "-1"})),
    ("annotations", o.NodeSpec(name="n1", annotations={"a": "x" * (256 * 1024)}))])
def test_an_agent_is_not_made_with_a_node_the_scheduler_refuses(field: str, spec: o.NodeSpec) -> None:
    # the scheduler's validation (`busched.api.build.validate`), before anything else of the agent, names the field
    with pytest.raises(ValueError, match=rf"^cannot register: node n1: {field}"):
        Agent(None, [spec], consume=False)  # type: ignore[arg-type]


def _collect(job: Any, limit: int | None = None, spec: o.JobSpec | None = None) -> tuple[PodGroupStatuses, list[Any]]:
    settings = SimpleNamespace(status_interval=1.0) if limit is None else SchedulerSettings(max_event_bytes=limit)
    queued: list[m.PodGroupStatus] = []
    statuses = PodGroupStatuses(settings, lambda: 0.0, None,  # type: ignore[arg-type]
                                job_specs={"t/j": spec or o.JobSpec(name="j", namespace="t")},
                                next_version=lambda: 1, refresh_job=lambda key: None, on_error=lambda: None)
    statuses.queue = lambda subject, st: queued.append(st)  # type: ignore[method-assign]
    asyncio.run(statuses.collect(SimpleNamespace(jobs={"t/j": job})))
    return statuses, queued


def test_the_status_of_a_job_apply_accepts_passes_the_state_feed() -> None:
    # a job spec `busched apply` publishes (every field valid, its message under 256 KiB): each condition of its
    # status gains a lastTransitionTime, 281,988 bytes in all
    from busched.api import build
    from busched.api import k8s_specs as k
    from busched.bus.apply import check_cluster
    spec = o.JobSpec(name="j", namespace="t", conditions=[
        k.JobCondition(type=f"C{i}", status="True", reason="r", message="m" * 200) for i in range(1000)])
    check_cluster(o.ClusterSpec(jobs=[spec]))
    job = build.job_info(spec, {})
    job.has_podgroup = True
    job.phase = "Pending"
    _, queued = _collect(job, spec=spec)
    assert len(queued) == 1
    assert state_reader_takes(queued[0]), len(m.encode(queued[0]))


@pytest.mark.parametrize("limit", [2_000, 30_000, 64 * 1024, 256 * 1024])
def test_a_status_over_the_limit_keeps_the_schedulers_conditions_and_the_first_others(limit: int) -> None:
    own = {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources", "message": "\x01" * 5000,
           "transitionID": "s1"}
    others = [{"type": f"C{i}", "status": "True", "reason": "r", "message": "m" * 300, "transitionID": ""}
              for i in range(1000)]
    conds = [*others[:3], own, *others[3:]]
    job = SimpleNamespace(has_podgroup=True, conditions=conds, phase="Pending")
    statuses, queued = _collect(job, limit)
    (st,) = queued
    data = m.encode(st)
    assert len(data) <= limit and m.decode(data) == st
    kept = [c.type for c in st.conditions]
    # the scheduler's own kept in its place (unless it alone passes the limit), the others kept in order from the
    # first while they fit
    assert ("Unschedulable" in kept) == (limit > 6 * 4096)
    n = len(kept) - ("Unschedulable" in kept)
    assert [t for t in kept if t != "Unschedulable"] == [f"C{i}" for i in range(n)]
    if limit > 6 * 4096:
        assert kept.index("Unschedulable") == min(3, n)
        # one more would not fit: the status keeps as much as it can
        assert n < 1000
        nxt = next(c for c in st.conditions if c.type == "C0")
        more = msgspec.structs.replace(st, conditions=[*st.conditions, msgspec.structs.replace(nxt, type=f"C{n}")])
        assert len(m.encode(more)) > limit
    # and the same conditions again are no change (no status rewritten every cycle)
    queued.clear()
    asyncio.run(statuses.collect(SimpleNamespace(jobs={"t/j": job})))
    assert queued == []
    # nor the conditions as the status kept them (what the cache gives the next session)
    job.conditions = [{"type": c.type, "status": c.status, "reason": c.reason, "message": c.message,
                       "transitionID": c.transition_id} for c in st.conditions]
    asyncio.run(statuses.collect(SimpleNamespace(jobs={"t/j": job})))
    assert queued == []


# -- an agent's boot -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("msg", [
    m.BindAccepted(namespace="t", name="a", node="n1", attempt=1),
    m.BindRejected(namespace="t", name="a", node="n1", attempt=1, reason="no"),
    m.TaskPhaseChanged(namespace="t", name="a", node="n1", attempt=1, phase="Running"),
    m.NodeHeartbeat(node="n1"),
    m.BindingRecord(namespace="t", name="a", attempt=1, node="n1")])
def test_a_boot_longer_than_its_bound_is_refused_where_it_is_decoded(msg: m.Msg) -> None:
    """A binding record passes an agent's boot on (`busched.scheduler.write_bounds` keeps room for it: MAX_BOOT):
    a third-party agent's longer boot is refused at the edge, naming the field, not copied into records."""
    import msgspec

    from busched.bus.wire import MAX_BOOT

    ok = msgspec.structs.replace(msg, boot="b" * MAX_BOOT)  # type: ignore[type-var]
    assert m.decode(m.encode(ok)) == ok
    with pytest.raises(m.DecodeError, match=r"\$\.boot"):
        m.decode(m.encode(msgspec.structs.replace(msg, boot="b" * (MAX_BOOT + 1))))  # type: ignore[type-var]


def test_the_whole_conditions_of_a_deleted_job_are_not_kept() -> None:
    conds = [{"type": f"C{i}", "status": "True", "reason": "r", "message": "m" * 300, "transitionID": ""}
             for i in range(1000)]
    job = SimpleNamespace(has_podgroup=True, conditions=conds, phase="Pending")
    statuses, queued = _collect(job)
    assert len(queued[0].conditions) < 1000 and "t/j" in statuses.whole
    asyncio.run(statuses.collect(SimpleNamespace(jobs={})))  # (the job deleted: the session has it no more)
    assert statuses.whole == {}
