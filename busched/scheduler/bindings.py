"""Binds and evicts out to the agents, and what keeps them honest: leases, release, backoff, recovery.

A bind is written ahead: its binding record goes to the state stream first, then the decision (with
``Nats-Msg-Id: bind:<ns>/<name>:<attempt>`` so a republish is dropped); a big cycle's binds go out
in chunks, a chunk's decisions as soon as its records are acknowledged.  A decision that could not be
published is retried every cycle (`_republish`).  On the clock (`_expire`): an agent silent past the
heartbeat timeout is lost (`Agents._node_lost`); a bind an alive agent has not consumed within the
lease has its undelivered decision deleted and is released; ended backoffs lift the backoff gate.
`_release` sends a task back to Pending, doubling its backoff and keeping it off the node for a while
when the node failed it.  After a restart `_recover` finds whether each unanswered bind or evict
reached the decision stream and sends it if not.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any

from busched.bus import messages as m
from busched.bus import subjects as S
from busched.scheduler.records import Binding, CycleReport, NodeLive

log = logging.getLogger("busched.scheduler")

WRITE_AHEAD_CHUNK = 500  # binds whose records are written (and acknowledged) before their decisions go out


class Bindings:
    async def _publish_binds(self, binds: list[Any], report: CycleReport) -> None:
        now = self.clock()
        todo: list[tuple[str, Binding]] = []
        for d in binds:
            key = d.task
            spec = self.specs["task"].get(key)
            cur = self.bindings.get(key)
            lv = self.live.get(d.node)
            if spec is None or (cur is not None and cur.live) or d.node not in self.specs["node"]:
                continue  # deleted or already bound while the cycle ran
            if self.settings.require_heartbeat and (lv is None or lv.state != "alive"):
                continue  # the node's agent was lost while the cycle ran
            attempt = (cur.attempt if cur is not None else 0) + 1
            b = Binding(attempt=attempt, node=d.node, version=self._next_version(), decided=now, published=False)
            self.bindings[key] = b
            self.results.pop(key, None)
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
                self.metrics.action_binds.inc(len(ready))
        finally:
            if sending:
                await asyncio.gather(*sending)

    async def _record_binds(self, todo: list[tuple[str, Binding]]) -> list[tuple[str, Binding]]:
        """Write the binding records of ``todo``; the binds whose record is stored (the others stay Pending)."""
        acks = await self.bus.publish_all(
            (S.binding_subject(key), self._binding_record(key, b), None) for key, b in todo)
        ready: list[tuple[str, Binding]] = []
        for (key, b), ack in zip(todo, acks):
            if ack.ok:
                ready.append((key, b))
            else:
                # nothing was sent to the agent: the task simply stays Pending
                self.metrics.publish_errors.labels("binding").inc()
                log.warning("bind %s -> %s not recorded (%s); it stays Pending", key, b.node, ack.error)
                self.bindings[key] = dataclasses.replace(b, state="released", reason="publish failed",
                                                         version=self._next_version())
                self._outbox[S.binding_subject(key)] = (self._binding_record(key, self.bindings[key]), None)
                self._refresh_task(key)
        return ready

    async def _send_decisions(self, items: list[tuple[str, Binding, str]]) -> None:
        out = []
        for key, b, kind in items:
            if kind == "bind":
                spec = self.specs["task"].get(key)
                if spec is None:
                    continue
                msg: m.Msg = m.BindDecision(version=b.version, node=b.node, attempt=b.attempt, task=spec)
            else:
                ns, name = key.split("/", 1)
                msg = m.EvictDecision(version=b.version, namespace=ns, name=name, node=b.node, attempt=b.attempt,
                                      reason=b.evict_reason)
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
            b.evict_reason = d.reason or "evicted by the scheduler"
            b.version = self._next_version()
            b.published = False
            items.append((key, b, "evict"))
            self._refresh_task(key)
        if not items:
            return
        acks = await self.bus.publish_all((S.binding_subject(k), self._binding_record(k, b), None) for k, b, _ in items)
        for (key, b, _), ack in zip(items, acks):
            if not ack.ok:
                self._outbox[S.binding_subject(key)] = (self._binding_record(key, b), None)
        await self._send_decisions(items)
        for key, b, _ in items:
            report.evicts.append((key, b.node))
        self.metrics.action_evicts.inc(len(items))

    # == time: heartbeats, leases, backoff ==========================================================================
    async def _expire(self, report: CycleReport) -> None:
        now = self.clock()
        st = self.settings
        # agents that went quiet
        for node, lv in list(self.live.items()):
            quiet = now - (lv.last_seen if lv.state == "alive" else lv.since)
            if lv.state in ("alive", "unknown") and quiet > st.heartbeat_timeout:
                if lv.state == "unknown" and not any(b.live and b.node == node for b in self.bindings.values()):
                    continue
                self._node_lost(node, f"node {node} lost: no heartbeat for {quiet:.1f}s", report)
        # binds an alive agent never took
        expired: list[tuple[str, Binding]] = []
        for key, b in self.bindings.items():
            if b.state != "binding" or not b.published or key in self.results and self.results[key].attempt == b.attempt:
                continue
            lv = self.live.get(b.node)
            if lv is None or lv.state != "alive" or now - b.decided <= st.bind_lease:
                continue
            if lv.holding.get(key) == b.attempt or (b.seq and lv.through_seq >= b.seq):
                continue  # the agent has it: wait for its answer for as long as it lives
            expired.append((key, b))
        if expired:
            # delete the undelivered decisions first, so a late delivery cannot start a released task
            await asyncio.gather(*(self.bus.delete_decision(b.seq) for _, b in expired if b.seq))
            for key, b in expired:
                if self.bindings.get(key) is b and b.state == "binding":
                    self._release(key, f"bind to {b.node} not received within {st.bind_lease:g}s lease", "lease",
                                  exclude=True)
                    report.released.append((key, "lease"))
        # backoffs that ended
        for key in [k for k, t in self.backoff_until.items() if t <= now]:
            del self.backoff_until[key]
            self._refresh_task(key)


    def _release(self, key: str, reason: str, kind: str, *, exclude: bool = False, backoff: bool | None = None) -> None:
        """Send a task back to Pending: record why, and hold it back for a while when its node failed it."""
        b = self.bindings.get(key)
        if b is None:
            return
        now = self.clock()
        st = self.settings
        if backoff is None:
            backoff = kind in ("rejected", "lease")
        delay = 0.0
        if backoff:
            n = self.failures.get(key, 0) + 1
            self.failures[key] = n
            delay = min(st.backoff_max, st.backoff_initial * 2 ** (n - 1))
            self.backoff_until[key] = now + delay
        if exclude and b.node:
            self.excluded.setdefault(key, {})[b.node] = now + st.exclusion_ttl
        nb = dataclasses.replace(b, state="released", reason=reason, backoff=delay, version=self._next_version())
        self.bindings[key] = nb
        self._unpublished.discard(key)
        self.reasons[key] = reason
        self._outbox[S.binding_subject(key)] = (self._binding_record(key, nb), None)
        self.metrics.releases.labels(kind).inc()
        self._new_work()
        log.info("task %s back to Pending: %s%s", key, reason, f" (backoff {delay:g}s)" if delay else "")
        self._refresh_task(key)


    # == restart ======================================================================================================
    async def _recover(self) -> None:
        """After catch-up: settle results that came before their binding record, then find out whether each
        unanswered bind reached the decision stream, and send it if not."""
        self._caught_up = True  # results are applied as during normal operation from here
        orphans, self._orphans = self._orphans, {}
        for key, r in orphans.items():
            self._replay_result(key, r)
        now = self.clock()
        todo = []
        for key, b in self.bindings.items():
            if not b.live:
                continue
            b.decided = now
            self.live.setdefault(b.node, NodeLive(since=now))
            r = self.results.get(key)
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
                    b.seq = found[0]
                    continue
            b.published = False
            todo.append((key, b, kind))
        if todo:
            log.info("republishing %d decisions that never reached the decision stream", len(todo))
            await self._send_decisions(todo)


    def _binding_record(self, key: str, b: Binding) -> m.BindingRecord:
        ns, name = key.split("/", 1)
        return m.BindingRecord(version=b.version, namespace=ns, name=name, attempt=b.attempt, node=b.node,
                               state=b.state, reason=b.reason if b.state == "released" else b.evict_reason,
                               backoff=b.backoff, decided_at=time.time())
