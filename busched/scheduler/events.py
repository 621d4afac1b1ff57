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
from collections.abc import Callable
from typing import Any, Protocol

from busched.api import objects as o
from busched.api.build import JOB_PHASES, SpecError
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.cache.cache import Cache
from busched.framework.cycle import paused_gc
from busched.metrics import SchedulerMetrics
from busched.scheduler.bindings import BindingTable
from busched.scheduler.effective import EffectiveObjects
from busched.scheduler.records import (
    _DECODE,
    NodeLive,
    SchedulerSettings,
    _describe,
    _field_error,
    _task_key,
)

REJECTIONS = frozenset({"oversized", "malformed", "invalid", "mismatch", "identity"})

log = logging.getLogger("busched.scheduler")


class HistoryBus(Protocol):
    """What the feed needs of `busched.bus.client.Bus` (the stream's history, purges)."""

    async def subject_history(self, subject: str) -> list[tuple[int, bytes]]: ...

    async def purge_state(self, subject: str, before_seq: int | None = None) -> Any: ...


class StateFeed:
    """Applies the state stream.  Owns what it learnt per object beside the specs (``seqs``: the stream sequence
    last applied; ``refused``: why its last change was refused), the refusals to replay after a catch-up and
    the purges due; hands binding records, results and deletions of bound tasks to the binding ``table``,
    and keeps the ``effective`` objects up to date.  ``specs``, ``live``, ``pg_status`` and ``outbox`` are the
    scheduler's shared dicts; ``new_work`` tells the trigger."""

    def __init__(self, settings: SchedulerSettings, clock: Callable[[], float], bus: HistoryBus, *,
                 cache: Cache, specs: dict[str, dict[str, Any]], table: BindingTable, effective: EffectiveObjects,
                 live: dict[str, NodeLive], pg_status: dict[str, m.PodGroupStatus],
                 outbox: dict[str, tuple[m.Msg, str | None]], new_work: Callable[[], None],
                 metrics: SchedulerMetrics) -> None:
        self.settings = settings
        self.clock = clock
        self.bus = bus
        self.cache = cache
        self.specs = specs
        self.table = table
        self.effective = effective
        self.live = live
        self.pg_status = pg_status
        self.outbox = outbox
        self.new_work = new_work
        self.metrics = metrics
        self.seqs: dict[tuple[str, str], int] = {}  # (kind, key) -> stream sequence of the last message applied
        self.refused: dict[tuple[str, str], str] = {}  # (kind, key) -> why the object's last change was refused
        self.last_refusal = ""
        self.rejected_at_catchup: dict[str, int] = {}  # subject -> sequence of its refused last message
        self.quiet = False  # replaying history: refusals were counted already
        self.counts: dict[tuple[str, str], int] = {}  # (kind, upsert|delete|stale) -> events not yet in metrics
        self.purges: list[tuple[str, int | None]] = []  # stream hygiene: (subject, purge below this seq)
        # a node ledger message heard (node, sequence): a sharded scheduler's ledgers (busched.scheduler.ledger)
        self.on_ledger: Callable[[str, int], None] | None = None
        # a queue status read back (name, status): the queue statuses' record (busched.scheduler.queue_statuses)
        self.on_queue_status: Callable[[str, m.QueueStatus], None] | None = None
        self.install_default_queue()

    def install_default_queue(self) -> None:
        """The built-in ``default`` queue, as Volcano's controller installs it: there from the start, replaced by
        an applied one, back when that one is deleted.  Built here, so a replay (a `Scheduler` fed the same
        stream) has it at the same place in the queue order."""
        self.specs["queue"][o.DEFAULT_QUEUE] = o.BUILTIN_DEFAULT_QUEUE
        self.effective.refresh("queue", o.DEFAULT_QUEUE)

    # == inbound: the state stream ====================================================================================
    def handle_state(self, subject: str, data: bytes, seq: int = 0) -> str:
        """Apply one state-stream message; returns what happened ("applied", "stale", or a rejection reason)."""
        try:
            return self.handle_one(subject, data, seq)
        finally:
            self.flush_counts()

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
                        self.handle_one(subject, data, seq)
                    except Exception:  # noqa: BLE001 - one bad message must not stop the batch
                        log.exception("state message on %s (seq %d) failed", subject, seq)
            finally:
                self.flush_counts()

    def handle_one(self, subject: str, data: bytes, seq: int) -> str:
        kind, key = S.parse_state_subject(subject)
        if kind == "binding":
            b = self.table.bindings.get(key)
            if b is not None and 0 < seq <= b.rec_seq:
                return "own"  # our own record, already acknowledged (or an older one)
            if self.table.own_echo(key, data, seq):
                return "own"  # our own record, before its acknowledgement: the bytes we wrote
        what = self.handle_decoded(subject, kind, key, data, seq)
        if what in REJECTIONS:
            if not self.table.caught_up:
                self.rejected_at_catchup[subject] = seq
            if key in self.specs.get(kind, ()):
                # the object stays as it was; it says why its last change was refused (`busched get`)
                self.refused[(kind, key)] = self.last_refusal
        return what

    def handle_decoded(self, subject: str, kind: str, key: str, data: bytes, seq: int) -> str:
        if len(data) > self.settings.max_event_bytes:
            return self.reject("oversized", kind, f"{_describe(kind, key)}: payload of {len(data)} bytes exceeds "
                                                   f"the limit of {self.settings.max_event_bytes} (subject {subject})")
        try:
            msg = _DECODE(data)
        except (m.DecodeError, RecursionError) as e:
            return self.reject("malformed", kind,
                                f"{_describe(kind, key)}: {_field_error(e)} (subject {subject}, seq {seq})")
        try:
            return self.apply(kind, key, msg, "", seq)
        except SpecError as e:
            return self.reject("invalid", kind, f"{e} (subject {subject}, seq {seq})")

    async def replay_rejected(self) -> None:
        """After a catch-up: for every subject whose last message was refused, apply its retained history
        up to that message, so the object is what the live scheduler kept when it refused it."""
        todo, self.rejected_at_catchup = self.rejected_at_catchup, {}
        for subject, bad_seq in todo.items():
            try:
                history = await self.bus.subject_history(subject)
            except Exception as e:  # noqa: BLE001 - the object stays as the catch-up left it
                log.warning("cannot read the history of %s: %s", subject, e)
                continue
            self.quiet = True
            try:
                kind, key = S.parse_state_subject(subject)
                for seq, data in history:
                    if seq >= bad_seq:
                        break
                    self.handle_decoded(subject, kind, key, data, seq)
            finally:
                self.quiet = False
            log.info("%s: its last message was refused; rebuilt from %d earlier messages", subject,
                     sum(1 for q, _ in history if q < bad_seq))

    def count(self, kind: str, what: str) -> None:
        k = (kind, what)
        self.counts[k] = self.counts.get(k, 0) + 1

    def flush_counts(self) -> None:
        if not self.counts:
            return
        counts, self.counts = self.counts, {}
        for (kind, what), n in counts.items():
            if what == "stale":
                self.metrics.events_rejected.labels("stale", kind).inc(n)
            else:
                self.metrics.events.labels(kind, what).inc(n)

    def reject(self, reason: str, kind: str, text: str) -> str:
        self.last_refusal = f"{reason}: {text}"
        if self.quiet:
            return reason
        self.metrics.events_rejected.labels(reason, kind or "unknown").inc()
        log.warning("rejected %s message: %s", reason, text)
        return reason

    def apply(self, kind: str, key: str, msg: m.Msg, what: str, seq: int = 0) -> str:
        okind = m.object_kind(msg)
        if okind is not None:
            if okind != kind or m.object_key(msg) != key:
                what = what or _describe(kind, key)
                return self.reject("mismatch", kind, f"{what}: payload is a {type(msg).__name__} for "
                                                      f"{okind} {m.object_key(msg)}")
            return self.apply_object(okind, key, msg, seq)
        if kind == "binding" and isinstance(msg, m.BindingRecord):
            if _task_key(msg.namespace, msg.name) != key:
                return self.reject("mismatch", kind, f"{_describe(kind, key)}: record for {msg.namespace}/{msg.name}")
            return self.table.apply_binding(key, msg, seq)
        if kind == "leader" and isinstance(msg, m.LeaderEpoch):
            return self.table.apply_epoch(key, msg, seq)
        if kind == "podgroup" and isinstance(msg, m.PodGroupStatus):
            return self.apply_pg_status(key, msg)
        if kind == "queueStatus" and isinstance(msg, m.QueueStatus):
            if msg.name != key:
                return self.reject("mismatch", kind, f"{_describe(kind, key)}: status of queue {msg.name}")
            if self.on_queue_status is not None:
                self.on_queue_status(key, msg)
            return "applied"
        if kind == "ledger" and isinstance(msg, m.NodeLedger):
            if msg.node != key:
                return self.reject("mismatch", kind, f"{_describe(kind, key)}: ledger of node {msg.node}")
            if self.on_ledger is not None:
                self.on_ledger(key, seq)
            return "applied"
        if kind == "result" and isinstance(msg, (m.BindAccepted, m.BindRejected, m.TaskPhaseChanged)):
            node, _, tkey = key.partition("/")
            if msg.node != node or _task_key(msg.namespace, msg.name) != tkey:
                what = what or _describe(kind, key)
                return self.reject("mismatch", kind, f"{what}: result for {msg.namespace}/{msg.name} on "
                                                      f"{msg.node}")
            return self.table.apply_result(tkey, msg, seq)
        what = what or _describe(kind, key)
        return self.reject("mismatch", kind, f"{what}: unexpected {type(msg).__name__} on this subject")

    def apply_object(self, kind: str, key: str, msg: m.Msg, seq: int = 0) -> str:
        vkey = (kind, key)
        last = self.seqs.get(vkey)
        if last is not None and seq and seq <= last:
            self.count(kind, "stale")
            return "stale"  # delivered twice
        # by exact type (`_apply_object` gets only the types `m.object_kind` knows): a set lookup,
        # a tenth of isinstance over seven msgspec types
        self.refused.pop(vkey, None)
        if type(msg) in m.DELETE_TYPES:
            self.seqs[vkey] = seq
            old = self.specs[kind].get(key)
            if old is o.BUILTIN_DEFAULT_QUEUE:
                old = None  # the built-in default queue cannot be deleted (Volcano's admission refuses it)
            if old is not None and not (kind == "task" and self.table.stopping_delete(key)):
                self.specs[kind].pop(key, None)
                self.cache.delete(kind, key)
                self.on_deleted(kind, key)
                self.new_work()
            if old is None and self.settings.purge:
                self.purge_object(kind, key)
            self.count(kind, "delete")
            return "applied"
        spec = getattr(msg, m.SPEC_FIELD[kind])
        old = self.specs[kind].get(key)
        self.specs[kind][key] = spec
        try:
            self.effective.refresh(kind, key)
        except SpecError:
            if old is None:
                self.specs[kind].pop(key, None)
            else:
                self.specs[kind][key] = old
            raise
        self.seqs[vkey] = seq
        if kind == "task":
            self.table.deleting.discard(key)  # created again while its old attempt stops: it is placed once stopped
        self.count(kind, "upsert")
        if kind == "node":
            self.live.setdefault(key, NodeLive(since=self.clock()))
        self.new_work()
        return "applied"

    def on_deleted(self, kind: str, key: str) -> None:
        if kind == "task":
            self.table.forget(key)
        elif kind == "job":
            self.pg_status.pop(key, None)
            self.effective.job_deleted(key)
        elif kind == "node":
            self.table.node_deleted(key)
        elif kind == "queue" and key == o.DEFAULT_QUEUE:
            self.install_default_queue()  # the applied one is gone: the built-in one is back
        if self.settings.purge:
            self.purge_object(kind, key)

    def purge_object(self, kind: str, key: str) -> None:
        """Stream hygiene: a deleted object's subjects go (up to its delete), with its records."""
        seq = self.seqs.get((kind, key), 0)
        self.purges.append((S.state_subject(kind, key), seq + 1 if seq else None))
        if kind == "task":
            self.purges.append((S.binding_subject(key), None))
            self.purges.append((S.task_results(key), None))
        elif kind == "job":
            self.purges.append((S.podgroup_subject(key), None))
        elif kind == "queue":
            self.purges.append((S.queue_status_subject(key), None))

    def apply_pg_status(self, key: str, st: m.PodGroupStatus) -> str:
        if st.phase not in JOB_PHASES:
            return self.reject("invalid", "podgroup", f"podgroup {key}: phase: unknown phase {st.phase!r} "
                                                       f"(one of {', '.join(sorted(p for p in JOB_PHASES if p))})")
        self.pg_status[key] = st
        self.effective.refresh_job(key)
        return "applied"

    def finish_delete(self, key: str) -> None:
        """A deleted task whose attempt is known stopped: it goes, with its subjects."""
        self.table.deleting.discard(key)
        if key in self.specs["task"]:
            self.specs["task"].pop(key, None)
            self.cache.delete("task", key)
        self.on_deleted("task", key)
        self.new_work()

    async def flush_purges(self) -> None:
        """Stream hygiene: purge what deleted objects left behind (after their last record is written)."""
        if not self.purges:
            return
        purges, self.purges = self.purges, []
        for subject, _ in purges:
            self.outbox.pop(subject, None)
        await asyncio.gather(*(self.bus.purge_state(subject, before) for subject, before in purges))
