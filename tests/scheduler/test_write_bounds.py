"""A bind whose record or decision its readers would refuse is never written, and fails as a failed bind does
(busched.scheduler.write_bounds); `bind_problem` agrees with the readers' own decoders on random inputs."""

from __future__ import annotations

import time

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from busched.api import build
from busched.api import objects as o
from busched.bus import messages as m
from busched.bus.wire import MAX_BOOT, MAX_REASON
from busched.scheduler.records import Binding, CycleReport
from busched.scheduler.sched_events import EventRecorder, EventSettings
from busched.scheduler.write_bounds import bind_problem, fit_reason
from tests.scheduler.test_binding_table import KEY, Decision, World

IDS = "volcano.sh/vgpu-ids-new"


def _records(w: World) -> list[m.BindingRecord]:
    return [r for _, r, _ in w.bus.records]


async def test_an_oversized_assignment_is_not_written_and_the_bind_fails_while_the_others_bind() -> None:
    w = World()
    w.tasks["t/b"] = o.TaskSpec(name="b", namespace="t", job="j")
    big = {IDS: "GPU-0123456789abcdef,NVIDIA,1000,10:" * 200}  # 7,200 characters: more than 4,096
    report = CycleReport(1)
    await w.table.publish_binds([Decision(KEY, "n1", annotations=big),
                                 Decision("t/b", "n1", annotations={IDS: "GPU-0,NVIDIA,1000,10:"})], report)
    # the other bound: its record and its decision written
    assert [(r.name, r.state) for r in _records(w)] == [("b", "binding")]
    assert [subj.rsplit(".", 1)[1] for subj, _, _ in w.bus.decisions] == ["b"]
    assert report.binds == [("t/b", "n1")]
    # the oversized one: no record of its bind, no decision; back to Pending with a backoff, off that node a while
    b = w.table.bindings[KEY]
    assert b.state == "released" and b.attempt == 1
    assert f"annotations.{IDS}: 7200 characters, more than 4096" in b.reason
    assert KEY in w.table.backoff_until and "n1" in w.table.excluded[KEY]
    assert report.failed_binds == [(KEY, "n1", f"annotations.{IDS}: 7200 characters, more than 4096")]
    assert report.released == [(KEY, "invalid")]
    # its released record (written at the next flush) is one its readers take, and carries no annotations
    rec, _ = w.outbox["busched.state.binding.t.a"]
    assert isinstance(rec, m.BindingRecord) and rec.state == "released" and rec.annotations == {}
    assert m.decode(m.encode(rec)) == rec
    metrics = w.table.metrics
    assert metrics.writes_refused.labels("binding", "annotations")._value.get() == 1
    assert metrics.releases.labels("invalid")._value.get() == 1


async def test_a_bind_failed_so_max_attempts_times_is_failed() -> None:
    w = World(max_attempts=2)
    big = {f"k{i}": "x" for i in range(40)}  # 40 keys: more than 32
    for _ in range(2):
        w.table.backoff_until.clear()
        await w.table.publish_binds([Decision(KEY, "n1", annotations=big)], CycleReport(1))
    b = w.table.bindings[KEY]
    assert b.state == "failed" and "40 keys, more than the 32 a bind may add" in b.reason
    assert w.bus.records == [] and w.bus.decisions == []


async def test_the_task_annotations_merged_are_bounded_too() -> None:
    w = World()
    w.tasks[KEY] = o.TaskSpec(name="a", namespace="t", job="j", annotations={f"a{i}": "" for i in range(1024)})
    report = CycleReport(1)
    await w.table.publish_binds([Decision(KEY, "n1", annotations={IDS: "GPU-0,NVIDIA,1,1:"})], report)
    assert w.bus.records == [] and report.failed_binds[0][2].startswith("task.annotations: 1025 keys")
    assert w.table.metrics.writes_refused.labels("binding", "task.annotations")._value.get() == 1


def test_a_failed_bind_is_a_failed_scheduling_event() -> None:
    published: list[m.Event] = []
    rec = EventRecorder(EventSettings(), lambda items: None, boot=lambda: "me", on_error=lambda: None)
    rec.publish_due = lambda now: published.extend(rec.event(k, s) for k, s in rec.series.items())  # type: ignore
    report = CycleReport(1, now=5.0)
    report.failed_binds.append((KEY, "n1", "annotations.x: 5000 characters, more than 4096"))
    rec.record_binds(report)
    assert [(e.involved_object.name, e.event_type, e.reason, e.message) for e in published] == [
        ("a", "Warning", "FailedScheduling", "failed to bind to node n1: annotations.x: 5000 characters, more "
                                             "than 4096")]


