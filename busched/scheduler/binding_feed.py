"""What the binding table hears: leader epochs, binding records and agents' results, and the recovery after catch-up.

The state feed (`busched.scheduler.events`) hands these over; each is judged against what the table
holds (stale, fenced, our own, another writer's, out of order) and applied, and after a catch-up the
results heard before their binding record are applied and each unanswered bind or evict is found on
the decision stream or sent again (`recover`).  They stand apart from the transitions the table
itself makes (`busched.scheduler.bindings`) because they are its edge to the streams: every check on
an untrusted record or result is here, side by side.  A mixin of `BindingTable`: the methods stay
methods, and the state stays the table's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from busched.api import build
from busched.api import objects as o
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.metrics import SchedulerMetrics
from busched.scheduler.records import _RESULT_RANK, TERMINAL, Binding, NodeLive, Result, SchedulerSettings

if TYPE_CHECKING:
    from busched.scheduler.bindings import DecisionBus

__all__ = ["BindingFeed"]

log = logging.getLogger("busched.scheduler")


class BindingFeed:
    """The records, results and epochs `BindingTable` applies (see the module's docstring)."""

    # the table's state these keep (busched.scheduler.bindings.BindingTable sets it)
    settings: SchedulerSettings
    clock: Callable[[], float]
    bus: DecisionBus
    boot: str
    metrics: SchedulerMetrics
    next_version: Callable[[], int]
    task_specs: Mapping[str, o.TaskSpec]
    live: dict[str, NodeLive]
    outbox: dict[str, tuple[m.Msg, str | None]]
    refresh_task: Callable[[str], None]
    new_work: Callable[[], None]
    finish_delete: Callable[[str], None]
    purge_object: Callable[[str, str], None]
    reject: Callable[[str, str, str], str]
    count: Callable[[str, str], None]
    ready: Callable[[], bool]
    bindings: dict[str, Binding]
    results: dict[str, Result]
    backoff_until: dict[str, float]
    failures: dict[str, int]
    reasons: dict[str, str]
    unpublished: set[str]
    deleting: set[str]
    orphans: dict[str, Result]
    max_rec_seq: int
    caught_up: bool
    fence_epoch: int
    fence_seq: int
    epochs: asyncio.Event
    in_flight: dict[str, tuple[bytes, int, Binding]]
    result_counters: dict[str, Any]
    # the table's methods these call
    release: Callable[..., None]
    stopped: Callable[[str, Binding, Result], None]
    stop_attempt: Callable[..., None]
    record_stored: Callable[[Binding, int], None]
    write_binding: Callable[[str, Binding], None]
    send_decisions: Callable[[list[tuple[str, Binding, str]]], Awaitable[None]]

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

    def own_echo(self, key: str, data: bytes, seq: int) -> bool:
        """Whether ``data`` at ``seq`` on the task's binding subject is the echo of our own record still on its
        way (`in_flight`): the very bytes we wrote for the attempt we hold, the epoch they carry not fenced.  Then
        it is noted stored, as `apply_binding` does with our own record heard before its acknowledgement, without
        decoding it again (the scheduler hears one echo a bind, mostly before the acknowledgement).  Anything else
        (other bytes, another attempt, a fenced epoch) is False: decoded and judged as every record is."""
        sent = self.in_flight.get(key)
        if sent is None or seq <= 0 or not self.caught_up or not self.boot:
            return False
        sent_data, epoch, b = sent
        # (our records carry our shard: an epoch older than the fence is a deposed leader's, `apply_binding`'s)
        if (data != sent_data or self.bindings.get(key) is not b or epoch < self.fence_epoch
                or len(data) > self.settings.max_event_bytes):
            return False
        self.record_stored(b, seq)
        return True

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
                    backoff=rec.backoff, decided=self.clock(), published=True, seq=0, rec_seq=seq, boot=rec.boot,
                    annotations=dict(rec.annotations))
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
        started: float | None = None
        if isinstance(msg, m.TaskPhaseChanged) and msg.start_time is not None:
            try:  # the check `busched apply` runs on a task's startTime
                started = build.time_of(msg.start_time, f"task {key}: {what}: startTime")
            except build.SpecError as e:
                return self.reject("invalid", "result", str(e))
        r = Result(attempt=msg.attempt, node=msg.node, what=what, reason=reason, boot=msg.boot, version=seq,
                   exit_code=getattr(msg, "exit_code", None), start_time=started)
        b = self.bindings.get(key)
        if b is None or r.attempt > b.attempt or (not self.caught_up and key not in self.task_specs):
            if not self.caught_up:
                # catching up: the last binding record of this task (or its spec, rebuilt from its history when
                # its last message was refused) may come later
                keep = self.orphans.get(key)
                if keep is None or seq > keep.version:
                    if r.start_time is None and keep is not None and keep.attempt == r.attempt:
                        r.start_time = keep.start_time  # as below: an attempt keeps the start its Running said
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
        if r.start_time is None and cur is not None and cur.attempt == r.attempt:
            r.start_time = cur.start_time  # an attempt's end keeps the start its Running said
        self.results[key] = r
        counter = self.result_counters.get(what)
        if counter is None:  # (a labelled child looked up once per answer kind: `labels` costs more than `inc`)
            counter = self.result_counters[what] = self.metrics.bind_results.labels(what)
        counter.inc()
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
                                     reason=r.reason, boot=r.boot, exit_code=r.exit_code, start_time=r.start_time)
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

