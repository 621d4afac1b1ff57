"""What the binding table writes to the bus: binding records, each on condition, and the decisions they fence.

`busched.scheduler.bindings.BindingTable` decides a task's transitions; these put them on the streams
and settle what comes back: a record stored (`record_stored`), a condition lost to another writer
(`lost_race`, `node_taken`), a write or a decision that failed (it stays Pending, or is sent again by
`republish`).  They stand apart because they are the table's one conversation with the bus (its
acknowledgements, conflicts and errors), which reads more easily as a whole than spread among the
transitions.  A mixin of `BindingTable`: the methods stay methods, and the state stays the table's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from busched.api import objects as o
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.wire import MAX_REASON, cut
from busched.metrics import SchedulerMetrics
from busched.scheduler.ledger import NodeLedgers
from busched.scheduler.records import Binding, SchedulerSettings
from busched.scheduler.write_bounds import fit_reason, may_pass

if TYPE_CHECKING:
    from busched.scheduler.bindings import DecisionBus

__all__ = ["BindingWrites"]

log = logging.getLogger("busched.scheduler")

_ENCODE = m.encode


def _encoded(rec: m.BindingRecord) -> bytes | m.BindingRecord:
    """The record's bytes; the record itself when it cannot be encoded (`publish_all` fails it, as before)."""
    try:
        return _ENCODE(rec)
    except Exception:  # noqa: BLE001
        return rec


class BindingWrites:
    """The records and decisions `BindingTable` writes (see the module's docstring)."""

    # the table's state these keep (busched.scheduler.bindings.BindingTable sets it)
    settings: SchedulerSettings
    bus: DecisionBus
    boot: str
    epoch: int
    metrics: SchedulerMetrics
    next_version: Callable[[], int]
    task_specs: Mapping[str, o.TaskSpec]
    outbox: dict[str, tuple[m.Msg, str | None]]
    refresh_task: Callable[[str], None]
    bindings: dict[str, Binding]
    unpublished: set[str]
    max_rec_seq: int
    ledgers: NodeLedgers | None
    in_flight: dict[str, tuple[bytes, int, Binding]]

    if TYPE_CHECKING:  # the table's method these call (`busched.scheduler.binding_feed`)
        def apply_binding(self, key: str, rec: m.BindingRecord, seq: int = 0) -> str: ...

    async def write_records(self, items: list[tuple[str, Binding]]) -> tuple[list[tuple[str, Binding]],
                                                                                list[tuple[str, Binding, str]]]:
        """Write the binding records of ``items`` now, each on condition that its subject is where we last saw
        it.  Returns the stored ones and the ones not stored for another reason than a lost condition (with the
        error); the lost ones are settled here (`_lost_race`)."""
        if self.ledgers is not None:
            acks = await self.ledgers.write(self.bus, [
                (key, b.node, S.binding_subject(key), self.binding_record(key, b), b.rec_seq) for key, b in items])
        else:
            # encoded here, so the bytes are known until their acknowledgement (`in_flight`)
            out = [(key, b, _encoded(self.binding_record(key, b))) for key, b in items]
            in_flight, epoch = self.in_flight, self.epoch
            for key, b, data in out:
                if type(data) is bytes:
                    in_flight[key] = (data, epoch, b)
            try:
                acks = await self.bus.publish_all(
                    (S.binding_subject(key), data, None, b.rec_seq) for key, b, data in out)
            finally:
                for key, _, data in out:
                    sent = in_flight.get(key)
                    if sent is not None and sent[0] is data:
                        del in_flight[key]
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
                if b.annotations:  # the devices it was given travel with the task (docs/agents.md, "Devices")
                    spec = msgspec.structs.replace(spec, annotations={**spec.annotations, **b.annotations})
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

    def binding_record(self, key: str, b: Binding) -> m.BindingRecord:
        ns, name = key.split("/", 1)
        reason = b.reason if b.state in ("released", "failed", "done") else b.evict_reason
        if reason and len(reason) > MAX_REASON:  # (an agent's, passed on with a prefix: busched.bus.wire)
            reason = cut(reason)
        rec = m.BindingRecord(version=b.version, namespace=ns, name=name, attempt=b.attempt, node=b.node,
                              state=b.state, reason=reason, backoff=b.backoff, decided_at=time.time(), boot=b.boot,
                              outcome=b.outcome, exit_code=b.exit_code,
                              stop=b.stop if b.state == "evicting" else "", writer=self.boot, epoch=self.epoch,
                              shard=self.settings.shard, annotations=b.annotations if b.live else {})
        if reason and may_pass(key, b, reason, self.boot, self.settings.max_event_bytes):
            # (cut to what its readers take: a smaller limit, a long reason; busched.scheduler.write_bounds)
            rec = fit_reason(rec, self.settings.max_event_bytes)
        return rec