# -- the check against the readers' decoders, on random inputs near every bound ------------------------------------
_LIMIT = 256 * 1024


def _text(prefix: str, length: int, char: str = "v") -> str:
    return (prefix + char * length)[:length] if length >= len(prefix) else prefix


@st.composite
def _cases(draw: st.DrawFn) -> tuple[dict[str, str], dict[str, str]]:
    """(the bind's annotations, the task's own): key counts, key lengths, value lengths, the merged count and size
    and the record's size each drawn at, under and over its bound; values of control characters take 6 bytes a
    character in JSON."""
    n = draw(st.sampled_from([0, 1, 2, 10, 11, 31, 32, 33]))
    lengths = [4095, 4096] if draw(st.booleans()) else [0, 20, 4096]  # values mostly long, or mixed
    char = draw(st.sampled_from(["v", "\x01", "mixed"]))
    ann = {}
    for i in range(n):
        key = _text(f"{i}-", draw(st.sampled_from([3, 40, 316, 317])), "k")
        ann[key] = _text("", draw(st.sampled_from(lengths)), draw(st.sampled_from(["v", "\x01"])) if char == "mixed"
                         else char)
    if ann and draw(st.booleans()):  # one key or one value over its bound
        k = draw(st.sampled_from(sorted(ann)))
        if draw(st.booleans()):
            ann[_text(k + "-", 318, "k")] = ann.pop(k)
        else:
            ann[k] = "v" * 4097
    chars = sum(map(len, ann)) + sum(map(len, ann.values()))
    own_n = draw(st.sampled_from([0, 5, 1023 - n, 1024 - n, 1025 - n]))
    own = {f"own{i}": "" for i in range(max(0, own_n))}
    if draw(st.booleans()):  # the merged size at its bound, one under or one over
        room = 256 * 1024 - chars - sum(map(len, own)) - 3
        own["big"] = "s" * max(0, room + draw(st.sampled_from([-1, 0, 1])))
    return ann, own


def _readers_accept(key: str, ann: dict[str, str], spec: o.TaskSpec, limit: int) -> tuple[bool, int]:
    """What the readers do: the state feed decodes the record (size, then types), the agent the decision, and a
    scheduler's cache validates the task as bound (`busched.api.build.validate`).  The record is the largest the
    attempt may have: evicting, with the longest reason a producer writes (6 bytes a character in JSON) cut by the
    producer to what fits (`fit_reason`), the longest version and the agent's boot at its bound.  And the bytes
    to spare under ``limit`` of that record without its reason."""
    ns, name = key.split("/", 1)
    later = m.BindingRecord(namespace=ns, name=name, attempt=1, node="n1", annotations=ann, writer="me",
                            state="evicting", reason="\x01" * MAX_REASON, stop="restart", version=2**63 - 1,
                            boot="\x01" * MAX_BOOT, decided_at=time.time())
    spare = limit - len(m.encode(msgspec.structs.replace(later, reason="")))
    data = m.encode(fit_reason(later, limit))
    merged = msgspec.structs.replace(spec, annotations={**spec.annotations, **ann})
    try:
        if len(data) > limit:
            return False, spare
        m.decode(data)
        m.decode(m.encode(m.BindDecision(node="n1", attempt=1, task=merged)))
        build.validate("task", merged)
    except (m.DecodeError, build.SpecError):
        return False, spare
    return True, spare


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=_cases(), limit=st.sampled_from([400, 20_000, 32 * 1024, 64 * 1024, _LIMIT]))
def test_bind_problem_is_what_the_readers_refuse(case: tuple[dict[str, str], dict[str, str]], limit: int) -> None:
    ann, own = case
    spec = o.TaskSpec(name="a", namespace="t", annotations=own)
    # (a task whose own annotations already break their bounds never reaches a bind: the state feed refuses it)
    if len(own) > 1024 or sum(map(len, own)) + sum(map(len, own.values())) > 256 * 1024:
        return
    ns, name = KEY.split("/")

    def size() -> int:  # (the binding record as the table writes it)
        return len(m.encode(m.BindingRecord(namespace=ns, name=name, attempt=1, node="n1", annotations=ann,
                                            writer="me", version=1, decided_at=time.time())))

    found = bind_problem(KEY, ann, own, limit, size)
    accept, spare = _readers_accept(KEY, ann, spec, limit)
    if found is None:
        assert accept, (limit, spare)
    else:  # refused: its readers would refuse it, or its later record would have next to no room for a reason
        assert not accept or (found[0] == "size" and spare < 64), (found, limit, spare)


