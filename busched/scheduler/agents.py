"""Agent liveness: heartbeats in; nodes unreachable, then lost.

A heartbeat marks its node's agent alive and says which binds it holds and how far it has consumed
the decision stream (the lease check in `busched.scheduler.bindings` reads both).  An agent that
comes back with a new boot id does not run what its old incarnation had: those attempts are stopped
(an evict each, answered by the new incarnation) before their tasks are placed again.  A task it
holds that is no longer bound to it gets a stale evict.

Silence is read carefully, as Kubernetes' node lifecycle does: no heartbeat for
``heartbeat_timeout`` makes a node *unreachable* (no new binds; its tasks keep their resources), and
only ``node_lost_grace`` later is it *lost* and are its tasks released.  Nothing is declared while
the scheduler itself is cut off from the bus or has just reconnected (`Liveness.calm`), nor
while more than ``lost_hold_fraction`` of the fleet is silent at once: that is a partition or a bus
problem, and re-running most of the fleet's work would not help.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Protocol

from busched.api import build
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.scheduler.records import (
    TERMINAL,
    Binding,
    CycleReport,
    NodeLive,
    Result,
    _field_error,
)

log = logging.getLogger("busched.scheduler")


class LivenessSettings(Protocol):
    heartbeat_timeout: float
    node_lost_grace: float
    lost_hold_fraction: float
    lost_hold_min_nodes: int


class Liveness:
    """Every node's agent liveness (``live``: node -> `NodeLive`), from heartbeats and silence.

    ``bindings`` and ``results`` are the binding table's (read only here); ``stop_attempt`` (key, reason,
    why) stops the attempts of a rebooted agent and ``release`` (key, reason, kind) frees those of a lost
    one; ``refresh_node`` is told a node's readiness changed, ``new_work``
    that a node came alive; ``send_evict`` queues a stale evict (subject, decision, message id);
    ``reject`` counts and logs a refused heartbeat; ``ready`` says whether the scheduler has caught up."""

    def __init__(self, settings: LivenessSettings, clock: Callable[[], float], *,
                 live: dict[str, NodeLive] | None = None,
                 bindings: Mapping[str, Binding], results: Mapping[str, Result],
                 stop_attempt: Callable[[str, str, str], None], release: Callable[[str, str, str], None],
                 connected: Callable[[], bool], ready: Callable[[], bool],
                 refresh_node: Callable[[str], None], new_work: Callable[[], None],
                 send_evict: Callable[[str, m.EvictDecision, str], None], next_version: Callable[[], int],
                 reject: Callable[[str, str, str], object], on_heartbeat: Callable[[], None]) -> None:
        self.settings = settings
        self.clock = clock
        self.bindings = bindings
        self.results = results
        self.stop_attempt = stop_attempt
        self.release = release
        self.connected = connected
        self.ready = ready
        self.refresh_node = refresh_node
        self.new_work = new_work
        self.send_evict = send_evict
        self.next_version = next_version
        self.reject = reject
        self.on_heartbeat = on_heartbeat
        self.live: dict[str, NodeLive] = live if live is not None else {}
        self.reconnected_at = 0.0  # when our own connection came back (scheduler's clock), 0 if never lost
        self.held_partition = False
        self.stale_evicts: set[tuple[str, str, int]] = set()

    # == inbound: heartbeats ==========================================================================================
    def handle_heartbeat(self, subject: str, data: bytes) -> None:
        try:
            hb = m.decode(data)
        except (m.DecodeError, RecursionError) as e:
            self.reject("malformed", "heartbeat", f"heartbeat on {subject}: {_field_error(e)}")
            return
        if not isinstance(hb, m.NodeHeartbeat) or S.heartbeat_subject(hb.node) != subject:
            self.reject("mismatch", "heartbeat", f"heartbeat on {subject}: not a heartbeat of this node")
            return
        self.on_heartbeat()
        now = self.clock()
        lv = self.live.setdefault(hb.node, NodeLive(since=now))
        rebooted = bool(lv.boot) and hb.boot != lv.boot
        was = lv.state
        old_through = lv.through_seq
        lv.state, lv.last_seen, lv.holding, lv.interval = "alive", now, dict(hb.holding), hb.interval
        lv.through_seq = hb.through_seq
        lv.consumer = hb.consumer
        old_boot, lv.boot = lv.boot, hb.boot
        load_changed = hb.usage is not None and hb.usage != lv.usage and self._take_usage(hb, lv)
        if was != "alive":
            if was in ("lost", "unreachable"):
                log.info("node %s is back", hb.node)
            self.refresh_node(hb.node)
            self.new_work()
        elif load_changed:
            self.refresh_node(hb.node)  # the next cycle sees it; a load alone does not start one
        if not self.ready():
            return
        if rebooted:
            log.warning("the agent of %s restarted (boot %s -> %s)", hb.node, old_boot, hb.boot)
            # what the old incarnation took died with it; a bind it took but never answered could still be
            # redelivered to the new one: stop both kinds (the new incarnation answers, then they are placed again)
            for key, b in list(self.bindings.items()):
                if b.node != hb.node or not b.live or b.state == "evicting" or hb.holding.get(key) == b.attempt:
                    continue
                r = self.results.get(key)
                answered = r is not None and r.attempt == b.attempt
                if r is not None and answered and r.what in TERMINAL:
                    continue
                if answered or (b.seq and b.seq <= old_through):
                    self.stop_attempt(key, f"agent of {hb.node} restarted", "restart")
        for key, attempt in hb.holding.items():
            cur = self.bindings.get(key)
            if cur is not None and cur.live and cur.attempt == attempt and cur.node == hb.node:
                continue
            mark = (hb.node, key, attempt)
            if mark in self.stale_evicts:
                continue
            self.stale_evicts.add(mark)
            ns, _, name = key.partition("/")
            ev = m.EvictDecision(version=self.next_version(), namespace=ns, name=name, node=hb.node,
                                 attempt=attempt, reason="stale: the task is no longer bound here")
            log.warning("node %s holds %s attempt %d, which is no longer bound there: evicting it", hb.node, key,
                        attempt)
            self.send_evict(S.decision_subject(hb.node, "evict", key), ev, f"evict:{key}:{attempt}:stale")

    def _take_usage(self, hb: m.NodeHeartbeat, lv: NodeLive) -> bool:
        """Keep the heartbeat's load if it is valid (the check `busched apply` runs on a node's usage) and no
        older than the one held (heartbeats are core NATS: one may overtake another); whether it was kept.
        How old a load may be to count is the usage plugin's rule (five minutes before its cycle, Volcano's)."""
        assert hb.usage is not None
        try:
            usage = build.node_usage(hb.usage, f"heartbeat of node {hb.node}")
        except build.SpecError as e:
            self.reject("invalid", "heartbeat", str(e))
            return False
        when = usage.time if usage is not None else 0.0
        if when < lv.usage_time:
            return False
        lv.usage, lv.usage_time = hb.usage, when
        return True

    def on_connection(self, connected: bool) -> None:
        """Our own link to the bus: while it is down nobody's silence counts; once it is back, every agent gets a
        fresh heartbeat window."""
        now = self.clock()
        if connected:
            self.reconnected_at = now
            for lv in self.live.values():
                lv.last_seen = max(lv.last_seen, now)
                lv.since = max(lv.since, now)
        else:
            log.warning("scheduler disconnected from NATS: no node is declared unreachable or lost until it is back")

    def calm(self, now: float) -> bool:
        """Whether silence means anything: not while we are cut off from the bus ourselves, nor before every
        agent has had a heartbeat timeout to be heard again after we reconnected."""
        if not self.connected():
            return False
        return now - self.reconnected_at > self.settings.heartbeat_timeout or self.reconnected_at == 0.0

    def alive(self, node: str) -> bool:
        lv = self.live.get(node)
        return lv is not None and lv.state == "alive"

    def check(self, now: float, report: CycleReport) -> None:
        """Silent nodes become unreachable, and lost after the grace period (unless too many are silent)."""
        st = self.settings
        silent: list[tuple[str, float]] = []
        holding: set[str] | None = None  # nodes with live binds, made once if needed (not per silent node)
        for node, lv in self.live.items():
            if lv.state == "lost":
                continue
            quiet = now - (lv.last_seen if lv.last_seen else lv.since)
            if quiet <= st.heartbeat_timeout:
                continue
            if lv.state == "unknown":
                if holding is None:
                    holding = {b.node for b in self.bindings.values() if b.live}
                if node not in holding:
                    continue  # never heard and nothing there: nothing to do
            silent.append((node, quiet))
        if not silent:
            self.held_partition = False
            return
        for node, quiet in silent:
            lv = self.live[node]
            if lv.state != "unreachable":
                log.warning("node %s unreachable: no heartbeat for %.1fs; no new binds there", node, quiet)
                lv.state = "unreachable"
                lv.unreachable_since = now
                self.refresh_node(node)
        known = sum(1 for lv in self.live.values() if lv.state != "unknown" or lv.last_seen)
        out = sum(1 for lv in self.live.values() if lv.state in ("unreachable", "lost"))
        if known >= st.lost_hold_min_nodes and out > st.lost_hold_fraction * known:
            if not self.held_partition:
                log.warning("%d of %d nodes are silent at once: holding their tasks (a partition or a bus problem "
                            "is likelier than so many node failures)", out, known)
                self.held_partition = True
            return
        self.held_partition = False
        for node, quiet in silent:
            lv = self.live[node]
            if lv.state == "unreachable" and now - lv.unreachable_since >= st.node_lost_grace:
                self.node_lost(node, f"node {node} lost: no heartbeat for {quiet:.1f}s", report)

    def node_lost(self, node: str, reason: str, report: CycleReport | None = None) -> None:
        lv = self.live.setdefault(node, NodeLive())
        if lv.state != "lost":
            log.warning("%s; its tasks go back to Pending", reason)
        lv.state = "lost"
        lv.holding = {}
        self.refresh_node(node)
        for key, b in list(self.bindings.items()):
            if b.node != node or not b.live:
                continue
            r = self.results.get(key)
            if r is not None and r.attempt == b.attempt and r.what in TERMINAL:
                continue
            self.release(key, reason, "node_lost")
            if report is not None:
                report.released.append((key, "node_lost"))
