"""Scheduling events: what each cycle did and could not do, as Kubernetes Events are for Volcano.

From every cycle that ran, `EventRecorder` makes Kubernetes-style events (docs/bus.md, "Scheduling
events"), with Volcano's reasons and messages:

* a task bound: ``Scheduled`` (Normal), "Successfully assigned ns/name to node"; a bind not written as its
  readers would refuse it (`busched.scheduler.write_bounds`): ``FailedScheduling`` (Warning), "failed to bind
  to node n: <field>: <why>" (Volcano's bind error);
* a task of a job the session could not make ready, still Pending: ``FailedScheduling`` (Warning), its own
  fit errors aggregated over the nodes ("0/4 nodes are unavailable: 4 Insufficient cpu."), else its job's
  (Volcano's ``taskUnschedulable`` from ``RecordJobStatusEvent``), else the gang plugin's message (a job
  not even tried, e.g. not enqueued), else "all nodes are unavailable";
* a task evicted: ``Preempted`` (Warning) naming the preemptor, the task the session pipelined onto the
  victim's node, or ``Evicted`` naming the reclaiming queue (reclaim) or the reason (Volcano's "Pod is
  evicted, because of ...");
* a job (its PodGroup) with Pending or Pipelined tasks the gang plugin marked unschedulable this session:
  ``Unschedulable`` (Warning) with the condition's message ("1/2 tasks in gang unschedulable: ..."); one
  whose status changed to scheduled: ``Scheduled`` (Normal), "tasks in gang are ready to be scheduled";
* a queue proportion finds overused (read before the session closes, `before_close`) while a job of it
  has Pending tasks: ``Overused`` (Warning).

Events are deduplicated into *series* as client-go's EventCorrelator does: the same object, type, reason
and message is one series whose ``count`` grows and ``lastTimestamp`` moves, ``firstTimestamp`` staying.
An object with many different messages of one type and reason (10 within 10 minutes) gets one more series
whose message is the latest, "(combined from similar events): ...", as client-go's EventAggregator does.
A series is published on its own subject of the events stream, which keeps only its latest message; a new
series goes out at once, a growing one at most once per ``EventSettings.interval`` seconds (the latest
count then), so a task Pending for hours is a handful of messages, not one per cycle.  At most
``EventSettings.series`` series are remembered, the least recently seen dropped first (a dropped series
that comes back starts again at count 1, as an expired Kubernetes event does).  A cycle makes at most
``EventSettings.task_events`` task FailedScheduling events (a cluster with 100,000 pending tasks must not
make a cycle pay for 100,000).  A Warning series this scheduler publishes for the first time continues the
count an earlier scheduler left on the stream (a restart does not start a Pending task's count again).

Timestamps are the cycle's ``now`` (`CycleReport.now`, read once per cycle): nothing here reads a clock.
Publishing is a background task started after the cycle's decisions went out; a failed publish is counted
(``busched_publish_errors_total{what="events"}``) and its series published again later; it never stops a
cycle.  `flush` (on the way out) waits for what is left.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from busched.api.job import PodGroupPhase
from busched.api.task import TaskStatus
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.framework.phase import unschedulable

__all__ = ["EventSettings", "EventRecorder", "series_id", "ALL_NODES_UNAVAILABLE", "GANG_READY", "COMBINED"]

log = logging.getLogger("busched.scheduler")

ALL_NODES_UNAVAILABLE = "all nodes are unavailable"  # Volcano's AllNodeUnavailableMsg
GANG_READY = "tasks in gang are ready to be scheduled"  # Volcano's PodGroupReady
COMBINED = "(combined from similar events): "
NAMESPACED = ("task", "job")  # their keys are ns/name (as their subjects', busched.bus.subjects)

Publish = Callable[[Iterable[tuple[str, m.Msg, str | None]]], Awaitable[list[Any]]]
Last = Callable[[str], Awaitable[bytes | None]]  # the last message of one subject of the events stream, or None
Key = tuple[str, str, str, str, str]  # kind, object key, type, reason, message


@dataclass
class EventSettings:
    enabled: bool = True  # record and publish scheduling events (the stream exists when events_max_age > 0)
    interval: float = 10.0  # a series whose count grows is published again at most once per this many seconds
    series: int = 4096  # series remembered at most (client-go's event cache holds 4096), least recently seen out
    task_events: int = 1000  # FailedScheduling events made per cycle at most
    # client-go's EventAggregator: once an object has had this many different messages for one type and reason
    # within similar_window seconds, its further ones go to one series, "(combined from similar events): ..."
    similar: int = 10
    similar_window: float = 600.0
    # how long one publish of events keeps sending to a stream that does not answer (a NATS cluster electing
    # the stream's leader) before its series count as not published (counted; published again with the next
    # news): events are best effort, and a shorter wait frees the writer sooner
    publish_timeout: float = 10.0


@dataclass
class _Series:
    subject: str
    series: str
    message: str
    count: int
    first: float
    last: float
    published: float | None = None  # cycle time it was last handed to a publish, None: never
    dirty: bool = True  # has news the stream does not have
    looked_up: bool = False  # the stream was asked for an earlier scheduler's count of it (`_inherit`)


@dataclass
class _Similar:
    start: float  # when the window opened
    messages: set[str]  # the different messages seen in it, until there are `similar` of them


def series_id(event_type: str, reason: str, message: str) -> str:
    """The id of a series of one object: its type, reason and message, hashed (the subject's last token)."""
    return hashlib.sha256(f"{event_type}\0{reason}\0{message}".encode()).hexdigest()[:16]


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


class EventRecorder:
    """The series seen (``series``: key -> state, least recently seen first) and the background publish."""

    def __init__(self, settings: EventSettings, publish_all: Publish, *, boot: Callable[[], str],
                 on_error: Callable[[], None], on_event: Callable[[str], None] | None = None,
                 stream: bool = True, last: Last | None = None) -> None:
        """``stream``: the events stream exists (``StreamSettings.events_max_age`` > 0); without it nothing
        is recorded.  ``last``: reads a series' latest message from the stream (`_inherit`)."""
        self.enabled = settings.enabled and stream
        self.last = last
        self.settings = settings
        self.publish_all = publish_all
        self.boot = boot
        self.on_error = on_error
        self.on_event = on_event
        self.series: OrderedDict[Key, _Series] = OrderedDict()
        self.similar: OrderedDict[tuple[str, str, str, str], _Similar] = OrderedDict()
        self.writer: asyncio.Task[None] | None = None
        self._overused: list[str] = []

    # -- what a cycle saw -----------------------------------------------------------------------------------------
    def before_close(self, ssn: Any) -> None:
        """Read what only an open session tells: the queues proportion finds overused."""
        if not self.enabled:
            return
        self._overused = [name for name, q in ssn.queues.items() if ssn.overused(q)]

    def record(self, ssn: Any, report: Any, changed: Iterable[m.PodGroupStatus] = ()) -> None:
        """Make the events of a closed session whose decisions the loop published (``report``: the binds and
        evicts that went out, and the cycle's ``now``; ``changed``: the podgroup statuses it changed), and
        start publishing the series that are due."""
        if not self.enabled:
            return
        now = report.now
        self._scheduled(report)
        sent = {task for task, _ in report.evicts}
        evicts = [d for d in ssn.decisions if d.kind == "evict" and d.task in sent]
        if evicts:
            self._evictions(ssn, evicts, now)
        waiting = self._unschedulable(ssn, now)
        for q in self._overused:
            if q in waiting:
                self.add("queue", q, "Warning", "Overused",
                         f"queue {q} is overused (its allocation reached its deserved share); "
                         f"{waiting[q]} pending task(s) of its jobs wait", now)
        self._overused = []
        for st in changed:  # (a job completing changes its phase only: that is no news of scheduling)
            if st.phase != PodGroupPhase.Completed and any(
                    c.type == "Scheduled" and c.status == "True" and c.transition_id == ssn.uid for c in st.conditions):
                self.add("job", f"{st.namespace}/{st.name}", "Normal", "Scheduled", GANG_READY, now)
        self.publish_due(now)

    def record_binds(self, report: Any) -> None:
        """The Scheduled events of the binds a failed cycle had written (no session to read more of)."""
        if self.enabled:
            self._scheduled(report)
            self.publish_due(report.now)

    def _scheduled(self, report: Any) -> None:
        for task, node in report.binds:  # not a decision the loop dropped (the task deleted meanwhile ...)
            self.add("task", task, "Normal", "Scheduled", f"Successfully assigned {task} to {node}", report.now)
        for task, node, why in getattr(report, "failed_binds", ()):  # (Volcano's Bind: taskUnschedulable, its error)
            self.add("task", task, "Warning", "FailedScheduling", f"failed to bind to node {node}: {why}", report.now)

    def _unschedulable(self, ssn: Any, now: float) -> dict[str, int]:
        """FailedScheduling for the Pending tasks of the jobs the session could not place (and Unschedulable
        for those the gang plugin marked so); every queue with Pending tasks -> how many."""
        waiting: dict[str, int] = {}
        budget = self.settings.task_events
        uid = ssn.uid
        seen: Any = None  # many jobs share one conditions list (gang's for ready jobs): look at each once
        marked = False
        pending_status, pipelined_status = TaskStatus.Pending, TaskStatus.Pipelined
        for job in ssn.jobs.values():  # (every job, each cycle: the common case, nothing waiting, comes first)
            index = job.status_index
            pending = index.get(pending_status)
            if not pending and not index.get(pipelined_status):
                continue  # nothing of it waits: placed, running or done
            conds = job.conditions
            if conds is not seen:
                seen = conds
                marked = unschedulable(conds, uid)
            gang = ""
            if marked:
                gang = next((str(c.get("message", "")) for c in conds if c.get("type") == "Unschedulable"), "")
                if job.has_podgroup:
                    self.add("job", job.uid, "Warning", "Unschedulable", gang, now)
            if not pending:
                continue
            waiting[job.queue] = waiting.get(job.queue, 0) + len(pending)
            if not (marked or job.nodes_fit_errors or job.job_fit_errors):
                continue  # e.g. a ready job's elastic tasks its queue's share leaves out: no failure of fitting
            # (a job the session did not even try, e.g. not enqueued, has no fit errors: the gang's message)
            base = job.job_fit_errors or gang or ALL_NODES_UNAVAILABLE
            if budget <= 0:
                continue
            for t in sorted(pending.values(), key=lambda t: t.key)[:budget]:
                budget -= 1
                fe = job.nodes_fit_errors.get(t.uid)
                self.add("task", t.key, "Warning", "FailedScheduling", str(fe) if fe is not None else base, now)
        return waiting

    def _evictions(self, ssn: Any, evicts: list[Any], now: float) -> None:
        """Preempted / Evicted, naming the task pipelined onto the victim's node (the preemptor or reclaimer)."""
        queue_of: dict[str, str] = {}  # task key -> its job's queue, for victims and pipelined tasks
        onto: dict[str, list[str]] = {}  # node -> tasks pipelined onto it
        for job in ssn.jobs.values():
            for status in (TaskStatus.Pipelined, TaskStatus.Releasing):
                for t in job.status_index.get(status, {}).values():
                    queue_of[t.key] = job.queue
                    if status is TaskStatus.Pipelined:
                        onto.setdefault(t.node_name, []).append(t.key)
        for d in evicts:
            reason = d.reason or "evict"
            victim_queue = queue_of.get(d.task, "")
            by = sorted(onto.get(d.node, ()))
            if reason == "preempt":
                same = [t for t in by if queue_of.get(t) == victim_queue] or by
                msg = (f"Preempted by {same[0]} on node {d.node}" if same
                       else f"Preempted on node {d.node}")
                self.add("task", d.task, "Warning", "Preempted", msg, now)
            elif reason == "reclaim":
                other = [t for t in by if queue_of.get(t) != victim_queue] or by
                msg = (f"Evicted to reclaim resources for queue {queue_of.get(other[0], '?')} "
                       f"({other[0]} on node {d.node})" if other else f"Evicted to reclaim resources on node {d.node}")
                self.add("task", d.task, "Warning", "Evicted", msg, now)
            else:
                self.add("task", d.task, "Warning", "Evicted", f"Pod is evicted, because of {reason}", now)

    # -- series ---------------------------------------------------------------------------------------------------
    def add(self, kind: str, key: str, event_type: str, reason: str, message: str, now: float) -> None:
        """One occurrence of an event: a new series, or one more of a series seen before (the combined one,
        once the object has had too many different messages of this type and reason, `_combined`)."""
        message = _cut(message, m.MAX_EVENT_MESSAGE)
        k = (kind, key, event_type, reason, message)
        if self._combined(k, now):
            k = (kind, key, event_type, reason, COMBINED)
            message = _cut(COMBINED + message, m.MAX_EVENT_MESSAGE)
        s = self.series.get(k)
        if s is None:
            sid = series_id(event_type, reason, k[4])
            self.series[k] = _Series(S.event_subject(kind, key, sid), sid, message, 1, now, now)
            if len(self.series) > self.settings.series:
                self.series.popitem(last=False)
        else:
            s.count += 1
            s.last = max(s.last, now)
            s.message = message
            s.dirty = True
            self.series.move_to_end(k)
        if self.on_event is not None:
            self.on_event(reason)

    def _combined(self, k: Key, now: float) -> bool:
        """Whether this occurrence joins its object's combined series: `EventSettings.similar` different
        messages of its type and reason within `EventSettings.similar_window` seconds (client-go's
        EventAggregator), remembered for at most `EventSettings.series` objects."""
        limit = self.settings.similar
        if limit <= 0:
            return False
        sk = k[:4]
        st = self.similar.get(sk)
        if st is None or now - st.start > self.settings.similar_window:
            st = self.similar[sk] = _Similar(now, set())
            if len(self.similar) > self.settings.series:
                self.similar.popitem(last=False)
        self.similar.move_to_end(sk)
        if len(st.messages) < limit:
            st.messages.add(k[4])
        return len(st.messages) >= limit

    def event(self, k: Key, s: _Series) -> m.Event:
        kind, key, event_type, reason, _ = k
        message = s.message
        ns, name = key.split("/", 1) if kind in NAMESPACED and "/" in key else ("", key)
        return m.Event(involved_object=m.EventObject(kind=kind, name=_cut(name, 1024),  # type: ignore[arg-type]
                                                     namespace=_cut(ns, 1024)),
                       reason=_cut(reason, m.MAX_EVENT_REASON), message=message,
                       event_type=event_type, count=s.count,  # type: ignore[arg-type]
                       first_timestamp=max(0.0, s.first), last_timestamp=max(0.0, s.last),
                       source=m.EventSource(instance=self.boot()[:64]), series=s.series)

    def due(self, now: float, *, all_dirty: bool = False) -> list[tuple[Key, _Series]]:
        """The series with news whose last publish is at least ``interval`` ago (every one with news: ``all_dirty``)."""
        iv = self.settings.interval
        return [(k, s) for k, s in self.series.items()
                if s.dirty and (all_dirty or s.published is None or now - s.published >= iv)]

    def publish_due(self, now: float) -> None:
        """Start publishing the due series in the background, unless a publish is still under way (they wait)."""
        if self.writer is not None and not self.writer.done():
            return
        items = self.due(now)
        if items:
            self.writer = asyncio.create_task(self._publish(items, now), name="busched-events")

    async def flush(self) -> None:
        """Publish every series with news now, after a publish under way (on the way out)."""
        w = self.writer
        if w is not None and not w.done():
            await asyncio.wait({w})
        items = self.due(0.0, all_dirty=True)
        if items:
            await self._publish(items, max(s.last for _, s in items))

    async def _inherit(self, items: list[tuple[Key, _Series]]) -> None:
        """A Warning series (FailedScheduling, Unschedulable, Overused: what goes on for a while) published for
        the first time by this scheduler may have been counted by an earlier one (before a restart, or another
        scheduler on the bus): its count goes on from the stream's latest message of the series, and its
        firstTimestamp stays, instead of starting again at 1.  One read per such series, once."""
        todo = [s for k, s in items if k[2] == "Warning" and s.published is None and not s.looked_up]
        if not todo or self.last is None:
            return
        for s in todo:
            s.looked_up = True
        got = await asyncio.gather(*(self.last(s.subject) for s in todo), return_exceptions=True)
        me = self.boot()
        for s, data in zip(todo, got):
            if not isinstance(data, bytes):
                continue  # none, or not readable now: the series starts here
            try:
                old = m.decode(data)
            except m.DecodeError:
                continue
            if isinstance(old, m.Event) and old.series == s.series and old.source.instance != me:
                s.count += old.count
                s.first = min(s.first, old.first_timestamp)

    async def _publish(self, items: list[tuple[Key, _Series]], now: float) -> None:
        await self._inherit(items)
        out = []
        before = [s.published for _, s in items]
        for k, s in items:
            out.append((s.subject, self.event(k, s), None))
            s.dirty = False
            s.published = now
        try:
            acks: list[Any] = await self.publish_all(out)
        except Exception as e:  # noqa: BLE001 - e.g. the connection closed: published again with the next news
            log.warning("scheduling events not published (%s)", e)
            acks = [None] * len(out)
        for (_, s), ack, prev in zip(items, acks, before):
            if ack is None or not ack.ok:
                self.on_error()
                s.dirty = True
                s.published = prev  # due again as it was
