"""Podgroup statuses: what a cycle changed, and writing it to the state stream in the background.

After a cycle, `_collect_podgroups` compares each job's phase and conditions as the session left
them with what was last recorded for it, and only a job whose phase or conditions (type, status,
reason, message) changed gets a new `podgroup.status`.  That new status counts at once: `busched
get`, the gauges and the job in the cache (applied with the next cache sync) see it.

Writing it to the state stream is not on the way of binds: the statuses wait in their own outbox
(subject -> latest status, so a job that changes twice before the write is written once) and are
published by a background task at most every ``SchedulerSettings.status_interval`` seconds, while
the loop goes on.  A cycle that placed thousands of jobs thus hands its binds to the agents
without first publishing thousands of statuses, and a job that goes Inqueue in one cycle and
Running in the next is usually written once.  Nothing depends on reading a status back: a
restarted scheduler that lost unwritten ones recomputes them in its first cycle (the session
derives every job's phase) and writes what differs from the stream.  `Scheduler.stop` writes what
is left.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from busched.bus import messages as m
from busched.bus import subjects as S

log = logging.getLogger("busched.scheduler")


class PodGroups:
    async def _collect_podgroups(self, ssn: Any, slice_seconds: float = 0.005) -> None:
        """Queue a ``podgroup.status`` for every job whose phase or conditions changed (and only those),
        handing the event loop back every ``slice_seconds`` (the first cycle after a restart changes every job)."""
        specs = self.specs["job"]
        pgs = self.pg_status
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
            if job.phase == cur_phase and _same_conditions(raw, cur_conds):
                continue
            conds = [m.Condition(type=str(c.get("type", "")), status=str(c.get("status", "")),
                                 reason=str(c.get("reason", "")), message=str(c.get("message", "")),
                                 transition_id=str(c.get("transitionID", "")))
                     for c in raw]
            now = now or time.time()
            old = {c.type: c for c in cur_conds}
            for c in conds:
                prev = old.get(c.type)
                c.last_transition_time = (prev.last_transition_time if prev is not None and prev.status == c.status
                                          else now)
            st = m.PodGroupStatus(version=self._next_version(), namespace=spec.namespace, name=spec.name,
                                  phase=job.phase, conditions=conds)
            if cur_phase != job.phase:
                log.debug("job %s: %s -> %s", uid, cur_phase, job.phase)
            pgs[uid] = st
            self._statuses[S.podgroup_subject(uid)] = st
            self._refresh_job(uid)

    def _write_statuses_soon(self) -> None:
        """Start the background write of the waiting statuses, unless one runs or the last began less than
        ``status_interval`` ago."""
        if not self._statuses or (self._status_writer is not None and not self._status_writer.done()):
            return
        now = self.clock()
        if now - self._statuses_written_at < self.settings.status_interval:
            return
        self._statuses_written_at = now
        self._status_writer = asyncio.create_task(self._write_statuses(), name="busched-podgroup-statuses")

    async def _write_statuses(self) -> None:
        """Publish every waiting status; one that fails waits for the next write, unless a newer one replaced it."""
        if not self._statuses:
            return
        items = list(self._statuses.items())
        self._statuses.clear()
        acks: list[Any]
        try:
            acks = await self.bus.publish_all((subj, st, None) for subj, st in items)
        except Exception as e:  # noqa: BLE001 - e.g. the connection closed: keep them for the next write
            acks = [None] * len(items)
            log.warning("podgroup statuses not written (%s); retrying", e)
        for (subj, st), ack in zip(items, acks):
            if ack is None or not ack.ok:
                self.metrics.publish_errors.labels("record").inc()
                self._statuses.setdefault(subj, st)

    async def _flush_statuses(self) -> None:
        """Write every waiting status now (on the way out), after a write in progress."""
        w = self._status_writer
        if w is not None and not w.done():
            await asyncio.wait({w})
        await self._write_statuses()


def _same_conditions(raw: list[dict[str, Any]], conds: list[m.Condition]) -> bool:
    """Whether a session's conditions (dicts) say what ``conds`` say (the transition id aside)."""
    if len(raw) != len(conds):
        return False
    for c, x in zip(raw, conds):
        if (str(c.get("type", "")) != x.type or str(c.get("status", "")) != x.status
                or str(c.get("reason", "")) != x.reason or str(c.get("message", "")) != x.message):
            return False
    return True
