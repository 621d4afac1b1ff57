"""The state stream in: decode, validate and apply each message.

Object specs (upserts and deletes), binding and podgroup records, and agents' results are folded
into the scheduler's state, and the touched objects are refreshed in the cache
(`busched.scheduler.effective`).  The stream decides order: on one subject the later message wins,
whatever ``version`` its publisher wrote, so catching up from the last message of every subject
rebuilds what the live scheduler had.  Bad messages (oversized, malformed, mismatched with their
subject, invalid specs) are rejected, counted and logged and leave the object as it was; when a
catch-up finds one as a subject's last message, the subject's retained history is replayed
(`replay_rejected`) so the object is what the live scheduler kept.

Results are believed only from the node that holds the task's current binding, for that attempt,
and from the agent boot that took it; a result for an attempt that was never bound, from another
node, or from another incarnation claiming to run it is refused (``identity``) and counted.  Terminal
results are final.  During catch-up a result may come before the binding record it answers: it is
kept as an orphan and settled by `BindingTable.recover`.  Binding records and results are applied by
the binding table (`busched.scheduler.bindings.BindingTable.apply_binding`, ``apply_result``): the
feed decodes and checks them, and says where they belong.
"""

from __future__ import annotations

import asyncio
import logging

from busched.bus import messages as m
from busched.bus import subjects as S
from busched.api.build import JOB_PHASES, SpecError
from busched.framework.cycle import paused_gc
from busched.scheduler.records import (
    _DECODE,
    NodeLive,
    _describe,
    _field_error,
    _task_key,
)
from busched.scheduler.state import SchedulerState

REJECTIONS = frozenset({"oversized", "malformed", "invalid", "mismatch", "identity"})

log = logging.getLogger("busched.scheduler")