# -- a smaller ``max_event_bytes`` (`busched run --max-event-bytes`): what its readers take is written ----------------
async def test_a_one_card_bind_is_written_under_20_000_bytes() -> None:
    # its record is ~300 bytes; room kept for a reason of 6 x 4,096 bytes made every such bind fail below ~26 KiB
    w = World(max_event_bytes=20_000)
    report = CycleReport(1)
    await w.table.publish_binds([Decision(KEY, "n1", annotations={"volcano.sh/gpu-index": "0"})], report)
    assert report.failed_binds == [], report.failed_binds
    assert [(r.name, r.state) for r in _records(w)] == [("a", "binding")]


async def test_an_assignment_its_readers_take_is_written_under_32_kib() -> None:
    w = World(max_event_bytes=32 * 1024)
    ann = {IDS: "a" * 4000, "volcano.sh/vgpu-ids-x": "b" * 4000}
    report = CycleReport(1)
    await w.table.publish_binds([Decision(KEY, "n1", annotations=ann)], report)
    assert report.failed_binds == [], report.failed_binds
    # its evicting record, with the longest reason, is cut to what its readers take
    await w.table.publish_evicts([Decision(KEY, "n1", kind="evict", reason="\x01" * 10_000)], CycleReport(2))
    rec = _records(w)[-1]
    assert rec.state == "evicting" and rec.annotations == ann and rec.reason.endswith("...")
    assert len(m.encode(rec)) <= 32 * 1024


@pytest.mark.parametrize("limit", [400, 20_000, 32 * 1024, 64 * 1024])
def test_every_record_with_a_reason_is_cut_to_what_its_readers_take(limit: int) -> None:
    # a released record passes on an agent's reason (4,096 characters, 6 bytes each in JSON): at a smaller limit
    # its reason is cut further, so that the record is one its readers take
    w = World(max_event_bytes=limit)
    for state, reason in [("released", "\x01" * MAX_REASON), ("failed", "é" * 5000), ("released", "r" * 4096)]:
        b = Binding(attempt=3, node="n1", state=state, reason=reason, version=12)
        rec = w.table.binding_record(KEY, b)
        data = m.encode(rec)
        assert len(data) <= limit, (state, len(data))
        assert m.decode(data) == rec
        assert rec.reason in ("", reason[:MAX_REASON]) or (rec.reason.endswith("...")
                                                            and reason.startswith(rec.reason[:-3]))
        if len(data) < limit - 6:  # (cut to the longest that fits)
            assert rec.reason == reason[:MAX_REASON] or rec.reason == reason[:MAX_REASON - 3] + "..."
    # a short one is kept whole
    rec = w.table.binding_record(KEY, Binding(attempt=3, node="n1", state="released", reason="node n1 lost"))
    assert rec.reason == "node n1 lost"


def test_a_failed_session_whose_stream_had_only_refused_binds_still_makes_their_events(monkeypatch) -> None:
    # (busched.scheduler.cycles: a session that fails after the bind stream wrote its binds; here every one refused)
    from types import SimpleNamespace

    from busched.metrics import SchedulerMetrics
    from busched.scheduler import cycles

    monkeypatch.setattr(cycles.overview, "note", lambda sched, report: None)
    recorded: list[CycleReport] = []
    sched = SimpleNamespace(metrics=SchedulerMetrics(), cycle=1, _gate=SimpleNamespace(done=lambda *a: None),
                            sched_events=SimpleNamespace(record_binds=recorded.append))
    report = CycleReport(1)
    report.failed_binds.append((KEY, "n1", "size: a binding record of 30000 bytes"))
    cycles.Cycles._failed(sched, report, RuntimeError("the session fails"))  # type: ignore[arg-type]
    assert recorded == [report] and report.error == "RuntimeError: the session fails"


def test_a_refused_attempt_no_longer_the_tasks_is_neither_counted_nor_reported() -> None:
    # (refuse_unwritable: an attempt the table no longer holds, a later one in its place: only the current counts)
    from busched.scheduler.write_bounds import refuse_unwritable

    w = World()
    stale = Binding(attempt=1, node="n1", annotations={f"k{i}": "x" for i in range(40)})
    w.table.bindings[KEY] = Binding(attempt=2, node="n2")
    report = CycleReport(1)
    assert refuse_unwritable(w.table, [(KEY, stale)], report) == []  # (not written either way)
    assert report.failed_binds == [] and report.released == []
    assert w.table.metrics.writes_refused.labels("binding", "annotations")._value.get() == 0
    assert w.table.bindings[KEY].attempt == 2 and w.table.bindings[KEY].state != "released"
