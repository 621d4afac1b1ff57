"""Binds and evicts out to the agents, and what keeps them honest: fences, leases, stops, backoff, recovery.

A bind is written ahead: its binding record goes to the state stream first, then the decision (with
``Nats-Msg-Id: bind:<ns>/<name>:<attempt>`` so a republish is dropped); a big cycle's binds go out
in chunks, a chunk's decisions as soon as its records are acknowledged.  Every binding record is a
conditional write (`_write_binding`, `_record_binds`): it is stored only if the task's binding
subject is still at the sequence this scheduler last saw, so of two schedulers only one advances a
task; the one whose write fails has lost the task, drops its reservation and adopts the record that
won (`_lost_race`).  Decisions carry that record's sequence as their fence.

An attempt whose outcome is unknown is never released by a timer: a bind an alive agent has not
taken within the lease, the tasks an agent's previous incarnation had, the tasks of a deleted node or
a deleted task are *stopped* (`_stop_attempt`: an evict for that attempt, which the agent answers
even when it never ran it, and after which it ignores that attempt's bind) and go back to Pending
only when the agent says so (`Events._stopped`) or their node is declared lost after its grace
period (`busched.scheduler.agents`).  `_release` sends a task back to Pending, doubling its backoff
and keeping it off the node for a while when the node failed it; after ``max_attempts`` such
failures in a row the task is Failed, with the reason.  After a restart `_recover` finds whether
each unanswered bind or evict reached the decision stream and sends it if not.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any

from busched.bus import messages as m
from busched.bus import subjects as S
from busched.scheduler import events_log
from busched.scheduler.records import TERMINAL, Binding, CycleReport, NodeLive
from busched.scheduler.state import SchedulerState

log = logging.getLogger("busched.scheduler")

WRITE_AHEAD_CHUNK = 500  # binds whose records are written (and acknowledged) before their decisions go out


class Bindings(SchedulerState):
    async def _publish_binds(self, binds: list[Any], report: CycleReport) -> None:
        now = self.clock()
        todo: list[tuple[str, Binding]] = []
        for d in binds:
            key = d.task
            spec = self.specs["task"].get(key)
            cur = self.bindings.get(key)
            lv = self.live.get(d.node)
            if spec is None or key in self._deleting or d.node not in self.specs["node"]:
                continue  # deleted while the cycle ran
            if cur is not None and (cur.live or cur.final):
                continue  # bound (by us or another scheduler) while the cycle ran, or given up
            if self.settings.require_heartbeat and (lv is None or lv.state != "alive"):
                continue  # the node's agent was lost while the cycle ran
            attempt = (cur.attempt if cur is not None else 0) + 1
            b = Binding(attempt=attempt, node=d.node, version=self._next_version(), decided=now, published=False,
                        rec_seq=cur.rec_seq if cur is not None else 0)
            self.bindings[key] = b
            self.results.pop(key, None)
            self._outbox.pop(S.binding_subject(key), None)  # superseded by this record
            self._refresh_task(key)
            todo.append((key, b))
        if not todo:
            return
        # write-ahead, in chunks: a chunk's decisions go out as soon as its binding records are acknowledged,
        # while the next chunk's records are being written, so the first agents start long before the last
        # record of a big cycle is stored
        sending: list[asyncio.Task[None]] = []
        try:
            for i in range(0, len(todo), WRITE_AHEAD_CHUNK):
                ready = await self._record_binds(todo[i:i + WRITE_AHEAD_CHUNK])
                if ready:
                    sending.append(asyncio.create_task(self._send_decisions([(k, b, "bind") for k, b in ready])))
                for key, b in ready:
                    report.binds.append((key, b.node))
                events_log.binds(self, ready)
                self.metrics.action_binds.inc(len(ready))
        finally:
            if sending:
                await asyncio.gather(*sending)

    async def _write_records(self, items: list[tuple[str, Binding]]) -> tuple[list[tuple[str, Binding]],
                                                                                list[tuple[str, Binding, str]]]:
        """Write the binding records of ``items`` now, each on condition that its subject is where we last saw
        it.  Returns the stored ones and the ones not stored for another reason than a lost condition (with the
        error); the lost ones are settled here (`_lost_race`)."""
        acks = await self.bus.publish_all(
            (S.binding_subject(key), self._binding_record(key, b), None, b.rec_seq) for key, b in items)
        stored: list[tuple[str, Binding]] = []
        failed: list[tuple[str, Binding, str]] = []
        lost: list[str] = []
        for (key, b), ack in zip(items, acks):
            if ack.ok:
                self._record_stored(b, ack.seq)
                stored.append((key, b))
            elif ack.conflict:
                lost.append(key)
            else:
                failed.append((key, b, ack.error))
        if lost:
            await self._lost_race(lost)
        return stored, failed

    def _record_stored(self, b: Binding, seq: int) -> None:
        """A binding record of ours is on the stream at ``seq``: the next one is written on condition of it."""
        b.rec_seq = max(b.rec_seq, seq)
        if seq > self._max_rec_seq:
            self._max_rec_seq = seq

    async def _record_binds(self, todo: list[tuple[str, Binding]]) -> list[tuple[str, Binding]]:
        """Write the binding records of ``todo``, each on condition; the binds whose record is stored (the
        others stay Pending, or belong to the scheduler whose record won)."""
        ready, failed = await self._write_records(todo)
        for key, b, error in failed:
            # nothing was sent to the agent: the task simply stays Pending
            self.metrics.publish_errors.labels("binding").inc()
            log.warning("bind %s -> %s not recorded (%s); it stays Pending", key, b.node, error)
            if self.bindings.get(key) is b:
                self.bindings[key] = dataclasses.replace(b, state="released", reason="publish failed",
                                                         version=self._next_version())
                self._write_binding(key, self.bindings[key])
                self._refresh_task(key)
        return ready

    async def _lost_race(self, keys: list[str]) -> None:
        """Our conditional write lost: another writer advanced these tasks.  Adopt the records that won (our
        reservations go with ours)."""
        self.metrics.publish_errors.labels("conflict").inc(len(keys))
        for key in keys:
            try:
                found = await self.bus.last_state(S.binding_subject(key))
            except Exception as e:  # noqa: BLE001 - read again at the next conflict
                log.warning("cannot read the binding of %s after a lost write: %s", key, e)
                found = None
            log.info("task %s: another writer advanced its binding; adopting its record", key)
            cur = self.bindings.get(key)
            if found is None:
                # purged meanwhile (the task was deleted): nothing holds
                if cur is not None:
                    self.bindings[key] = dataclasses.replace(cur, state="released", reason="binding lost",
                                                             rec_seq=0, version=self._next_version())
                    self._refresh_task(key)
                continue
            seq, data = found
            try:
                rec = m.decode(data)
            except m.DecodeError:
                rec = None
            if not isinstance(rec, m.BindingRecord):
                continue
            if cur is not None:
                cur.rec_seq = 0  # so the winner's record is taken whatever we thought
            self._apply_binding(key, rec, seq)
            self._unpublished.discard(key)

    def _write_binding(self, key: str, b: Binding) -> None:
        """Queue ``b`` as the task's binding record (the latest per task is written, conditionally, at the next
        flush)."""
        self._outbox[S.binding_subject(key)] = (self._binding_record(key, b), None)

    async def _send_decisions(self, items: list[tuple[str, Binding, str]]) -> None:
        out = []
        for key, b, kind in items:
            if kind == "bind":
                spec = self.specs["task"].get(key)
                if spec is None:
                    continue
                msg: m.Msg = m.BindDecision(version=b.version, node=b.node, attempt=b.attempt, task=spec,
                                            fence=b.rec_seq)
            else:
                ns, name = key.split("/", 1)
                msg = m.EvictDecision(version=b.version, namespace=ns, name=name, node=b.node, attempt=b.attempt,
                                      reason=b.evict_reason, fence=b.rec_seq)
            out.append((key, b, kind, S.decision_subject(b.node, kind, key), msg, f"{kind}:{key}:{b.attempt}"))
        if not out:
            return
        acks = await self.bus.publish_all((subj, msg, mid) for _, _, _, subj, msg, mid in out)
        for (key, b, kind, _, _, _), ack in zip(out, acks):
            if ack.ok:
                if kind == "bind":
                    b.seq = ack.seq
                b.published = True
                self._unpublished.discard(key)
            else:
                self.metrics.publish_errors.labels(kind).inc()
                log.warning("%s decision for %s -> %s not published (%s); retrying next cycle", kind, key, b.node,
                            ack.error)
                b.published = False
                self._unpublished.add(key)

    async def _republish(self) -> None:
        items = []
        for key in list(self._unpublished):
            b = self.bindings.get(key)
            if b is None or not b.live or b.published:
                self._unpublished.discard(key)
                continue
            if S.binding_subject(key) in self._outbox:
                continue  # its record first
            items.append((key, b, "evict" if b.state == "evicting" else "bind"))
        await self._send_decisions(items)

    async def _publish_evicts(self, evicts: list[Any], report: CycleReport) -> None:
        items = []
        for d in evicts:
            key = d.task
            b = self.bindings.get(key)
            if b is None:
                # a task placed outside busched (its spec names the node): evict it where it is
                spec = self.specs["task"].get(key)
                if spec is None or not spec.node:
                    continue
                b = self.bindings[key] = Binding(attempt=0, node=spec.node)
            elif not b.live or b.state == "evicting":
                continue
            b.state = "evicting"
            b.stop = "evict"
            b.evict_reason = d.reason or "evicted by the scheduler"
            b.version = self._next_version()
            b.published = False
            self._outbox.pop(S.binding_subject(key), None)
            items.append((key, b))
            self._refresh_task(key)
        if not items:
            return
        stored, failed = await self._write_records(items)
        for key, b, _ in failed:
            self._write_binding(key, b)  # the record first; its decision follows (_republish)
            self._unpublished.add(key)
        sent = [(key, b, "evict") for key, b in stored]
        await self._send_decisions(sent)
        for key, b, _ in sent:
            report.evicts.append((key, b.node))
        events_log.evicts(self, sent)
        self.metrics.action_evicts.inc(len(sent))

    def _stop_attempt(self, key: str, reason: str, why: str, *, bind_deleted: bool = False) -> None:
        """Stop a live attempt whose outcome is unknown: an evict for it, and its resources stay held until the
        agent answers (or its node is declared lost).  ``bind_deleted``: the caller deleted the bind decision."""
        b = self.bindings.get(key)
        if b is None or not b.live:
            return
        if b.seq and b.state == "binding" and not bind_deleted:
            self._spawn_bg(self.bus.delete_decision(b.seq))  # an undelivered bind need not be delivered
        b.state = "evicting"
        b.stop = why
        b.evict_reason = reason
        b.version = self._next_version()
        b.published = False
        self._write_binding(key, b)
        self._unpublished.add(key)  # the decision goes out once its record is stored
        events_log.note(self, "stop", key, b, reason)
        log.info("task %s: stopping attempt %d on %s (%s)", key, b.attempt, b.node, reason)
        self._refresh_task(key)

    def _spawn_bg(self, coro: Any) -> None:
        t = asyncio.ensure_future(coro)
        self._background.add(t)
        t.add_done_callback(self._background.discard)

    # == time: heartbeats, leases, backoff ==========================================================================
    async def _expire(self, report: CycleReport) -> None:
        now = self.clock()
        st = self.settings
        calm = self.liveness.calm(now)
        if calm:
            self.liveness.check(now, report)
        # binds an alive agent has not taken within the lease: released if provably never delivered, else stopped
        expired: list[tuple[str, Binding, NodeLive]] = []
        for key, b in self.bindings.items():  # nothing changes them in this loop
            if not calm or b.state != "binding" or not b.published:
                continue
            r = self.results.get(key)
            if r is not None and r.attempt == b.attempt:
                continue
            lv = self.live.get(b.node)
            if lv is None or lv.state != "alive" or now - b.decided <= st.bind_lease:
                continue
            if lv.holding.get(key) == b.attempt or (b.seq and lv.through_seq >= b.seq):
                continue  # the agent has it: wait for its answer for as long as it lives
            expired.append((key, b, lv))
        if expired:
            await asyncio.gather(*(self._lease_expired(key, b, lv, report) for key, b, lv in expired))
        # backoffs that ended
        for key in [k for k, t in self.backoff_until.items() if t <= now]:
            del self.backoff_until[key]
            self._refresh_task(key)

    async def _lease_expired(self, key: str, b: Binding, lv: NodeLive, report: CycleReport) -> None:
        """The decision is deleted first; if the agent's consumer had not delivered it by then it never will, and
        the task is free at once.  Otherwise (or when that cannot be told) the attempt is stopped."""
        reason = f"bind to {b.node} not received within the {self.settings.bind_lease:g}s lease"
        delivered: int | None = None
        if b.seq:
            await self.bus.delete_decision(b.seq)
            if lv.consumer:
                delivered = await self.bus.consumer_delivered(lv.consumer)
        if self.bindings.get(key) is not b or b.state != "binding":
            return
        if delivered is not None and delivered < b.seq:
            self._release(key, reason, "lease", exclude=True)
        else:
            self._stop_attempt(key, reason, "lease", bind_deleted=bool(b.seq))
        report.released.append((key, "lease"))

    def _release(self, key: str, reason: str, kind: str, *, exclude: bool = False, backoff: bool | None = None) -> None:
        """Send a task back to Pending (its attempt is known stopped): record why, and hold it back for a while
        when its node failed it; Failed once it has failed ``max_attempts`` times in a row."""
        b = self.bindings.get(key)
        if b is None:
            return
        if key in self._deleting:
            self._finish_delete(key)
            return
        now = self.clock()
        st = self.settings
        if backoff is None:
            backoff = kind in ("rejected", "lease")
        delay = 0.0
        state = "released"
        if backoff:
            n = self.failures.get(key, 0) + 1
            self.failures[key] = n
            if st.max_attempts and n >= st.max_attempts:
                state = "failed"
                reason = f"gave up after {n} failed attempts; the last: {reason}"
            else:
                delay = min(st.backoff_max, st.backoff_initial * 2 ** (n - 1))
                self.backoff_until[key] = now + delay
        if exclude and b.node and state == "released":
            self.excluded.setdefault(key, {})[b.node] = now + st.exclusion_ttl
        nb = dataclasses.replace(b, state=state, reason=reason, backoff=delay, version=self._next_version(), stop="")
        self.bindings[key] = nb
        self._unpublished.discard(key)
        self.reasons[key] = reason
        events_log.note(self, "failed" if state == "failed" else "release", key, nb, reason)
        self._write_binding(key, nb)
        self.metrics.releases.labels(kind).inc()
        self._new_work()
        if state == "failed":
            log.warning("task %s Failed: %s", key, reason)
        else:
            log.info("task %s back to Pending: %s%s", key, reason, f" (backoff {delay:g}s)" if delay else "")
        self._refresh_task(key)

    # == restart ======================================================================================================
    async def _recover(self) -> None:
        """After catch-up: rebuild the objects whose last message was refused, settle results that came before
        their binding record, then find out whether each unanswered bind reached the decision stream, and send
        it if not."""
        await self.replay_rejected()
        self._caught_up = True  # results are applied as during normal operation from here
        orphans, self._orphans = self._orphans, {}
        for key, orphan in orphans.items():
            self._replay_result(key, orphan)
        now = self.clock()
        todo = []
        for key, b in list(self.bindings.items()):
            if not b.live:
                continue
            b.decided = now
            self.live.setdefault(b.node, NodeLive(since=now))
            r = self.results.get(key)
            if key not in self.specs["task"]:
                # deleted while bound (by an older scheduler that forgot it): stop it, then let it go
                if r is not None and r.attempt == b.attempt and r.what in TERMINAL:
                    self.bindings.pop(key, None)
                    self._purge_object("task", key)
                    continue
                self._deleting.add(key)
                if b.state == "binding":
                    self._stop_attempt(key, "task deleted", "deleted")
                    continue
            if b.state == "binding" and r is not None and r.attempt == b.attempt:
                continue
            kind = "evict" if b.state == "evicting" else "bind"
            found = await self.bus.last_decision(S.decision_subject(b.node, kind, key))
            if found is not None:
                try:
                    dm = m.decode(found[1])
                except m.DecodeError:
                    dm = None
                if dm is not None and getattr(dm, "attempt", None) == b.attempt:
                    if kind == "bind":
                        b.seq = found[0]
                    continue
            b.published = False
            todo.append((key, b, kind))
        if todo:
            log.info("republishing %d decisions that never reached the decision stream", len(todo))
            await self._send_decisions(todo)

    async def _flush_purges(self) -> None:
        """Stream hygiene: purge what deleted objects left behind (after their last record is written)."""
        if not self._purges:
            return
        purges, self._purges = self._purges, []
        for subject, before in purges:
            self._outbox.pop(subject, None)
        await asyncio.gather(*(self.bus.purge_state(subject, before) for subject, before in purges))

    def _binding_record(self, key: str, b: Binding) -> m.BindingRecord:
        ns, name = key.split("/", 1)
        return m.BindingRecord(version=b.version, namespace=ns, name=name, attempt=b.attempt, node=b.node,
                               state=b.state, reason=b.reason if b.state in ("released", "failed", "done")
                               else b.evict_reason, backoff=b.backoff, decided_at=time.time(), boot=b.boot,
                               outcome=b.outcome, exit_code=b.exit_code,
                               stop=b.stop if b.state == "evicting" else "", writer=self.boot)
