"""Podgroup statuses: what a cycle changed, and writing it to the state stream in the background.

After a cycle, `PodGroupStatuses.collect` compares each job's phase and conditions as the session left
them with what was last recorded for it, and only a job whose phase or conditions (type, status,
reason, message) changed gets a new `podgroup.status`.  That new status counts at once: `busched
get`, the gauges and the job in the cache (applied with the next cache sync) see it.

Writing it to the state stream is not on the way of binds: the statuses wait in their own outbox
(subject -> latest status, so a job that changes twice before the write is written once) and are
published by a background task, while the loop goes on, once the oldest of them has waited
``SchedulerSettings.status_interval`` seconds (1 s; the check is made at every cycle, so with the
default period a status reaches the stream within about 2 s).  A cycle that placed thousands of
jobs thus hands its binds to the agents without publishing thousands of statuses at the same
time, and a job that goes Inqueue in one cycle and Running in the next is usually written once.
Nothing depends on reading a status back: a restarted scheduler that lost unwritten ones
recomputes them in its first cycle (the session derives every job's phase) and writes what differs
from the stream.  `Scheduler.stop` writes what is left.  `PodGroupStatuses` owns both the
statuses recorded and the ones waiting.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

import msgspec

from busched.api import limits
from busched.api import objects as o
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.wire import MAX_REASON, MAX_STATE_MESSAGE, cut

log = logging.getLogger("busched.scheduler")

# the conditions the scheduler itself writes (Volcano's ``PodGroupScheduled``, ``PodGroupUnschedulableType``): a
# status over the limit keeps them (`fit_conditions`)
OWN_CONDITIONS = frozenset({"Scheduled", "Unschedulable"})
# the most a condition takes in a status (its reason and message cut to MAX_REASON, its type, status and transition
# id short strings, 6 bytes a character in JSON, its field names and lastTransitionTime), and the rest of a status
_CONDITION_MOST = 6 * (2 * MAX_REASON + 3 * limits.MAX_STRING) + 128
_STATUS_MOST = 6 * (2 * 253) + 256

# publish_all: (subject, message, message id) each -> one acknowledgement each (``.ok``)
Publish = Callable[[Iterable[tuple[str, m.Msg, str | None]]], Awaitable[list[Any]]]


class StatusSettings(Protocol):
    status_interval: float


class StatusOutbox:
    """Statuses waiting to be written (``waiting``, subject -> the latest), published in the background once
    the oldest has waited ``status_interval``; one that fails waits for the next write.  The podgroup
    statuses and the queue statuses (`busched.scheduler.queue_statuses`) each have one."""

    name = "statuses"

    def __init__(self, settings: StatusSettings, clock: Callable[[], float], publish_all: Publish, *,
                 on_error: Callable[[], None]) -> None:
        self.settings = settings
        self.clock = clock
        self.publish_all = publish_all
        self.on_error = on_error
        self.waiting: dict[str, Any] = {}  # subject -> latest status to write
        self.writer: asyncio.Task[None] | None = None
        self.since = 0.0  # when the oldest waiting status was queued (scheduler's clock)

    def queue(self, subject: str, status: m.Msg) -> None:
        if not self.waiting:
            self.since = self.clock()  # the write window opens with the first waiting status
        self.waiting[subject] = status

    def write_soon(self) -> None:
        """Start the background write of the waiting statuses once the oldest has waited ``status_interval``
        (unless a write is still under way)."""
        if not self.waiting or (self.writer is not None and not self.writer.done()):
            return
        if self.clock() - self.since < self.settings.status_interval:
            return
        self.writer = asyncio.create_task(self.write(), name=f"busched-{self.name}")

    async def write(self) -> None:
        """Publish every waiting status; one that fails waits for the next write, unless a newer one replaced it."""
        if not self.waiting:
            return
        items = list(self.waiting.items())
        self.waiting.clear()
        acks: list[Any]
        try:
            acks = await self.publish_all((subj, st, None) for subj, st in items)
        except Exception as e:  # noqa: BLE001 - e.g. the connection closed: keep them for the next write
            acks = [None] * len(items)
            log.warning("%s not written (%s); retrying", self.name, e)
        for (subj, st), ack in zip(items, acks):
            if ack is None or not ack.ok:
                self.on_error()
                self.waiting.setdefault(subj, st)

    async def flush(self) -> None:
        """Write every waiting status now (on the way out), after a write in progress."""
        w = self.writer
        if w is not None and not w.done():
            await asyncio.wait({w})
        await self.write()


class PodGroupStatuses(StatusOutbox):
    """The podgroup statuses: the last recorded per job (``recorded``, job key -> status; the state
    stream's, or what a cycle changed) and the ones waiting to be written (``waiting``, subject ->
    latest status).  ``refresh_job`` is told a job's status changed (its cache copy is due);
    ``on_error`` that a write failed; ``on_dropped`` how many conditions a status written left out."""

    name = "podgroup-statuses"

    def __init__(self, settings: StatusSettings, clock: Callable[[], float], publish_all: Publish, *,
                 job_specs: Mapping[str, o.JobSpec], next_version: Callable[[], int],
                 refresh_job: Callable[[str], None], on_error: Callable[[], None],
                 on_dropped: Callable[[int], None] | None = None) -> None:
        super().__init__(settings, clock, publish_all, on_error=on_error)
        self.job_specs = job_specs
        self.next_version = next_version
        self.refresh_job = refresh_job
        # (`fit_conditions`: counted in busched_writes_cut_total{message="podgroup.status",field="conditions"})
        self.on_dropped = on_dropped
        self.recorded: dict[str, m.PodGroupStatus] = {}  # job key -> its last status
        # job key -> the conditions its last status was made from, when it could not keep them all (`fit_conditions`)
        self.whole: dict[str, list[m.Condition]] = {}
        self.limit: int = getattr(settings, "max_event_bytes", MAX_STATE_MESSAGE)

    async def collect(self, ssn: Any, slice_seconds: float = 0.005) -> list[m.PodGroupStatus]:
        """Queue a ``podgroup.status`` for every job whose phase or conditions changed (and only those),
        handing the event loop back every ``slice_seconds`` (the first cycle after a restart changes every job).
        Returns the new statuses (what the scheduling events read, `busched.scheduler.sched_events`)."""
        changed: list[m.PodGroupStatus] = []
        specs = self.job_specs
        pgs = self.recorded
        now = 0.0
        end = time.perf_counter() + slice_seconds
        for n, (uid, job) in enumerate(ssn.jobs.items()):
            if not n & 255 and time.perf_counter() > end:
                await asyncio.sleep(0)
                end = time.perf_counter() + slice_seconds
            if not getattr(job, "has_podgroup", True):
                continue
            spec = specs.get(uid)
            if spec is None:
                continue
            cur = pgs.get(uid)
            if cur is not None:
                cur_phase, cur_conds = cur.phase, cur.conditions
            else:
                cur_phase, cur_conds = spec.phase, []
            raw = job.conditions
            if job.phase == cur_phase and (_same_conditions(raw, cur_conds) or (
                    uid in self.whole and _same_conditions(raw, self.whole[uid]))):
                continue
            # (reasons and messages cut: busched.bus.wire.MAX_REASON; `_same_conditions` compares them cut)
            conds = [m.Condition(type=str(c.get("type", "")), status=str(c.get("status", "")),
                                 reason=cut(str(c.get("reason", ""))), message=cut(str(c.get("message", ""))),
                                 transition_id=str(c.get("transitionID", "")))
                     for c in raw]
            now = now or time.time()
            old = {c.type: c for c in cur_conds}
            for c in conds:
                prev = old.get(c.type)
                c.last_transition_time = (prev.last_transition_time if prev is not None and prev.status == c.status
                                          else now)
            st = m.PodGroupStatus(version=self.next_version(), namespace=spec.namespace, name=spec.name,
                                  phase=job.phase, conditions=conds)
            if self.whole:
                self.whole.pop(uid, None)
            if len(conds) * _CONDITION_MOST + _STATUS_MOST > self.limit:  # (a status of a few conditions: never)
                fitted = fit_conditions(st, self.limit)
                if fitted is not st:
                    log.warning("job %s: its podgroup status keeps %d of its %d conditions, the others would take it "
                                "past the state stream's limit (%d bytes)", uid, len(fitted.conditions), len(conds),
                                self.limit)
                    self.whole[uid] = conds
                    st = fitted
                    if self.on_dropped is not None:
                        self.on_dropped(len(conds) - len(fitted.conditions))
            if cur_phase != job.phase:
                log.debug("job %s: %s -> %s", uid, cur_phase, job.phase)
            pgs[uid] = st
            changed.append(st)
            self.queue(S.podgroup_subject(uid), st)
            self.refresh_job(uid)
        if self.whole:  # (a deleted job's: rare, only jobs whose status could not keep all its conditions)
            for uid in [uid for uid in self.whole if uid not in ssn.jobs]:
                del self.whole[uid]
        return changed


def _same_conditions(raw: list[dict[str, Any]], conds: list[m.Condition]) -> bool:
    """Whether a session's conditions (dicts) say what ``conds`` say (the transition id aside)."""
    if len(raw) != len(conds):
        return False
    for c, x in zip(raw, conds):
        if str(c.get("type", "")) != x.type or str(c.get("status", "")) != x.status:
            return False
        reason, message = str(c.get("reason", "")), str(c.get("message", ""))
        if (reason != x.reason and cut(reason) != x.reason) or (message != x.message and cut(message) != x.message):
            return False
    return True


