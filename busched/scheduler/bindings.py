"""Binds and evicts out to the agents, and what keeps them honest: fences, leases, stops, backoff, recovery.

A bind is written ahead: its binding record goes to the state stream first, then the decision (with
``Nats-Msg-Id: bind:<ns>/<name>:<attempt>`` so a republish is dropped); a big cycle's binds go out
in chunks, a chunk's decisions as soon as its records are acknowledged.  Every binding record is a
conditional write (`BindingTable.write_binding`, `record_binds`): it is stored only if the task's binding
subject is still at the sequence this scheduler last saw, so of two schedulers only one advances a
task; the one whose write fails has lost the task, drops its reservation and adopts the record that
won (`lost_race`).  Decisions carry that record's sequence as their fence.

An attempt whose outcome is unknown is never released by a timer: a bind an alive agent has not
taken within the lease, the tasks an agent's previous incarnation had, the tasks of a deleted node or
a deleted task are *stopped* (`stop_attempt`: an evict for that attempt, which the agent answers
even when it never ran it, and after which it ignores that attempt's bind) and go back to Pending
only when the agent says so (`stopped`) or their node is declared lost after its grace
period (`busched.scheduler.agents`).  `release` sends a task back to Pending, doubling its backoff
and keeping it off the node for a while when the node failed it; after ``max_attempts`` such
failures in a row the task is Failed, with the reason.  After a restart `recover` finds whether
each unanswered bind or evict reached the decision stream and sends it if not.

`BindingTable` is that state machine, as one class owning its state: per task the `Binding` and the
last `Result`, backoffs, consecutive failures, the nodes that refused it, the reason it last went
back to Pending, the decisions still to publish, the deleted tasks being stopped, the results heard
before their binding record during a catch-up.  It applies binding records and agents' results (the
state feed hands them over, `busched.scheduler.events`) and is built with what it needs: the bus
(records and decisions), the specs, the liveness of nodes, the outbox, the clock, and callbacks into
the feed (refresh a task's cache copy, finish a deletion, purge its subjects).  It is one module of
more than 400 lines on purpose: one state machine, whose transitions are easier to check side by side.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

from busched.api import objects as o
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.metrics import SchedulerMetrics
from busched.scheduler import events_log
from busched.scheduler.ledger import NodeLedgers
from busched.scheduler.records import (
    _RESULT_RANK,
    TERMINAL,
    Binding,
    CycleReport,
    NodeLive,
    Result,
    SchedulerSettings,
)

log = logging.getLogger("busched.scheduler")

WRITE_AHEAD_CHUNK = 500  # binds whose records are written (and acknowledged) before their decisions go out


class DecisionBus(Protocol):
    """What the binding table needs of `busched.bus.client.Bus`."""

    def publish_all(self, items: Iterable[tuple[Any, ...]]) -> Awaitable[list[Any]]: ...

    async def publish_batches(self, batches: Any, timeout: float = 10.0) -> list[Any]: ...

    async def last_state(self, subject: str) -> tuple[int, bytes] | None: ...

    async def last_decision(self, subject: str) -> tuple[int, bytes] | None: ...

    async def delete_decision(self, seq: int) -> Any: ...

    async def consumer_delivered(self, consumer: str) -> int | None: ...


class BindingTable:
    """Every task's bind life cycle (see the module's docstring).  ``journal`` is what the recent events of
    `busched.scheduler.events_log` are kept on (the scheduler)."""

    def __init__(self, settings: SchedulerSettings, clock: Callable[[], float], bus: DecisionBus, *,
                 boot: str, metrics: SchedulerMetrics, next_version: Callable[[], int],
                 task_specs: Mapping[str, o.TaskSpec], node_specs: Mapping[str, o.NodeSpec],
                 live: dict[str, NodeLive], outbox: dict[str, tuple[m.Msg, str | None]],
                 refresh_task: Callable[[str], None], new_work: Callable[[], None],
                 finish_delete: Callable[[str], None], purge_object: Callable[[str, str], None],
                 reject: Callable[[str, str, str], str], count: Callable[[str, str], None],
                 ready: Callable[[], bool], journal: Any) -> None:
        self.settings = settings
        self.clock = clock
        self.bus = bus
        self.boot = boot
        self.metrics = metrics
        self.next_version = next_version
        self.task_specs = task_specs
        self.node_specs = node_specs
        self.live = live
        self.outbox = outbox
        self.refresh_task = refresh_task
        self.new_work = new_work
        self.finish_delete = finish_delete
        self.purge_object = purge_object
        self.reject = reject
        self.count = count
        self.ready = ready
        self.journal = journal
        self.bindings: dict[str, Binding] = {}
        self.results: dict[str, Result] = {}
        self.backoff_until: dict[str, float] = {}
        self.failures: dict[str, int] = {}  # consecutive failed attempts, for backoff
        self.excluded: dict[str, dict[str, float]] = {}  # task -> node -> until
        self.reasons: dict[str, str] = {}  # task -> last reason it went back to Pending
        self.unpublished: set[str] = set()  # tasks whose bind/evict decision still has to go out
        self.deleting: set[str] = set()  # deleted tasks whose attempt is being stopped
        self.orphans: dict[str, Result] = {}  # results replayed before their binding record
        self.max_rec_seq = 0  # the highest state-stream sequence of a binding record known (cycle records)
        self.caught_up = False  # results are believed as during normal operation once True
        self.epoch = 0  # the epoch our records and decisions carry (our lease's, `busched.scheduler.election`)
        self.fence_epoch = 0  # the newest epoch written on our shard's leader subject, in stream order
        self.fence_seq = 0  # ... and where
        # called at named points of a cycle's writes ("records": a chunk's binding records stored, its decisions
        # not yet sent; "decisions": its decisions sent).  Test-only: `busched run --debug-exit-at POINT` makes it
        # end the process there, to kill a leader mid-cycle (tests/faults/test_leader_election.py)
        self.checkpoint: Callable[[str], None] = lambda point: None
        self.epochs = asyncio.Event()  # set (and replaced) at every epoch applied: `Scheduler._elected` waits on it
        self.background: set[Any] = set()
        # a sharded scheduler's node ledgers: its binding records go out with them, one atomic batch per node
        # (busched.scheduler.ledger); None: each record on its own, as always
        self.ledgers: NodeLedgers | None = None

    def forget(self, key: str) -> None:
        """A task is gone (deleted, its attempt known stopped): nothing of it is kept."""
        self.deleting.discard(key)
        for d in (self.bindings, self.results, self.backoff_until, self.failures, self.excluded, self.reasons):
            d.pop(key, None)
        self.outbox.pop(S.binding_subject(key), None)
        self.unpublished.discard(key)

    def node_deleted(self, node: str) -> None:
        """A node's spec was deleted: the attempts on it are stopped."""
        for tkey, b in list(self.bindings.items()):
            if b.node == node and b.live and b.state != "evicting":
                self.stop_attempt(tkey, f"node {node} deleted", "node")

    async def publish_binds(self, binds: list[Any], report: CycleReport) -> None:
        now = self.clock()
        todo: list[tuple[str, Binding]] = []
        for d in binds:
            key = d.task
            spec = self.task_specs.get(key)
            cur = self.bindings.get(key)
            lv = self.live.get(d.node)
            if spec is None or key in self.deleting or d.node not in self.node_specs:
                continue  # deleted while the cycle ran
            if cur is not None and (cur.live or cur.final):
                continue  # bound (by us or another scheduler) while the cycle ran, or given up
            if self.settings.require_heartbeat and (lv is None or lv.state != "alive"):
                continue  # the node's agent was lost while the cycle ran
            attempt = (cur.attempt if cur is not None else 0) + 1
            b = Binding(attempt=attempt, node=d.node, version=self.next_version(), decided=now, published=False,
                        rec_seq=cur.rec_seq if cur is not None else 0)
            self.bindings[key] = b
            self.results.pop(key, None)
            self.outbox.pop(S.binding_subject(key), None)  # superseded by this record
            self.refresh_task(key)
            todo.append((key, b))
        if not todo:
            return
        # write-ahead, in chunks: a chunk's decisions go out as soon as its binding records are acknowledged,
        # while the next chunk's records are being written, so the first agents start long before the last
        # record of a big cycle is stored
        sending: list[asyncio.Task[None]] = []
        try:
            for i in range(0, len(todo), WRITE_AHEAD_CHUNK):
                ready = await self.record_binds(todo[i:i + WRITE_AHEAD_CHUNK])
                if ready:
                    self.checkpoint("records")
                    sending.append(asyncio.create_task(self._send_then(
                        self.send_decisions([(k, b, "bind") for k, b in ready]), "decisions")))
                for key, b in ready:
                    report.binds.append((key, b.node))
                events_log.binds(self.journal, ready)
                self.metrics.action_binds.inc(len(ready))
        finally:
            if sending:
                await asyncio.gather(*sending)

    async def _send_then(self, sending: Awaitable[None], point: str) -> None:
        await sending
        self.checkpoint(point)

    async def write_records(self, items: list[tuple[str, Binding]]) -> tuple[list[tuple[str, Binding]],
                                                                                list[tuple[str, Binding, str]]]:
        """Write the binding records of ``items`` now, each on condition that its subject is where we last saw
        it.  Returns the stored ones and the ones not stored for another reason than a lost condition (with the
        error); the lost ones are settled here (`_lost_race`)."""
        if self.ledgers is not None:
            acks = await self.ledgers.write(self.bus, [
                (key, b.node, S.binding_subject(key), self.binding_record(key, b), b.rec_seq) for key, b in items])
        else:
            acks = await self.bus.publish_all(
                (S.binding_subject(key), self.binding_record(key, b), None, b.rec_seq) for key, b in items)
        stored: list[tuple[str, Binding]] = []
        failed: list[tuple[str, Binding, str]] = []
        lost: list[str] = []
        for (key, b), ack in zip(items, acks):
            if ack.ok:
                self.record_stored(b, ack.seq)
                stored.append((key, b))
            elif ack.conflict:
                lost.append(key)
            else:
                failed.append((key, b, ack.error))
        if lost and self.ledgers is not None:
            lost = await self.node_taken(lost, dict(items))
        if lost:
            await self.lost_race(lost)
        return stored, failed

    async def node_taken(self, keys: list[str], items: dict[str, Binding]) -> list[str]:
        """A node's batch lost a condition (busched.scheduler.ledger): of its tasks, those whose own binding subject
        moved lost to another writer (returned, for `lost_race`); the others only lost the node, and go back to
        what they were, Pending, with no decision sent (their next bind is decided again on a fresh view)."""
        moved: list[str] = []
        for key, found in zip(keys, await asyncio.gather(*(self._read_binding(key, False) for key in keys))):
            b = items[key]
            if found is False or (found[0] if found else 0) != b.rec_seq:  # moved, or not known: lost_race reads
                moved.append(key)
            elif self.bindings.get(key) is b:
                self.bindings[key] = dataclasses.replace(b, state="released", reason="node taken by another shard",
                                                         version=self.next_version())
                self.metrics.publish_errors.labels("node").inc()
                # written (as a bind that failed to publish is): it replaces whatever record of the task was still
                # waiting in the outbox when the bind superseded it, so the stream says what we hold
                self.write_binding(key, self.bindings[key])
                self.refresh_task(key)
        return moved

    def record_stored(self, b: Binding, seq: int) -> None:
        """A binding record of ours is on the stream at ``seq``: the next one is written on condition of it."""
        b.rec_seq = max(b.rec_seq, seq)
        if seq > self.max_rec_seq:
            self.max_rec_seq = seq

    async def record_binds(self, todo: list[tuple[str, Binding]]) -> list[tuple[str, Binding]]:
        """Write the binding records of ``todo``, each on condition; the binds whose record is stored (the
        others stay Pending, or belong to the scheduler whose record won)."""
        ready, failed = await self.write_records(todo)
        for key, b, error in failed:
            # nothing was sent to the agent: the task simply stays Pending
            self.metrics.publish_errors.labels("binding").inc()
            log.warning("bind %s -> %s not recorded (%s); it stays Pending", key, b.node, error)
            if self.bindings.get(key) is b:
                self.bindings[key] = dataclasses.replace(b, state="released", reason="publish failed",
                                                         version=self.next_version())
                self.write_binding(key, self.bindings[key])
                self.refresh_task(key)
        return ready

    async def lost_race(self, keys: list[str]) -> None:
        """Our conditional write lost: another writer advanced these tasks.  Adopt the records that won (our
        reservations go with ours)."""
        self.metrics.publish_errors.labels("conflict").inc(len(keys))
        for key, found in zip(keys, await asyncio.gather(*(self._read_binding(key) for key in keys))):
            log.info("task %s: another writer advanced its binding; adopting its record", key)
            cur = self.bindings.get(key)
            if found is None:
                # purged meanwhile (the task was deleted): nothing holds
                if cur is not None:
                    self.bindings[key] = dataclasses.replace(cur, state="released", reason="binding lost",
                                                             rec_seq=0, version=self.next_version())
                    self.refresh_task(key)
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
            if self.apply_binding(key, rec, seq) == "fenced" and cur is not None and self.bindings.get(key) is cur:
                # the record in the way is a deposed leader's: ours is written again over it (a bind whose record
                # was not stored had no decision sent: the task simply goes back to Pending)
                if cur.state == "binding" and not cur.published:
                    self.bindings[key] = dataclasses.replace(cur, state="released", reason="binding record fenced",
                                                             version=self.next_version())
                    self.refresh_task(key)
                self.write_binding(key, self.bindings[key])
                continue
            self.unpublished.discard(key)

    async def _read_binding(self, key: str, unreadable: Any = None) -> Any:
        """The task's binding subject's last (sequence, data); None when it holds none, ``unreadable`` when it
        cannot be read now (read again at the next conflict)."""
        try:
            return await self.bus.last_state(S.binding_subject(key))
        except Exception as e:  # noqa: BLE001
            log.warning("cannot read the binding of %s after a lost write: %s", key, e)
            return unreadable

    def write_binding(self, key: str, b: Binding) -> None:
        """Queue ``b`` as the task's binding record (the latest per task is written, conditionally, at the next
        flush)."""
        self.outbox[S.binding_subject(key)] = (self.binding_record(key, b), None)

    async def send_decisions(self, items: list[tuple[str, Binding, str]]) -> None:
        out = []
        for key, b, kind in items:
            if kind == "bind":
                spec = self.task_specs.get(key)
                if spec is None:
                    continue
                msg: m.Msg = m.BindDecision(version=b.version, node=b.node, attempt=b.attempt, task=spec,
                                            fence=b.rec_seq, epoch=self.epoch, shard=self.settings.shard)
            else:
                ns, name = key.split("/", 1)
                msg = m.EvictDecision(version=b.version, namespace=ns, name=name, node=b.node, attempt=b.attempt,
                                      reason=b.evict_reason, fence=b.rec_seq, epoch=self.epoch,
                                      shard=self.settings.shard)
            out.append((key, b, kind, S.decision_subject(b.node, kind, key), msg, f"{kind}:{key}:{b.attempt}"))
        if not out:
            return
        acks = await self.bus.publish_all((subj, msg, mid) for _, _, _, subj, msg, mid in out)
        for (key, b, kind, _, _, _), ack in zip(out, acks):
            if ack.ok:
                if kind == "bind":
                    b.seq = ack.seq
                b.published = True
                self.unpublished.discard(key)
            else:
                self.metrics.publish_errors.labels(kind).inc()
                log.warning("%s decision for %s -> %s not published (%s); retrying next cycle", kind, key, b.node,
                            ack.error)
                b.published = False
                self.unpublished.add(key)

    async def republish(self) -> None:
        items = []
        for key in list(self.unpublished):
            b = self.bindings.get(key)
            if b is None or not b.live or b.published:
                self.unpublished.discard(key)
                continue
            if S.binding_subject(key) in self.outbox:
                continue  # its record first
            items.append((key, b, "evict" if b.state == "evicting" else "bind"))
        await self.send_decisions(items)

    async def publish_evicts(self, evicts: list[Any], report: CycleReport) -> None:
        items = []
        for d in evicts:
            key = d.task
            b = self.bindings.get(key)
            if b is None:
                # a task placed outside busched (its spec names the node): evict it where it is
                spec = self.task_specs.get(key)
                if spec is None or not spec.node:
                    continue
                b = self.bindings[key] = Binding(attempt=0, node=spec.node)
            elif not b.live or b.state == "evicting":
                continue
            b.state = "evicting"
            b.stop = "evict"
            b.evict_reason = d.reason or "evicted by the scheduler"
            b.version = self.next_version()
            b.published = False
            self.outbox.pop(S.binding_subject(key), None)
            items.append((key, b))
            self.refresh_task(key)
        if not items:
            return
        stored, failed = await self.write_records(items)
        for key, b, _ in failed:
            self.write_binding(key, b)  # the record first; its decision follows (_republish)
            self.unpublished.add(key)
        sent = [(key, b, "evict") for key, b in stored]
        await self.send_decisions(sent)
        for key, b, _ in sent:
            report.evicts.append((key, b.node))
        events_log.evicts(self.journal, sent)
        self.metrics.action_evicts.inc(len(sent))

    def stop_attempt(self, key: str, reason: str, why: str, *, bind_deleted: bool = False) -> None:
        """Stop a live attempt whose outcome is unknown: an evict for it, and its resources stay held until the
        agent answers (or its node is declared lost).  ``bind_deleted``: the caller deleted the bind decision."""
        b = self.bindings.get(key)
        if b is None or not b.live:
            return
        if b.seq and b.state == "binding" and not bind_deleted:
            self.spawn_bg(self.bus.delete_decision(b.seq))  # an undelivered bind need not be delivered
        b.state = "evicting"
        b.stop = why
        b.evict_reason = reason
        b.version = self.next_version()
        b.published = False
        self.write_binding(key, b)
        self.unpublished.add(key)  # the decision goes out once its record is stored
        events_log.note(self.journal, "stop", key, b, reason)
        log.info("task %s: stopping attempt %d on %s (%s)", key, b.attempt, b.node, reason)
        self.refresh_task(key)

    def spawn_bg(self, coro: Any) -> None:
        t = asyncio.ensure_future(coro)
        self.background.add(t)
        t.add_done_callback(self.background.discard)

    async def expire(self, report: CycleReport, now: float, calm: bool) -> None:
        """What the clock ended: leases of binds not taken (only when silence means something: ``calm``),
        backoffs."""
        st = self.settings
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
            await asyncio.gather(*(self.lease_expired(key, b, lv, report) for key, b, lv in expired))
        # backoffs that ended
        for key in [k for k, t in self.backoff_until.items() if t <= now]:
            del self.backoff_until[key]
            self.refresh_task(key)

    async def lease_expired(self, key: str, b: Binding, lv: NodeLive, report: CycleReport) -> None:
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
            self.release(key, reason, "lease", exclude=True)
        else:
            self.stop_attempt(key, reason, "lease", bind_deleted=bool(b.seq))
        report.released.append((key, "lease"))

    def release(self, key: str, reason: str, kind: str, *, exclude: bool = False, backoff: bool | None = None) -> None:
        """Send a task back to Pending (its attempt is known stopped): record why, and hold it back for a while
        when its node failed it; Failed once it has failed ``max_attempts`` times in a row."""
        b = self.bindings.get(key)
        if b is None:
            return
        if key in self.deleting:
            self.finish_delete(key)
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
        nb = dataclasses.replace(b, state=state, reason=reason, backoff=delay, version=self.next_version(), stop="")
        self.bindings[key] = nb
        self.unpublished.discard(key)
        self.reasons[key] = reason
        events_log.note(self.journal, "failed" if state == "failed" else "release", key, nb, reason)
        self.write_binding(key, nb)
        self.metrics.releases.labels(kind).inc()
        self.new_work()
        if state == "failed":
            log.warning("task %s Failed: %s", key, reason)
        else:
            log.info("task %s back to Pending: %s%s", key, reason, f" (backoff {delay:g}s)" if delay else "")
        self.refresh_task(key)

    def apply_epoch(self, shard: str, msg: m.LeaderEpoch, seq: int = 0) -> str:
        """A new leader's epoch on the stream (`busched.bus.messages.LeaderEpoch`): from here on, binding
        records of older epochs are a deposed leader's, and count for nothing."""
        if shard != self.settings.lease_key or msg.shard != shard:
            return "stale"
        if msg.epoch > self.fence_epoch:
            self.fence_epoch, self.fence_seq = msg.epoch, seq
            self.epochs.set()
            self.epochs = asyncio.Event()
            log.info("shard %s: leader epoch %d (%s) from stream sequence %d", shard, msg.epoch, msg.holder or "?",
                     seq)
        return "applied"

    def apply_binding(self, key: str, rec: m.BindingRecord, seq: int = 0) -> str:
        cur = self.bindings.get(key)
        if cur is not None and seq and seq <= cur.rec_seq:
            return "stale"
        if rec.epoch < self.fence_epoch and (rec.shard or "default") == self.settings.lease_key:
            # written by a leader of our shard deposed before it wrote this (its successor's epoch is earlier on
            # the stream): it changes nothing, but our next record of the task is written over it.  Another
            # shard's epochs are its own: its records are judged by the conditional writes alone
            if cur is not None:
                cur.rec_seq = max(cur.rec_seq, seq)
            self.count("binding", "fenced")
            log.warning("task %s: ignoring a binding record of epoch %d by %s (epoch %d leads since sequence %d)",
                        key, rec.epoch, rec.writer or "?", self.fence_epoch, self.fence_seq)
            return "fenced"
        if self.caught_up and rec.writer and rec.writer == self.boot:
            # our own record, heard before its acknowledgement
            if cur is not None:
                self.record_stored(cur, seq)
            return "own"
        # a record written by another scheduler (or replayed by the catch-up): it is what holds
        b = Binding(attempt=rec.attempt, node=rec.node, state=rec.state, reason=rec.reason, version=rec.version,
                    backoff=rec.backoff, decided=self.clock(), published=True, seq=0, rec_seq=seq, boot=rec.boot)
        if rec.state == "evicting":
            b.evict_reason = rec.reason
            b.stop = rec.stop or "evict"
        if cur is not None and cur.live and self.caught_up and (cur.attempt, cur.node) != (b.attempt, b.node):
            log.warning("task %s: another scheduler wrote attempt %d on %s over ours (attempt %d on %s)", key,
                        b.attempt, b.node, cur.attempt, cur.node)
        self.bindings[key] = b
        self.max_rec_seq = max(self.max_rec_seq, seq)
        self.outbox.pop(S.binding_subject(key), None)  # ours, if any, lost to it
        self.unpublished.discard(key)
        if rec.state == "done":
            b.outcome, b.exit_code = rec.outcome, rec.exit_code
            self.results[key] = Result(attempt=rec.attempt, node=rec.node, what=rec.outcome, reason=rec.reason,
                                       boot=rec.boot, version=seq, exit_code=rec.exit_code)
        if rec.state in ("released", "failed"):
            self.reasons[key] = rec.reason
            if rec.backoff > 0 and rec.state == "released":
                self.backoff_until[key] = self.clock() + rec.backoff
        if b.node and b.live:
            self.live.setdefault(b.node, NodeLive(since=self.clock()))
        self.refresh_task(key)
        return "applied"

    def apply_result(self, key: str, msg: m.BindAccepted | m.BindRejected | m.TaskPhaseChanged, seq: int = 0) -> str:
        if isinstance(msg, m.BindAccepted):
            what, reason = "accepted", ""
        elif isinstance(msg, m.BindRejected):
            what, reason = "rejected", msg.reason
        else:
            what, reason = msg.phase, msg.reason
            if what not in ("Running", "Succeeded", "Failed"):
                return self.reject("invalid", "result", f"task {key}: phase: unknown phase {what!r} "
                                                         "(one of Running, Succeeded, Failed)")
        r = Result(attempt=msg.attempt, node=msg.node, what=what, reason=reason, boot=msg.boot, version=seq,
                   exit_code=getattr(msg, "exit_code", None))
        b = self.bindings.get(key)
        if b is None or r.attempt > b.attempt or (not self.caught_up and key not in self.task_specs):
            if not self.caught_up:
                # catching up: the last binding record of this task (or its spec, rebuilt from its history when
                # its last message was refused) may come later
                keep = self.orphans.get(key)
                if keep is None or seq > keep.version:
                    self.orphans[key] = r
                return "deferred"
            if key not in self.task_specs:
                return "stale"
            bound = "it was never bound" if b is None else f"attempt {b.attempt} is bound to {b.node}"
            return self.reject("identity", "result", f"task {key}: {what} for attempt {r.attempt} from node "
                                                      f"{r.node}, but {bound}")
        if r.attempt < b.attempt or not b.live:
            self.count("result", "stale")
            return "stale"  # an older attempt, or one that ended (final); a heartbeat still holding it gets an evict
        if r.node != b.node:
            return self.reject("identity", "result", f"task {key}: {what} for attempt {r.attempt} from node "
                                                      f"{r.node}, but it is bound to {b.node}")
        if key not in self.task_specs and key not in self.deleting:
            return "stale"
        cur = self.results.get(key)
        if cur is not None and cur.attempt == r.attempt and (
                cur.what in TERMINAL or cur.what == "rejected" or _RESULT_RANK[what] < _RESULT_RANK[cur.what]):
            self.count("result", "stale")
            return "stale"  # terminal states are final; a phase never goes back
        if b.boot and r.boot != b.boot and what not in ("Failed", "rejected"):
            # another incarnation of the node's agent: it can only say it does not run the attempt
            return self.reject("identity", "result", f"task {key}: {what} for attempt {r.attempt} from agent "
                                                      f"boot {r.boot or '?'} of {r.node}, but boot {b.boot} took it")
        if not b.boot and what != "rejected":
            b.boot = r.boot
        self.results[key] = r
        self.metrics.bind_results.labels(what).inc()
        answered = what in ("accepted", "rejected") or (what == "Running" and (cur is None or cur.attempt != r.attempt))
        if answered and self.ready():
            self.metrics.bind_latency.observe(max(0.0, self.clock() - b.decided))
        if what == "rejected":
            self.release(key, f"rejected by {r.node}: {reason or 'no reason given'}", "rejected", exclude=True)
        elif b.state == "evicting" and what == "Failed":
            self.stopped(key, b, r)
        else:
            if what in ("Running", "Succeeded"):
                self.failures.pop(key, None)
            if what in TERMINAL:
                # it ended (possibly before an eviction reached it): recorded as final, so neither a late result
                # nor a restart can rewrite it
                self.new_work()  # its resources are free
                if key in self.deleting:
                    self.finish_delete(key)
                    return "applied"
                b.state, b.stop, b.outcome, b.exit_code = "done", "", what, r.exit_code
                b.reason = reason
                b.version = self.next_version()
                self.unpublished.discard(key)
                self.write_binding(key, b)
            self.refresh_task(key)
        return "applied"

    def stopped(self, key: str, b: Binding, r: Result) -> None:
        """The agent says an attempt being stopped is stopped: only now may the task be placed again."""
        if key in self.deleting:
            self.finish_delete(key)
            return
        if b.stop == "lease":
            self.release(key, b.evict_reason, "lease", exclude=True)
        elif b.stop in ("restart", "node"):  # its agent restarted, or its node was deleted
            self.release(key, b.evict_reason, "node_lost")
        else:
            self.release(key, f"evicted from {r.node}: {b.evict_reason}", "evicted", backoff=False)

    def stopping_delete(self, key: str) -> bool:
        """A task deleted while its agent may still run it stays (Releasing, its resources held) until the agent
        says it stopped or its node is lost; True when that is the case (the evict is on its way)."""
        b = self.bindings.get(key)
        r = self.results.get(key)
        if b is None or not b.live or (r is not None and r.attempt == b.attempt and r.what in TERMINAL):
            return False
        self.deleting.add(key)
        if b.state != "evicting":
            self.stop_attempt(key, "task deleted", "deleted")
        else:
            b.stop = "deleted"
        return True

    def replay_result(self, key: str, r: Result) -> None:
        ns, name = key.split("/", 1)
        msg: m.BindAccepted | m.BindRejected | m.TaskPhaseChanged
        if r.what == "accepted":
            msg = m.BindAccepted(namespace=ns, name=name, node=r.node, attempt=r.attempt, boot=r.boot)
        elif r.what == "rejected":
            msg = m.BindRejected(namespace=ns, name=name, node=r.node, attempt=r.attempt, reason=r.reason,
                                 boot=r.boot)
        else:
            msg = m.TaskPhaseChanged(namespace=ns, name=name, node=r.node, attempt=r.attempt, phase=r.what,
                                     reason=r.reason, boot=r.boot, exit_code=r.exit_code)
        self.apply_result(key, msg, r.version)

    def settle_orphans(self) -> None:
        """After catch-up: results from here on are applied as during normal operation, and those that came
        before their binding record are applied now."""
        self.caught_up = True
        orphans, self.orphans = self.orphans, {}
        for key, orphan in orphans.items():
            self.replay_result(key, orphan)

    async def recover(self) -> None:
        """After catch-up (and the refused objects rebuilt), or on becoming leader: settle results that came
        before their binding record, then find out whether each unanswered bind reached the decision stream,
        and send it if not."""
        self.settle_orphans()
        now = self.clock()
        todo = []
        for key, b in list(self.bindings.items()):
            if not b.live:
                continue
            b.decided = now
            self.live.setdefault(b.node, NodeLive(since=now))
            r = self.results.get(key)
            if key not in self.task_specs:
                # deleted while bound (by an older scheduler that forgot it): stop it, then let it go
                if r is not None and r.attempt == b.attempt and r.what in TERMINAL:
                    self.bindings.pop(key, None)
                    self.purge_object("task", key)
                    continue
                self.deleting.add(key)
                if b.state == "binding":
                    self.stop_attempt(key, "task deleted", "deleted")
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
            await self.send_decisions(todo)

    def binding_record(self, key: str, b: Binding) -> m.BindingRecord:
        ns, name = key.split("/", 1)
        return m.BindingRecord(version=b.version, namespace=ns, name=name, attempt=b.attempt, node=b.node,
                               state=b.state, reason=b.reason if b.state in ("released", "failed", "done")
                               else b.evict_reason, backoff=b.backoff, decided_at=time.time(), boot=b.boot,
                               outcome=b.outcome, exit_code=b.exit_code,
                               stop=b.stop if b.state == "evicting" else "", writer=self.boot, epoch=self.epoch,
                               shard=self.settings.shard)
