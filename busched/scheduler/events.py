"""The state stream in: decode, validate and apply each message.

Object specs (upserts and deletes, ordered by version), the scheduler's own binding and podgroup
records, and agents' results are folded into the scheduler's state, and the touched objects are
refreshed in the cache (`busched.scheduler.effective`).  Bad messages (oversized, malformed,
mismatched with their subject, invalid specs) are rejected, counted and logged; stale ones are
counted.  During catch-up a result may come before the binding record it answers: it is kept as an
orphan and settled by `Bindings._recover`.
"""

from __future__ import annotations

import dataclasses
import logging

from busched.bus import messages as m
from busched.bus import subjects as S
from busched.cache.build import SpecError
from busched.framework.cycle import paused_gc
from busched.scheduler.records import (
    _DECODE,
    TERMINAL,
    Binding,
    NodeLive,
    Result,
    _describe,
    _field_error,
    _task_key,
)

log = logging.getLogger("busched.scheduler")


class Events:
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
        if len(data) > self.settings.max_event_bytes:
            return self._reject("oversized", kind, f"{_describe(kind, key)}: payload of {len(data)} bytes exceeds "
                                                   f"the limit of {self.settings.max_event_bytes} (subject {subject})")
        try:
            msg = _DECODE(data)
        except m.DecodeError as e:
            return self._reject("malformed", kind,
                                f"{_describe(kind, key)}: {_field_error(e)} (subject {subject}, seq {seq})")
        try:
            return self._apply(kind, key, msg, "")
        except SpecError as e:
            return self._reject("invalid", kind, f"{e} (subject {subject}, seq {seq})")

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
        self.metrics.events_rejected.labels(reason, kind or "unknown").inc()
        log.warning("rejected %s message: %s", reason, text)
        return reason

    def _apply(self, kind: str, key: str, msg: m.Msg, what: str) -> str:
        okind = m.object_kind(msg)
        if okind is not None:
            if okind != kind or m.object_key(msg) != key:
                what = what or _describe(kind, key)
                return self._reject("mismatch", kind, f"{what}: payload is a {type(msg).__name__} for "
                                                      f"{okind} {m.object_key(msg)}")
            return self._apply_object(okind, key, msg)
        if kind == "binding" and isinstance(msg, m.BindingRecord):
            return self._apply_binding(key, msg)
        if kind == "podgroup" and isinstance(msg, m.PodGroupStatus):
            return self._apply_pg_status(key, msg)
        if kind == "result" and isinstance(msg, (m.BindAccepted, m.BindRejected, m.TaskPhaseChanged)):
            node, _, tkey = key.partition("/")
            if msg.node != node or _task_key(msg.namespace, msg.name) != tkey:
                what = what or _describe(kind, key)
                return self._reject("mismatch", kind, f"{what}: result for {msg.namespace}/{msg.name} on "
                                                      f"{msg.node}")
            return self._apply_result(tkey, msg)
        what = what or _describe(kind, key)
        return self._reject("mismatch", kind, f"{what}: unexpected {type(msg).__name__} on this subject")

    def _apply_object(self, kind: str, key: str, msg: m.Msg) -> str:
        vkey = (kind, key)
        last = self.versions.get(vkey)
        if last is not None and msg.version <= last:
            self._count(kind, "stale")
            return "stale"
        # by exact type (`_apply_object` gets only the types `m.object_kind` knows): a set lookup,
        # a tenth of isinstance over seven msgspec types
        if type(msg) in m.DELETE_TYPES:
            self.versions[vkey] = msg.version
            old = self.specs[kind].pop(key, None)
            if old is not None:
                self.cache.delete(kind, key)
                self._on_deleted(kind, key)
                self._new_work()
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
        self.versions[vkey] = msg.version
        self._count(kind, "upsert")
        if kind == "node":
            self.live.setdefault(key, NodeLive(since=self.clock()))
        self._new_work()
        return "applied"

    def _on_deleted(self, kind: str, key: str) -> None:
        if kind == "task":
            b = self.bindings.get(key)
            r = self.results.get(key)
            if b is not None and b.live and not (r and r.attempt == b.attempt and r.what in TERMINAL):
                # stop it on its node
                eb = dataclasses.replace(b, state="evicting", evict_reason="task deleted",
                                         version=self._next_version())
                ns, name = key.split("/", 1)
                ev = m.EvictDecision(version=eb.version, namespace=ns, name=name, node=b.node, attempt=b.attempt,
                                     reason="task deleted")
                self._outbox[S.decision_subject(b.node, "evict", key)] = (ev, f"evict:{key}:{b.attempt}")
            for d in (self.bindings, self.results, self.backoff_until, self.failures, self.excluded, self.reasons):
                d.pop(key, None)
        elif kind == "job":
            self.pg_status.pop(key, None)
        elif kind == "node":
            for tkey, b in list(self.bindings.items()):
                if b.node == key and b.live:
                    self._release(tkey, f"node {key} deleted", "node_lost")
            self.live.pop(key, None)

    def _apply_binding(self, key: str, rec: m.BindingRecord) -> str:
        cur = self.bindings.get(key)
        if cur is not None and (rec.attempt, rec.version) <= (cur.attempt, cur.version):
            return "stale"  # our own echo, or older
        b = Binding(attempt=rec.attempt, node=rec.node, state=rec.state, reason=rec.reason, version=rec.version,
                    backoff=rec.backoff, decided=self.clock(), published=True, seq=0)
        if rec.state == "evicting":
            b.evict_reason = rec.reason
        self.bindings[key] = b
        if rec.state == "released":
            self.reasons[key] = rec.reason
            if rec.backoff > 0:
                self.backoff_until[key] = self.clock() + rec.backoff
        if b.node and b.live:
            self.live.setdefault(b.node, NodeLive(since=self.clock()))
        self._refresh_task(key)
        return "applied"

    def _apply_pg_status(self, key: str, st: m.PodGroupStatus) -> str:
        cur = self.pg_status.get(key)
        if cur is not None and st.version <= cur.version:
            return "stale"
        self.pg_status[key] = st
        self._refresh_job(key)
        return "applied"

    def _apply_result(self, key: str, msg: m.BindAccepted | m.BindRejected | m.TaskPhaseChanged) -> str:
        if isinstance(msg, m.BindAccepted):
            what, reason = "accepted", ""
        elif isinstance(msg, m.BindRejected):
            what, reason = "rejected", msg.reason
        else:
            what, reason = msg.phase, msg.reason
            if what not in ("Running", "Succeeded", "Failed"):
                return self._reject("invalid", "result", f"task {key}: phase: unknown phase {what!r} "
                                                         "(one of Running, Succeeded, Failed)")
        r = Result(attempt=msg.attempt, node=msg.node, what=what, reason=reason, boot=msg.boot, version=msg.version)
        cur = self.results.get(key)
        if cur is not None and (r.attempt, r.version) <= (cur.attempt, cur.version):
            return "stale"
        b = self.bindings.get(key)
        if b is None or r.attempt > b.attempt:
            if not self._caught_up:
                # catching up: the last binding record of this task may come later in the replay
                keep = self._orphans.get(key)
                if keep is None or (r.attempt, r.version) > (keep.attempt, keep.version):
                    self._orphans[key] = r
                return "deferred"
            if what == "rejected" or r.attempt <= 0 or key not in self.specs["task"]:
                return "stale"
            # a bind we have no record of (the record was lost): the agent's word is what holds
            b = self.bindings[key] = Binding(attempt=r.attempt, node=r.node, version=self._next_version(),
                                             decided=self.clock())
            self._outbox[S.binding_subject(key)] = (self._binding_record(key, b), None)
        if key not in self.specs["task"]:
            return "stale"
        if r.attempt < b.attempt or r.node != b.node or not b.live:
            return "stale"  # an older attempt; a heartbeat still holding it gets an evict
        self.results[key] = r
        self.metrics.bind_results.labels(what).inc()
        if what in ("accepted", "rejected") or (what == "Running" and (cur is None or cur.attempt != r.attempt)):
            if self.ready:
                self.metrics.bind_latency.observe(max(0.0, self.clock() - b.decided))
        if what == "rejected":
            self._release(key, f"rejected by {r.node}: {reason or 'no reason given'}", "rejected", exclude=True)
        elif b.state == "evicting" and what == "Failed":
            self._release(key, f"evicted from {r.node}: {b.evict_reason}", "evicted", backoff=False)
        else:
            if what == "Succeeded" and b.state == "evicting":
                b.state = "binding"  # it finished before the eviction reached it
                b.version = self._next_version()
                self._outbox[S.binding_subject(key)] = (self._binding_record(key, b), None)
            if what in ("Running", "Succeeded"):
                self.failures.pop(key, None)
            if what in TERMINAL:
                self._new_work()  # its resources are free
            self._refresh_task(key)
        return "applied"


    def _replay_result(self, key: str, r: Result) -> None:
        ns, name = key.split("/", 1)
        if r.what == "accepted":
            msg: m.Msg = m.BindAccepted(version=r.version, namespace=ns, name=name, node=r.node, attempt=r.attempt,
                                        boot=r.boot)
        elif r.what == "rejected":
            msg = m.BindRejected(version=r.version, namespace=ns, name=name, node=r.node, attempt=r.attempt,
                                 reason=r.reason, boot=r.boot)
        else:
            msg = m.TaskPhaseChanged(version=r.version, namespace=ns, name=name, node=r.node, attempt=r.attempt,
                                     phase=r.what, reason=r.reason, boot=r.boot)
        self._apply_result(key, msg)