def fit_conditions(st: m.PodGroupStatus, limit: int) -> m.PodGroupStatus:
    """``st``, or, when its encoding is longer than ``limit`` bytes, ``st`` with the conditions it cannot hold
    dropped: the others' (a job spec's own, carried over) from the last, then, only if those alone do not make it
    fit, the scheduler's own (`OWN_CONDITIONS`) from the last; the order of those kept is unchanged.

    Why here: cutting each condition's message (MAX_REASON) bounds a condition, not a status; a job may carry as
    many conditions as its spec's message holds (1,000 of 200 characters pass `busched apply`), and each gains a
    lastTransitionTime.  Volcano would fail the status update at the API server and retry it every cycle; a
    status the state feed refuses would leave every reader (a standby, a restart, `busched get`) with the last
    one.  So the producer bounds what it writes, deterministically, keeping what the scheduler decides with (its
    Unschedulable and Scheduled conditions: `busched.framework.phase`) and the spec's conditions in order while
    they fit.  The cache's job takes the status's conditions, so the next session starts from those kept."""
    size = len(m.encode(st))
    if size <= limit:
        return st
    conds = st.conditions
    order = [i for i in range(len(conds) - 1, -1, -1) if conds[i].type not in OWN_CONDITIONS]
    order += [i for i in range(len(conds) - 1, -1, -1) if conds[i].type in OWN_CONDITIONS]
    dropped = set()
    for i in order:
        if size <= limit:
            break
        dropped.add(i)
        size -= len(_ENCODE(conds[i])) + 1  # (and its comma: the last dropped has none, but empties the field)
    return msgspec.structs.replace(st, conditions=[c for i, c in enumerate(conds) if i not in dropped])


_ENCODE = msgspec.json.Encoder().encode
