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
the feed (refresh a task's cache copy, finish a deletion, purge its subjects).  The transitions the
table makes are here, side by side; two mixins hold its edges to the streams, as methods of the same
class: what it writes (records and decisions, `busched.scheduler.binding_writes`) and what it hears
(epochs, records, results, and the recovery after catch-up, `busched.scheduler.binding_feed`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

from busched.api import objects as o
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.metrics import SchedulerMetrics
from busched.scheduler import events_log
from busched.scheduler.binding_feed import BindingFeed
from busched.scheduler.binding_writes import BindingWrites
from busched.scheduler.ledger import NodeLedgers
from busched.scheduler.records import (
    TERMINAL,
    Binding,
    CycleReport,
    NodeLive,
    Result,
    SchedulerSettings,
)
from busched.scheduler.write_bounds import refuse_unwritable

log = logging.getLogger("busched.scheduler")

WRITE_AHEAD_CHUNK = 500  # binds whose records are written (and acknowledged) before their decisions go out


class DecisionBus(Protocol):
    """What the binding table needs of `busched.bus.client.Bus`."""

    def publish_all(self, items: Iterable[tuple[Any, ...]]) -> Awaitable[list[Any]]: ...

    async def publish_batches(self, batches: Any, timeout: float = 10.0) -> list[Any]: ...

    async def last_state(self, subject: str) -> tuple[int, bytes] | None: ...

    async def last_decision(self, subject: str) -> tuple[int, bytes] | None: ...

    async def delete_decision(self, seq: int) -> bool | None: ...

    async def consumer_delivered(self, consumer: str) -> int | None: ...


class BindingTable(BindingWrites, BindingFeed):
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
        # our binding records on their way, by task: the bytes written, the epoch they carry and the attempt they
        # record, from their publish to their acknowledgement (`BindingWrites.write_records`), so their echo on
        # the state feed, which mostly comes first, is known by its bytes (`BindingFeed.own_echo`)
        self.in_flight: dict[str, tuple[bytes, int, Binding]] = {}
        self.result_counters: dict[str, Any] = {}  # answer kind -> its child of ``metrics.bind_results``

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
        sending: list[asyncio.Task[None]] = []
        try:
            await self.write_ahead(self.take_binds(binds), report, sending)
        finally:
            if sending:
                await asyncio.gather(*sending)

    def take_binds(self, binds: list[Any]) -> list[tuple[str, Binding]]:
        """The session's bind decisions ``binds`` as new attempts in the table (state ``binding``, not yet
        recorded), but for those whose task or node went meanwhile or that another writer bound."""
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
                        rec_seq=cur.rec_seq if cur is not None else 0, annotations=d.annotations)
            self.bindings[key] = b
            self.results.pop(key, None)
            self.outbox.pop(S.binding_subject(key), None)  # superseded by this record
            self.refresh_task(key)
            todo.append((key, b))
        return todo

    async def write_ahead(self, todo: list[tuple[str, Binding]], report: CycleReport,
                          sending: list[asyncio.Task[None]]) -> None:
        """Write the records of ``todo`` ahead of their decisions, in chunks: a chunk's decisions go out (a task
        added to ``sending``, for the caller to await) as soon as its binding records are acknowledged, while
        the next chunk's records are being written, so the first agents start long before the last record of
        a big cycle is stored."""
        todo = refuse_unwritable(self, todo, report)  # what its readers would refuse is not written
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

    async def _send_then(self, sending: Awaitable[None], point: str) -> None:
        await sending
        self.checkpoint(point)

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
        """The decision is deleted first; if it is off the stream and the agent's consumer had not delivered it
        by then it never will, and the task is free at once.  Otherwise (or when that cannot be told: the
        delete unanswered, the consumer unread) the attempt is stopped."""
        reason = f"bind to {b.node} not received within the {self.settings.bind_lease:g}s lease"
        delivered: int | None = None
        gone: bool | None = None
        if b.seq:
            gone = await self.bus.delete_decision(b.seq) is not None  # deleted, or gone already
            if gone and lv.consumer:
                delivered = await self.bus.consumer_delivered(lv.consumer)
        if self.bindings.get(key) is not b or b.state != "binding":
            return
        if delivered is not None and delivered < b.seq:
            self.release(key, reason, "lease", exclude=True)
        else:
            self.stop_attempt(key, reason, "lease", bind_deleted=bool(gone))
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

