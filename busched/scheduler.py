"""The scheduler loop: state events in, scheduling cycles, decisions out.

State arrives on the state stream (`busched.bus.subjects`): object specs from
`busched apply` and agents, the scheduler's own binding and podgroup records,
and agents' results.  It is folded into a `Cache` of *effective* objects: a
task's spec overlaid with where the scheduler bound it and what its agent last
reported; a node's spec overlaid with whether its agent is alive; a job's spec
overlaid with its podgroup status.  Every ``period`` seconds a cycle takes a
snapshot, runs the configured actions (`run_cycle`) in a worker thread, and
publishes its decisions.

The life of a bind::

    Pending --cycle--> Binding --bind.accepted--> Bound --task.phase--> Running --> Succeeded/Failed
                          |  (the node's resources are held from here)
                          +-- bind.rejected / not received within the lease / agent lost --> Pending
                              (reason recorded, backoff before the next attempt)

A binding record (attempt number, node) is written to the state stream
*before* the bind decision is published, so a restarted scheduler knows every
bind it made; the decision carries ``Nats-Msg-Id: bind:<ns>/<name>:<attempt>``
so a republish is dropped by the server.  A bind is released on a timer only
when its agent is provably not holding it: the agent is silent past the
heartbeat timeout, or the agent is alive but its heartbeats show it has not
consumed up to the bind's stream sequence after the lease (the undelivered
decision is then deleted from the stream first).  An agent that has the bind
but has not answered keeps it for as long as it heartbeats.

Time: a monotonic clock drives leases, heartbeats and backoff, outside any
session; a session never reads a clock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from busched.api import objects as o
from busched.api.fit import Code
from busched.api.task import TaskStatus, status_from_phase
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.client import Bus, StateWatch, StreamSettings
from busched.bus.resources import resource_list
from busched.cache.build import SpecError
from busched.cache.cache import Cache
from busched.framework.config import DEFAULT_CONFIG, PluginOption, SchedulerConfig, Tier, load_config
from busched.framework.cycle import QuietCycles, paused_gc, run_cycle
from busched.metrics import SchedulerMetrics

__all__ = ["Scheduler", "SchedulerSettings", "CycleReport", "BACKOFF_GATE", "FEEDBACK_PLUGIN"]

log = logging.getLogger("busched.scheduler")

BACKOFF_GATE = "busched.io/backoff"
FEEDBACK_PLUGIN = "busched-agent-feedback"
TERMINAL = ("Succeeded", "Failed")
FREEZE_AFTER_EVENTS = 50_000  # a catch-up at least this big moves what it built to the collector's permanent generation
_RESULT_RANK = {"accepted": 1, "Running": 2, "Succeeded": 3, "Failed": 3, "rejected": 3}


@dataclass
class SchedulerSettings:
    period: float = 1.0  # seconds between cycles
    bind_lease: float = 10.0  # an alive agent must have consumed a bind within this long
    heartbeat_timeout: float = 5.0  # no heartbeat for this long: the node's agent is lost
    require_heartbeat: bool = True  # only nodes whose agent is alive are schedulable
    backoff_initial: float = 1.0  # seconds before a rejected/unreceived task may be placed again, doubling
    backoff_max: float = 60.0
    exclusion_ttl: float = 60.0  # a node that refused a task is not offered it again for this long
    max_event_bytes: int = 256 * 1024  # larger state messages are rejected
    cycle_in_thread: bool = True
    seed: int = 0
    streams: StreamSettings = field(default_factory=StreamSettings)


@dataclass
class Binding:
    attempt: int
    node: str
    state: str = "binding"  # binding | evicting | released
    reason: str = ""
    version: int = 0
    backoff: float = 0.0
    decided: float = 0.0  # monotonic time of the decision (or of recovery)
    seq: int = 0  # decision-stream sequence of the bind, 0 while unknown
    published: bool = True  # False while the decision still has to be (re)published
    evict_reason: str = ""

    @property
    def live(self) -> bool:
        return self.state in m.BINDING_LIVE_STATES


@dataclass
class Result:
    attempt: int
    node: str
    what: str  # accepted | rejected | Running | Succeeded | Failed
    reason: str = ""
    boot: str = ""
    version: int = 0


@dataclass
class NodeLive:
    state: str = "unknown"  # unknown (not heard since we started) | alive | lost
    last_seen: float = 0.0
    since: float = 0.0
    boot: str = ""
    holding: dict[str, int] = field(default_factory=dict)
    through_seq: int = 0
    interval: float = 1.0


@dataclass
class CycleReport:
    cycle: int
    binds: list[tuple[str, str]] = field(default_factory=list)
    evicts: list[tuple[str, str]] = field(default_factory=list)
    released: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0
    error: str = ""
    skipped: bool = False  # nothing could have changed since the last cycle, which decided nothing


class _FeedbackPlugin:
    """Keeps a task off nodes whose agent refused it (or never took it) recently."""

    name = FEEDBACK_PLUGIN

    def __init__(self, excluded: dict[str, frozenset[str]]) -> None:
        self.excluded = excluded

    def on_session_open(self, ssn: Any) -> None:
        from busched.framework.session import fit_error

        excluded = self.excluded

        def predicate(task: Any, node: Any) -> None:
            nodes = excluded.get(task.key)
            if nodes and node.name in nodes:
                raise fit_error(task, node, f"node {node.name} refused this task recently", self.name,
                                Code.UnschedulableAndUnresolvable)

        ssn.add_fn("predicate", self.name, predicate)


def _version_clock() -> Callable[[], int]:
    last = 0

    def next_version() -> int:
        nonlocal last
        last = max(last + 1, time.time_ns())
        return last

    return next_version


def _task_key(ns: str, name: str) -> str:
    return f"{ns}/{name}"


class Scheduler:
    """One scheduler instance over a `Bus`.  ``await start()``, then `run_forever` or `run_once`."""

    def __init__(self, bus: Bus, config: SchedulerConfig | str | None = None,
                 settings: SchedulerSettings | None = None, *, metrics: SchedulerMetrics | None = None,
                 plugins: Any = None, actions: Any = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.bus = bus
        if config is None:
            config = DEFAULT_CONFIG
        self.config = load_config(config) if isinstance(config, str) else config
        self.settings = settings or SchedulerSettings()
        self.metrics = metrics or SchedulerMetrics()
        self.plugins = plugins
        self.actions = actions
        self.clock = clock
        self.boot = uuid.uuid4().hex[:8]
        self.cache = Cache()
        self._next_version = _version_clock()
        # what we know, beside the cache
        self.specs: dict[str, dict[str, Any]] = {k: {} for k in m.UPSERTS}
        self.versions: dict[tuple[str, str], int] = {}  # (kind, key) -> highest version seen, deletes included
        self.bindings: dict[str, Binding] = {}
        self.results: dict[str, Result] = {}
        self.pg_status: dict[str, m.PodGroupStatus] = {}
        self.live: dict[str, NodeLive] = {}
        self.backoff_until: dict[str, float] = {}
        self.failures: dict[str, int] = {}  # consecutive failed attempts, for backoff
        self.excluded: dict[str, dict[str, float]] = {}  # task -> node -> until
        self.reasons: dict[str, str] = {}  # task -> last reason it went back to Pending
        self._outbox: dict[str, tuple[m.Msg, str | None]] = {}  # subject -> latest record to (re)publish
        self._stale_evicts: set[tuple[str, str, int]] = set()
        self._unpublished: set[str] = set()  # tasks whose bind/evict decision still has to go out
        self.watch: StateWatch | None = None
        self.cycle = 0
        self.started_at = 0.0
        self.ready = False
        self.catchup_seconds = 0.0
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._dirty_tasks: set[str] = set()
        self._orphans: dict[str, Result] = {}  # results replayed before their binding record
        self._caught_up = False
        self._gate = QuietCycles(self.config)
        self._excluded_key: frozenset[Any] = frozenset()
        self._quiet_excluded: frozenset[Any] | None = None  # the exclusions of the last cycle
        self._counts: dict[tuple[str, str], int] = {}  # (kind, upsert|delete|stale) -> events not yet in metrics

    # == lifecycle ====================================================================================================
    async def start(self, *, timeout: float = 60.0) -> None:
        """Subscribe, catch up with the state stream, recover in-flight binds; `ready` is True after this."""
        t0 = time.perf_counter()
        self.started_at = self.clock()
        await self.bus.ensure_streams(self.settings.streams)
        await self.bus.subscribe(f"{S.HEARTBEAT_PREFIX}.*", self.handle_heartbeat)
        await self.bus.serve(S.API_GET, self._serve_get)
        with paused_gc():  # the whole catch-up, between batches too
            self.watch = await self.bus.watch_state(batch_handler=self.handle_state_batch)
            try:
                await asyncio.wait_for(self.watch.caught_up.wait(), timeout)
            except asyncio.TimeoutError:
                raise RuntimeError(f"state stream not caught up within {timeout}s "
                                   f"(at {self.watch.last_seq} of {self.watch.target})") from None
            await self._recover()
            if self.watch.count >= FREEZE_AFTER_EVENTS:
                # What a big catch-up built (specs, cache, conversion memo) lives as long as the scheduler:
                # keep it out of every later collection, instead of re-enabling the collector on millions of
                # young objects and paying for several full passes over them during the first cycles.
                gc.freeze()
        self.catchup_seconds = time.perf_counter() - t0
        self.metrics.catchup_seconds.set(self.catchup_seconds)
        self.ready = True
        self.metrics.ready.set(1)
        log.info("caught up with the state stream in %.3fs: %d nodes, %d jobs, %d tasks, %d live binds",
                 self.catchup_seconds, len(self.specs["node"]), len(self.specs["job"]), len(self.specs["task"]),
                 sum(1 for b in self.bindings.values() if b.live))

    async def stop(self) -> None:
        self._stop.set()
        self.ready = False
        self.metrics.ready.set(0)
        if self.watch is not None:
            await self.watch.stop()
        try:
            await self._flush_outbox()
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass

    async def run_forever(self) -> None:
        if not self.ready:
            await self.start()
        while not self._stop.is_set():
            t = self.clock()
            try:
                await self.run_once()
            except Exception:  # noqa: BLE001 - one bad cycle must not stop the scheduler
                log.exception("cycle %d failed", self.cycle)
                self.metrics.cycle_errors.inc()
            delay = max(0.0, self.settings.period - (self.clock() - t))
            try:
                await asyncio.wait_for(self._stop.wait(), delay)
            except asyncio.TimeoutError:
                pass

    # == one cycle ====================================================================================================
    async def run_once(self, *, force: bool = False) -> CycleReport:
        """One cycle.  It is skipped (``report.skipped``) when it could not decide anything: the last
        cycle decided nothing and neither the cache nor the nodes a task is kept off have changed
        since (`QuietCycles`).  Whatever the clock changes (heartbeats lapsing, leases, backoffs
        ending) is applied to the cache before that check, so it makes the cycle due.  ``force``
        runs it anyway."""
        async with self._lock:
            self.cycle += 1
            report = CycleReport(self.cycle)
            t0 = time.perf_counter()
            await self._flush_outbox()
            await self._expire(report)
            await self._republish()
            with paused_gc():
                self.sync_cache()
            config, plugins = self._cycle_config()
            excluded_key = self._excluded_key
            if not force and excluded_key == self._quiet_excluded and not self._gate.due(self.cache.generation):
                report.skipped = True
                await self._flush_outbox()
                return report
            with paused_gc():  # as run_cycle: no collector passes over the whole cluster mid-build
                before = self.cache.generation
                snap = self.snapshot()
            kw = dict(plugins=plugins, actions=self.actions, seed=self.settings.seed,
                      uid=f"{self.boot}-{self.cycle}")
            try:
                if self.settings.cycle_in_thread:
                    ssn = await asyncio.to_thread(run_cycle, snap, config, **kw)
                else:
                    ssn = run_cycle(snap, config, **kw)
            except Exception as e:  # noqa: BLE001
                self.metrics.cycle_errors.inc()
                log.exception("cycle %d: session failed", self.cycle)
                report.error = f"{type(e).__name__}: {e}"
                self._gate.done(_NO_SESSION, 0, 1)  # due again
                return report
            binds = [d for d in ssn.decisions if d.kind == "bind"]
            evicts = [d for d in ssn.decisions if d.kind == "evict"]
            await self._publish_binds(binds, report)
            await self._publish_evicts(evicts, report)
            self._collect_podgroups(ssn)
            with paused_gc():
                self.sync_cache()
            self._gate.done(ssn, before, self.cache.generation)
            self._quiet_excluded = excluded_key
            await self._flush_outbox()
            report.seconds = time.perf_counter() - t0
            self.metrics.cycles.inc()
            self.metrics.cycle_seconds.observe(report.seconds)
            self._update_gauges()
            if report.binds or report.evicts or report.released:
                log.info("cycle %d: %d binds, %d evicts, %d released in %.3fs", self.cycle, len(report.binds),
                         len(report.evicts), len(report.released), report.seconds)
            return report

    def _cycle_config(self) -> tuple[SchedulerConfig, Any]:
        now = self.clock()
        excluded: dict[str, frozenset[str]] = {}
        for key, nodes in list(self.excluded.items()):
            keep = {n: t for n, t in nodes.items() if t > now}
            if keep:
                self.excluded[key] = keep
                excluded[key] = frozenset(keep)
            else:
                del self.excluded[key]
        self._excluded_key = frozenset(excluded.items())
        if not excluded:
            return self.config, self.plugins
        from busched.plugins import PLUGINS

        base = self.plugins if self.plugins is not None else PLUGINS
        plugins = base.with_entries({FEEDBACK_PLUGIN: lambda args: _FeedbackPlugin(excluded)})
        config = dataclasses.replace(self.config,
                                     tiers=self.config.tiers + (Tier(plugins=(PluginOption(FEEDBACK_PLUGIN),)),))
        return config, plugins

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
        # write-ahead: the binding records first
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
        await self._send_decisions([(key, b, "bind") for key, b in ready])
        for key, b in ready:
            report.binds.append((key, b.node))
        self.metrics.action_binds.inc(len(ready))

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

    def _collect_podgroups(self, ssn: Any) -> None:
        """Queue a ``podgroup.status`` for every job whose phase or conditions changed (and only those)."""
        specs = self.specs["job"]
        pgs = self.pg_status
        now = 0.0
        for uid, job in ssn.jobs.items():
            if not getattr(job, "has_podgroup", True):
                continue
            spec = specs.get(uid)
            if spec is None:
                continue
            cur = pgs.get(uid)
            if cur is not None:
                cur_phase, cur_conds = cur.phase, cur.conditions
            else:
                cur_phase, cur_conds = spec.phase, []
            raw = job.conditions
            if job.phase == cur_phase and _same_conditions(raw, cur_conds):
                continue
            conds = [m.Condition(type=str(c.get("type", "")), status=str(c.get("status", "")),
                                 reason=str(c.get("reason", "")), message=str(c.get("message", "")),
                                 transition_id=str(c.get("transitionID", "")))
                     for c in raw]
            now = now or time.time()
            old = {c.type: c for c in cur_conds}
            for c in conds:
                prev = old.get(c.type)
                c.last_transition_time = (prev.last_transition_time if prev is not None and prev.status == c.status
                                          else now)
            st = m.PodGroupStatus(version=self._next_version(), namespace=spec.namespace, name=spec.name,
                                  phase=job.phase, conditions=conds)
            if cur_phase != job.phase:
                log.debug("job %s: %s -> %s", uid, cur_phase, job.phase)
            pgs[uid] = st
            self._outbox[S.podgroup_subject(uid)] = (st, None)
            self._refresh_job(uid)

    async def _flush_outbox(self) -> None:
        if not self._outbox:
            return
        items = list(self._outbox.items())
        self._outbox.clear()
        acks = await self.bus.publish_all((subj, msg, mid) for subj, (msg, mid) in items)
        for (subj, rec), ack in zip(items, acks):
            if not ack.ok:
                self.metrics.publish_errors.labels("record").inc()
                self._outbox.setdefault(subj, rec)

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
        log.info("task %s back to Pending: %s%s", key, reason, f" (backoff {delay:g}s)" if delay else "")
        self._refresh_task(key)

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
        if isinstance(msg, m.DELETE_TYPES):
            self.versions[vkey] = msg.version
            old = self.specs[kind].pop(key, None)
            if old is not None:
                self.cache.delete(kind, key)
                self._on_deleted(kind, key)
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
            self._refresh_task(key)
        return "applied"

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

    # == effective objects ============================================================================================
    def _refresh(self, kind: str, key: str) -> None:
        if kind == "task":
            self._refresh_task(key, strict=True)
        elif kind == "node":
            self._refresh_node(key, strict=True)
        elif kind == "job":
            self._refresh_job(key, strict=True)
        else:
            self.cache.upsert(kind, self.specs[kind][key])

    def _refresh_task(self, key: str, strict: bool = False) -> None:
        """Bring the cache's copy of a task up to date: now for a new spec (to validate it), else lazily."""
        if not strict:
            self._dirty_tasks.add(key)
            return
        spec = self.specs["task"].get(key)
        if spec is None:
            return
        self._dirty_tasks.discard(key)
        self._upsert("task", self.effective_task(key, spec), strict)

    def sync_cache(self) -> None:
        """Apply the task changes gathered since the last cycle (several results of one task cost one upsert)."""
        dirty, self._dirty_tasks = self._dirty_tasks, set()
        for key in dirty:
            spec = self.specs["task"].get(key)
            if spec is not None:
                self._upsert("task", self.effective_task(key, spec), False)

    def snapshot(self) -> Any:
        self.sync_cache()
        return self.cache.snapshot()

    def _refresh_node(self, key: str, strict: bool = False) -> None:
        spec = self.specs["node"].get(key)
        if spec is None:
            return
        ready = spec.ready and (not self.settings.require_heartbeat
                                or self.live.get(key, NodeLive()).state == "alive")
        self._upsert("node", spec if ready == spec.ready else msgspec.structs.replace(spec, ready=ready), strict)

    def _refresh_job(self, key: str, strict: bool = False) -> None:
        spec = self.specs["job"].get(key)
        if spec is None:
            return
        st = self.pg_status.get(key)
        if st is not None:
            spec = msgspec.structs.replace(spec, phase=st.phase, conditions=[
                {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message,
                 "transitionID": c.transition_id} for c in st.conditions])
        self._upsert("job", spec, strict)

    def _upsert(self, kind: str, spec: Any, strict: bool) -> None:
        try:
            self.cache.upsert(kind, spec)
        except SpecError:
            if strict:
                raise
            log.exception("cannot refresh %s %s", kind, spec.name)

    def effective_task(self, key: str, spec: o.TaskSpec) -> o.TaskSpec:
        """The task as the scheduler must see it: where we bound it and what its agent said."""
        b = self.bindings.get(key)
        gates = spec.scheduling_gates
        if key in self.backoff_until and BACKOFF_GATE not in gates:
            gates = [*gates, BACKOFF_GATE]
        if b is None:
            if spec.phase in TERMINAL and spec.node:
                # terminated tasks hold nothing on their node (Volcano's cache skips them)
                return msgspec.structs.replace(spec, node="", scheduling_gates=gates)
            return spec if gates is spec.scheduling_gates else msgspec.structs.replace(spec, scheduling_gates=gates)
        if not b.live:
            return msgspec.structs.replace(spec, node="", phase="Pending", deleting=False, scheduling_gates=gates)
        r = self.results.get(key)
        phase = "Pending"
        if r is not None and r.attempt == b.attempt and r.what in ("Running", "Succeeded", "Failed"):
            phase = r.what
        node = b.node if phase not in TERMINAL else ""
        return msgspec.structs.replace(spec, node=node, phase=phase, deleting=b.state == "evicting",
                                       scheduling_gates=gates)

    def task_status(self, key: str) -> str:
        """Volcano's task status name as `busched get tasks` shows it."""
        spec = self.specs["task"].get(key)
        if spec is None:
            return ""
        b = self.bindings.get(key)
        if b is None or not b.live:
            s = spec if b is None else msgspec.structs.replace(spec, node="", phase="Pending")
            return status_from_phase(s.phase, s.node, s.deleting).name
        if b.state == "evicting":
            return TaskStatus.Releasing.name
        r = self.results.get(key)
        if r is None or r.attempt != b.attempt:
            return TaskStatus.Binding.name
        if r.what == "accepted":
            return TaskStatus.Bound.name
        return r.what

    def _binding_record(self, key: str, b: Binding) -> m.BindingRecord:
        ns, name = key.split("/", 1)
        return m.BindingRecord(version=b.version, namespace=ns, name=name, attempt=b.attempt, node=b.node,
                               state=b.state, reason=b.reason if b.state == "released" else b.evict_reason,
                               backoff=b.backoff, decided_at=time.time())

    # == views ========================================================================================================
    def _update_gauges(self) -> None:
        counts: dict[str, int] = {}
        for key in self.specs["task"]:
            s = self.task_status(key)
            counts[s] = counts.get(s, 0) + 1
        for s in TaskStatus:
            self.metrics.tasks.labels(s.name).set(counts.get(s.name, 0))
        ns: dict[str, int] = {"alive": 0, "lost": 0, "unknown": 0}
        for key in self.specs["node"]:
            st = self.live.get(key, NodeLive()).state
            ns[st] = ns.get(st, 0) + 1
        for k, v in ns.items():
            self.metrics.nodes.labels(k).set(v)
        phases: dict[str, int] = {}
        for key, spec in self.specs["job"].items():
            st = self.pg_status.get(key)
            p = st.phase if st is not None else spec.phase
            phases[p] = phases.get(p, 0) + 1
        for p in ("Pending", "Inqueue", "Running", "Unknown", "Completed"):
            self.metrics.jobs.labels(p).set(phases.get(p, 0))

    def view(self, kind: str) -> list[dict[str, Any]]:
        """What `busched get` shows."""
        if kind == "tasks":
            out = []
            for key, spec in self.specs["task"].items():
                b = self.bindings.get(key)
                eff = self.effective_task(key, spec)
                node = b.node if b is not None and b.live else eff.node
                r = self.results.get(key)
                if b is not None and b.live and r is not None and r.what in TERMINAL:
                    node = r.node
                out.append({"namespace": spec.namespace, "name": spec.name, "job": spec.job, "node": node,
                            "status": self.task_status(key), "attempt": b.attempt if b is not None else 0,
                            "reason": self.reasons.get(key, ""), "requests": dict(spec.requests),
                            "backoff": key in self.backoff_until})
            return out
        if kind == "nodes":
            snap = self.snapshot()
            infos = {n.name: n for n in snap.nodes}
            out = []
            for key, spec in self.specs["node"].items():
                lv = self.live.get(key, NodeLive())
                info = infos.get(key)
                used = resource_list(info.used) if info is not None else {}
                ntasks = sum(1 for b in self.bindings.values() if b.live and b.node == key)
                out.append({"name": key, "allocatable": dict(spec.allocatable), "used": used,
                            "state": lv.state, "ready": info is not None, "tasks": ntasks,
                            "labels": dict(spec.labels)})
            return out
        if kind == "jobs":
            by_job: dict[str, dict[str, int]] = {}
            for tkey, t in self.specs["task"].items():
                counts = by_job.setdefault(f"{t.namespace}/{t.job}", {})
                s = self.task_status(tkey)
                counts[s] = counts.get(s, 0) + 1
            out = []
            for key, spec in self.specs["job"].items():
                st = self.pg_status.get(key)
                counts = by_job.get(key, {})
                out.append({"namespace": spec.namespace, "name": spec.name, "queue": spec.queue,
                            "minMember": spec.min_member, "phase": st.phase if st is not None else spec.phase,
                            "tasks": counts,
                            "conditions": [msgspec.to_builtins(c) for c in st.conditions] if st is not None else []})
            return out
        if kind == "queues":
            out = []
            for key, spec in self.specs["queue"].items():
                jobs = [j for j in self.specs["job"].values() if j.queue == key]
                out.append({"name": key, "weight": spec.weight, "state": spec.state, "jobs": len(jobs),
                            "capability": dict(spec.capability or {})})
            return out
        raise ValueError(f"unknown kind {kind!r} (nodes, queues, jobs, tasks)")

    async def _serve_get(self, data: bytes) -> bytes:
        try:
            req = m.decode(data)
        except m.DecodeError as e:
            return m.encode(m.GetReply(error=f"bad request: {_field_error(e)}"))
        if not isinstance(req, m.GetRequest):
            return m.encode(m.GetReply(error=f"expected a get request, got {type(req).__name__}"))
        try:
            items = self.view(req.kind)
        except ValueError as e:
            return m.encode(m.GetReply(kind=req.kind, error=str(e)))
        limit = max(1, min(req.limit, 5000))
        page = items[req.offset:req.offset + limit]
        nxt = req.offset + limit if req.offset + limit < len(items) else None
        reply = m.encode(m.GetReply(kind=req.kind, items=page, next=nxt))
        while len(reply) > self.bus.max_payload - 1024 and len(page) > 1:
            page = page[: len(page) // 2]
            reply = m.encode(m.GetReply(kind=req.kind, items=page, next=req.offset + len(page)))
        return reply


class _NoSession:
    decisions = (None,)  # counts as a cycle that decided something: the next one is due


_NO_SESSION: Any = _NoSession()
_DECODE = m._DECODER.decode  # m.decode without the call around it


def _same_conditions(raw: list[dict[str, Any]], conds: list[m.Condition]) -> bool:
    """Whether a session's conditions (dicts) say what ``conds`` say (the transition id aside)."""
    if len(raw) != len(conds):
        return False
    for c, x in zip(raw, conds):
        if (str(c.get("type", "")) != x.type or str(c.get("status", "")) != x.status
                or str(c.get("reason", "")) != x.reason or str(c.get("message", "")) != x.message):
            return False
    return True


def _describe(kind: str, key: str) -> str:
    if kind == "result":
        node, _, task = key.partition("/")
        return f"result for task {task} on node {node}"
    return f"{kind} {key}" if kind else "message"


def _field_error(e: Exception) -> str:
    """msgspec's "Expected `int`, got `str` - at `$.task.priority`" as "task.priority: expected `int`, got `str`"."""
    text = str(e)
    if " - at `$" in text:
        msg, _, path = text.partition(" - at `$")
        path = path.rstrip("`").lstrip(".")
        return f"{path or 'payload'}: {msg[0].lower() + msg[1:]}"
    return f"payload: {text}"