class Events(SchedulerState):
    # == inbound: the state stream ====================================================================================
    def handle_state(self, subject: str, data: bytes, seq: int = 0) -> str:
        """Apply one state-stream message; returns what happened ("applied", "stale", or a rejection reason)."""
        try:
            return self._handle_one(subject, data, seq)
        finally:
            self._flush_counts()

    def handle_state_batch(self, items: list[tuple[str, bytes, int]]) -> None:
        """Apply state-stream messages in stream order, as `handle_state` does one by one.

        What the per-message path pays once per message is paid once per batch: the garbage
        collector is paused (a catch-up builds millions of objects, and each automatic full
        collection would rescan all of them), and the applied/stale counters are added up and
        published to the metrics at the end.  Rejections are still logged one by one.
        """
        with paused_gc():
            try:
                for subject, data, seq in items:
                    try:
                        self._handle_one(subject, data, seq)
                    except Exception:  # noqa: BLE001 - one bad message must not stop the batch
                        log.exception("state message on %s (seq %d) failed", subject, seq)
            finally:
                self._flush_counts()

    def _handle_one(self, subject: str, data: bytes, seq: int) -> str:
        kind, key = S.parse_state_subject(subject)
        if kind == "binding":
            b = self.bindings.get(key)
            if b is not None and 0 < seq <= b.rec_seq:
                return "own"  # our own record, already acknowledged (or an older one)
        what = self._handle_decoded(subject, kind, key, data, seq)
        if what in REJECTIONS:
            if not self.table.caught_up:
                self._rejected_at_catchup[subject] = seq
            if key in self.specs.get(kind, ()):
                # the object stays as it was; it says why its last change was refused (`busched get`)
                self.refused[(kind, key)] = self._last_refusal
        return what

    def _handle_decoded(self, subject: str, kind: str, key: str, data: bytes, seq: int) -> str:
        if len(data) > self.settings.max_event_bytes:
            return self._reject("oversized", kind, f"{_describe(kind, key)}: payload of {len(data)} bytes exceeds "
                                                   f"the limit of {self.settings.max_event_bytes} (subject {subject})")
        try:
            msg = _DECODE(data)
        except (m.DecodeError, RecursionError) as e:
            return self._reject("malformed", kind,
                                f"{_describe(kind, key)}: {_field_error(e)} (subject {subject}, seq {seq})")
        try:
            return self._apply(kind, key, msg, "", seq)
        except SpecError as e:
            return self._reject("invalid", kind, f"{e} (subject {subject}, seq {seq})")

    async def replay_rejected(self) -> None:
        """After a catch-up: for every subject whose last message was refused, apply its retained history
        up to that message, so the object is what the live scheduler kept when it refused it."""
        todo, self._rejected_at_catchup = self._rejected_at_catchup, {}
        for subject, bad_seq in todo.items():
            try:
                history = await self.bus.subject_history(subject)
            except Exception as e:  # noqa: BLE001 - the object stays as the catch-up left it
                log.warning("cannot read the history of %s: %s", subject, e)
                continue
            self._quiet = True
            try:
                kind, key = S.parse_state_subject(subject)
                for seq, data in history:
                    if seq >= bad_seq:
                        break
                    self._handle_decoded(subject, kind, key, data, seq)
            finally:
                self._quiet = False
            log.info("%s: its last message was refused; rebuilt from %d earlier messages", subject,
                     sum(1 for q, _ in history if q < bad_seq))

    def _count(self, kind: str, what: str) -> None:
        k = (kind, what)
        self._counts[k] = self._counts.get(k, 0) + 1

    def _flush_counts(self) -> None:
        if not self._counts:
            return
        counts, self._counts = self._counts, {}
        for (kind, what), n in counts.items():
            if what == "stale":
                self.metrics.events_rejected.labels("stale", kind).inc(n)
            else:
                self.metrics.events.labels(kind, what).inc(n)

    def _reject(self, reason: str, kind: str, text: str) -> str:
        self._last_refusal = f"{reason}: {text}"
        if self._quiet:
            return reason
        self.metrics.events_rejected.labels(reason, kind or "unknown").inc()
        log.warning("rejected %s message: %s", reason, text)
        return reason

    def _apply(self, kind: str, key: str, msg: m.Msg, what: str, seq: int = 0) -> str:
        okind = m.object_kind(msg)
        if okind is not None:
            if okind != kind or m.object_key(msg) != key:
                what = what or _describe(kind, key)
                return self._reject("mismatch", kind, f"{what}: payload is a {type(msg).__name__} for "
                                                      f"{okind} {m.object_key(msg)}")
            return self._apply_object(okind, key, msg, seq)
        if kind == "binding" and isinstance(msg, m.BindingRecord):
            if _task_key(msg.namespace, msg.name) != key:
                return self._reject("mismatch", kind, f"{_describe(kind, key)}: record for {msg.namespace}/{msg.name}")
            return self.table.apply_binding(key, msg, seq)
        if kind == "podgroup" and isinstance(msg, m.PodGroupStatus):
            return self._apply_pg_status(key, msg)
        if kind == "result" and isinstance(msg, (m.BindAccepted, m.BindRejected, m.TaskPhaseChanged)):
            node, _, tkey = key.partition("/")
            if msg.node != node or _task_key(msg.namespace, msg.name) != tkey:
                what = what or _describe(kind, key)
                return self._reject("mismatch", kind, f"{what}: result for {msg.namespace}/{msg.name} on "
                                                      f"{msg.node}")
            return self.table.apply_result(tkey, msg, seq)
        what = what or _describe(kind, key)
        return self._reject("mismatch", kind, f"{what}: unexpected {type(msg).__name__} on this subject")

    def _apply_object(self, kind: str, key: str, msg: m.Msg, seq: int = 0) -> str:
        vkey = (kind, key)
        last = self.seqs.get(vkey)
        if last is not None and seq and seq <= last:
            self._count(kind, "stale")
            return "stale"  # delivered twice
        # by exact type (`_apply_object` gets only the types `m.object_kind` knows): a set lookup,
        # a tenth of isinstance over seven msgspec types
        self.refused.pop(vkey, None)
        if type(msg) in m.DELETE_TYPES:
            self.seqs[vkey] = seq
            old = self.specs[kind].get(key)
            if old is not None and not (kind == "task" and self.table.stopping_delete(key)):
                self.specs[kind].pop(key, None)
                self.cache.delete(kind, key)
                self._on_deleted(kind, key)
                self._new_work()
            if old is None and self.settings.purge:
                self._purge_object(kind, key)
            self._count(kind, "delete")
            return "applied"
        spec = getattr(msg, m.SPEC_FIELD[kind])
        old = self.specs[kind].get(key)
        self.specs[kind][key] = spec
        try:
            self._refresh(kind, key)
        except SpecError:
            if old is None:
                self.specs[kind].pop(key, None)
            else:
                self.specs[kind][key] = old
            raise
        self.seqs[vkey] = seq
        if kind == "task":
            self.table.deleting.discard(key)  # created again while its old attempt stops: it is placed once stopped
        self._count(kind, "upsert")
        if kind == "node":
            self.live.setdefault(key, NodeLive(since=self.clock()))
        self._new_work()
        return "applied"

    def _on_deleted(self, kind: str, key: str) -> None:
        if kind == "task":
            self.table.forget(key)
        elif kind == "job":
            self.pg_status.pop(key, None)
        elif kind == "node":
            self.table.node_deleted(key)
        if self.settings.purge:
            self._purge_object(kind, key)

    def _purge_object(self, kind: str, key: str) -> None:
        """Stream hygiene: a deleted object's subjects go (up to its delete), with its records."""
        seq = self.seqs.get((kind, key), 0)
        self._purges.append((S.state_subject(kind, key), seq + 1 if seq else None))
        if kind == "task":
            self._purges.append((S.binding_subject(key), None))
            self._purges.append((S.task_results(key), None))
        elif kind == "job":
            self._purges.append((S.podgroup_subject(key), None))

    def _apply_pg_status(self, key: str, st: m.PodGroupStatus) -> str:
        if st.phase not in JOB_PHASES:
            return self._reject("invalid", "podgroup", f"podgroup {key}: phase: unknown phase {st.phase!r} "
                                                       f"(one of {', '.join(sorted(p for p in JOB_PHASES if p))})")
        self.pg_status[key] = st
        self._refresh_job(key)
        return "applied"

    def _finish_delete(self, key: str) -> None:
        """A deleted task whose attempt is known stopped: it goes, with its subjects."""
        self.table.deleting.discard(key)
        if key in self.specs["task"]:
            self.specs["task"].pop(key, None)
            self.cache.delete("task", key)
        self._on_deleted("task", key)
        self._new_work()

    async def _flush_purges(self) -> None:
        """Stream hygiene: purge what deleted objects left behind (after their last record is written)."""
        if not self._purges:
            return
        purges, self._purges = self._purges, []
        for subject, before in purges:
            self._outbox.pop(subject, None)
        await asyncio.gather(*(self.bus.purge_state(subject, before) for subject, before in purges))
