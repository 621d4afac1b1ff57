"""Agent liveness: heartbeats in, nodes lost.

A heartbeat marks its node's agent alive and says which binds it holds and how far it has consumed
the decision stream (the lease check in `busched.scheduler.bindings` reads both).  An agent that comes
back with a new boot id lost the tasks its old incarnation had accepted; a task it holds that is no
longer bound to it gets a stale evict.  A node whose agent is lost (`_node_lost`) is unschedulable
and its live binds, unless finished, go back to Pending.
"""

from __future__ import annotations

import logging

from busched.bus import messages as m
from busched.bus import subjects as S
from busched.scheduler.records import TERMINAL, CycleReport, NodeLive, _field_error

log = logging.getLogger("busched.scheduler")


class Agents:
    # == inbound: heartbeats ==========================================================================================
    def handle_heartbeat(self, subject: str, data: bytes) -> None:
        try:
            hb = m.decode(data)
        except m.DecodeError as e:
            self._reject("malformed", "heartbeat", f"heartbeat on {subject}: {_field_error(e)}")
            return
        if not isinstance(hb, m.NodeHeartbeat) or S.heartbeat_subject(hb.node) != subject:
            self._reject("mismatch", "heartbeat", f"heartbeat on {subject}: not a heartbeat of this node")
            return
        self.metrics.heartbeats.inc()
        now = self.clock()
        lv = self.live.setdefault(hb.node, NodeLive(since=now))
        rebooted = bool(lv.boot) and hb.boot != lv.boot
        was = lv.state
        lv.state, lv.last_seen, lv.holding, lv.interval = "alive", now, dict(hb.holding), hb.interval
        lv.through_seq = hb.through_seq
        old_boot, lv.boot = lv.boot, hb.boot
        if was != "alive":
            if was == "lost":
                log.info("node %s is back", hb.node)
            self._refresh_node(hb.node)
            self._new_work()
        if not self.ready:
            return
        if rebooted:
            # tasks the old incarnation had accepted died with it
            for key, b in list(self.bindings.items()):
                r = self.results.get(key)
                if (b.node == hb.node and b.live and r is not None and r.attempt == b.attempt and r.boot == old_boot
                        and r.what not in TERMINAL and hb.holding.get(key) != b.attempt):
                    self._release(key, f"agent of {hb.node} restarted", "node_lost")
        for key, attempt in hb.holding.items():
            b = self.bindings.get(key)
            if b is not None and b.live and b.attempt == attempt and b.node == hb.node:
                continue
            mark = (hb.node, key, attempt)
            if mark in self._stale_evicts:
                continue
            self._stale_evicts.add(mark)
            ns, _, name = key.partition("/")
            ev = m.EvictDecision(version=self._next_version(), namespace=ns, name=name, node=hb.node,
                                 attempt=attempt, reason="stale: the task is no longer bound here")
            log.warning("node %s holds %s attempt %d, which is no longer bound there: evicting it", hb.node, key,
                        attempt)
            self._outbox[S.decision_subject(hb.node, "evict", key)] = (ev, f"evict:{key}:{attempt}:stale")


    def _node_lost(self, node: str, reason: str, report: CycleReport | None = None) -> None:
        lv = self.live.setdefault(node, NodeLive())
        if lv.state != "lost":
            log.warning("%s; its tasks go back to Pending", reason)
        lv.state = "lost"
        lv.holding = {}
        self._refresh_node(node)
        for key, b in list(self.bindings.items()):
            if b.node != node or not b.live:
                continue
            r = self.results.get(key)
            if r is not None and r.attempt == b.attempt and r.what in TERMINAL:
                continue
            self._release(key, reason, "node_lost")
            if report is not None:
                report.released.append((key, "node_lost"))
