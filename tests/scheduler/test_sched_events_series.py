"""The event recorder alone (busched.scheduler.sched_events): series, their rate limit and their bound.
The bus side is tested over a real nats-server in test_sched_events.py; here the publish is a list."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from busched.bus import messages as m
from busched.bus import subjects as S
from busched.scheduler.sched_events import COMBINED, EventRecorder, EventSettings, series_id


class Published:
    """A publish function that keeps what it was given and answers ok (or not, ``ok=False``)."""

    def __init__(self) -> None:
        self.items: list[tuple[str, m.Msg, str | None]] = []
        self.ok = True

    async def __call__(self, items: Any) -> list[Any]:
        got = list(items)
        self.items.extend(got)
        return [SimpleNamespace(ok=self.ok) for _ in got]


def recorder(**kw: Any) -> tuple[EventRecorder, Published, list[int]]:
    pub = Published()
    errors: list[int] = []
    rec = EventRecorder(EventSettings(**kw), pub, boot=lambda: "b00t", on_error=lambda: errors.append(1))
    return rec, pub, errors


async def settle(rec: EventRecorder) -> None:
    if rec.writer is not None:
        await rec.writer


async def test_one_series_per_object_type_reason_message_republished_at_most_once_per_interval():
    rec, pub, _ = recorder(interval=10.0)
    for t in (100.0, 101.0, 102.0):
        rec.add("task", "t/a", "Warning", "FailedScheduling", "0/2 nodes are unavailable", t)
        rec.publish_due(t)
        await settle(rec)
    assert len(rec.series) == 1
    assert [e.count for _, e, _ in pub.items] == [1]  # new: at once; growing: not within the interval
    rec.add("task", "t/a", "Warning", "FailedScheduling", "0/2 nodes are unavailable", 111.0)
    rec.publish_due(111.0)
    await settle(rec)
    subj, ev, _ = pub.items[-1]
    assert isinstance(ev, m.Event) and (ev.count, ev.first_timestamp, ev.last_timestamp) == (4, 100.0, 111.0)
    sid = series_id("Warning", "FailedScheduling", "0/2 nodes are unavailable")
    assert subj == S.event_subject("task", "t/a", sid) and ev.series == sid
    assert ev.source == m.EventSource(component="busched-scheduler", instance="b00t")
    # another message is another series, published at once
    rec.add("task", "t/a", "Warning", "FailedScheduling", "0/3 nodes are unavailable", 112.0)
    rec.publish_due(112.0)
    await settle(rec)
    assert len(rec.series) == 2 and pub.items[-1][1].count == 1
    # on the way out, what has news is published whatever the interval
    rec.add("task", "t/a", "Warning", "FailedScheduling", "0/2 nodes are unavailable", 113.0)
    await rec.flush()
    assert pub.items[-1][1].count == 5


async def test_series_are_bounded_least_recently_seen_first_and_messages_cut():
    rec, _, _ = recorder(series=3)
    for i in range(5):
        rec.add("task", f"t/{i}", "Normal", "Scheduled", "x", float(i))
    rec.add("task", "t/2", "Normal", "Scheduled", "x", 9.0)  # seen again: the most recent
    rec.add("task", "t/5", "Normal", "Scheduled", "x", 10.0)
    assert [k[1] for k in rec.series] == ["t/4", "t/2", "t/5"]
    rec.add("job", "t/j", "Warning", "Unschedulable", "y" * 5000, 11.0)
    (k, s), = [(k, s) for k, s in rec.series.items() if k[0] == "job"]
    ev = rec.event(k, s)
    assert len(ev.message) == m.MAX_EVENT_MESSAGE and ev.message.endswith("...")
    assert m.decode(m.encode(ev)) == ev  # within the message's own bounds


async def test_a_failed_publish_is_counted_and_published_again():
    rec, pub, errors = recorder(interval=10.0)
    pub.ok = False
    rec.add("node", "n1", "Warning", "Evicted", "z", 1.0)
    rec.publish_due(1.0)
    await settle(rec)
    assert errors == [1]
    pub.ok = True
    rec.publish_due(2.0)  # never stored: due again at once
    await settle(rec)
    assert [e.count for _, e, _ in pub.items] == [1, 1] and errors == [1]
    assert not rec.due(100.0)


def test_nothing_is_recorded_without_an_events_stream():
    pub = Published()
    rec = EventRecorder(EventSettings(), pub, boot=lambda: "", on_error=lambda: None, stream=False)
    ssn = SimpleNamespace(decisions=[SimpleNamespace(kind="bind", task="t/a", node="n")], jobs={}, queues={}, uid="u")
    rec.before_close(ssn)
    rec.record(ssn, SimpleNamespace(now=1.0, binds=[("t/a", "n")], evicts=[]))
    assert not rec.series and rec.writer is None


async def test_many_different_messages_of_one_object_are_combined_into_one_series():
    rec, pub, _ = recorder(similar=3, similar_window=60.0)
    for i in range(6):
        rec.add("job", "t/j", "Warning", "Unschedulable", f"{i}/9 tasks in gang unschedulable", 100.0 + i)
    rec.add("job", "t/k", "Warning", "Unschedulable", "another object", 106.0)  # counted apart
    rec.add("job", "t/j", "Normal", "Scheduled", "ready", 106.0)  # another reason: apart too
    messages = {k[1:]: s for k, s in rec.series.items()}
    # two messages on their own, then the third different one opens the combined series, which takes the rest
    assert sorted(k[3] for k in messages if k[0] == "t/j" and k[2] == "Unschedulable") == sorted(
        ["0/9 tasks in gang unschedulable", "1/9 tasks in gang unschedulable", COMBINED])
    combined = messages[("t/j", "Warning", "Unschedulable", COMBINED)]
    assert (combined.count, combined.first, combined.last) == (4, 102.0, 105.0)
    rec.publish_due(106.0)
    await settle(rec)
    ev = next(e for _, e, _ in pub.items if e.series == combined.series)
    assert ev.message == COMBINED + "5/9 tasks in gang unschedulable"
    # a new window: messages on their own again
    rec.add("job", "t/j", "Warning", "Unschedulable", "later", 200.0)
    assert ("job", "t/j", "Warning", "Unschedulable", "later") in rec.series


async def test_failed_scheduling_messages_and_the_per_cycle_budget():
    from busched.api.task import TaskStatus

    rec, _, _ = recorder(task_events=3)
    gang = "5/5 tasks in gang unschedulable: PodGroupNotReady, 5 Pending, 5 minAvailable"
    pending = {f"u{i}": SimpleNamespace(key=f"t/p-{i}", uid=f"u{i}") for i in range(5)}
    job = SimpleNamespace(uid="t/j", queue="q", has_podgroup=True, status_index={TaskStatus.Pending: pending},
                          conditions=[{"type": "Unschedulable", "status": "True", "transitionID": "s1",
                                       "message": gang}],
                          nodes_fit_errors={"u0": "0/1 nodes are unavailable: 1 Insufficient cpu."}, job_fit_errors="")
    ssn = SimpleNamespace(jobs={"t/j": job}, uid="s1", decisions=[], queues={})
    rec.record(ssn, SimpleNamespace(now=1.0, binds=[], evicts=[]))
    got = sorted((k[1], k[3], k[4]) for k in rec.series)
    assert got == [("t/j", "Unschedulable", gang),
                   ("t/p-0", "FailedScheduling", "0/1 nodes are unavailable: 1 Insufficient cpu."),
                   ("t/p-1", "FailedScheduling", gang), ("t/p-2", "FailedScheduling", gang)]  # 3 a cycle
    # a session that did not mark the job (another uid) and left it no fit errors: nothing to say
    job.nodes_fit_errors = {}
    rec.record(SimpleNamespace(jobs={"t/j": job}, uid="s2", decisions=[], queues={}),
               SimpleNamespace(now=2.0, binds=[], evicts=[]))
    assert all(s.count == 1 for s in rec.series.values())
    await settle(rec)
