"""A node agent: takes binds and evictions for its nodes, runs tasks, reports every change.

One `Agent` serves one or many nodes over one connection.  For each node it

* registers the node (a ``node.upsert`` on the state stream),
* heartbeats (``node.heartbeat`` on core NATS) with the tasks it holds and how
  far it has read its decisions,
* reads its decisions (``busched.decision.<node>.>``) from one durable
  consumer: the node's own (``agent-<node>``) when the agent serves one node,
  one for all its nodes when it serves several (`subjects.fleet_consumer`).
  For a bind it asks ``on_bind`` (and, unless disabled, checks the task fits
  what the node has left), answers ``task.phase Running`` (the task starts at
  once, so this also says the bind was accepted) or ``bind.rejected``, and only
  then acks; for an evict it stops the task, calls ``on_evict`` and reports
  ``task.phase Failed`` (reason ``Evicted``),
* optionally finishes a task after a duration (``--duration`` or the task's
  ``busched.io/duration`` annotation, in seconds) and reports ``Succeeded``.

Callbacks::

    def on_bind(node: str, bind: BindDecision) -> None | str     # a string (or raise Reject) refuses
    def on_evict(node: str, evict: EvictDecision) -> None

Either may be a coroutine function.  `report_phase` lets the embedding program
report a task's phase itself (e.g. ``Failed`` when its process exits non-zero).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from busched.api.objects import NodeSpec, TaskSpec
from busched.api.resource import Resource
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.client import Bus, DecisionFeed, Delivery
from busched.bus.resources import resource_list
from busched.metrics import AgentMetrics

__all__ = ["Agent", "Reject", "HeldTask", "AgentNode", "DURATION_KEY"]

log = logging.getLogger("busched.agent")

DURATION_KEY = "busched.io/duration"

BindCallback = Callable[[str, m.BindDecision], "None | str | Awaitable[None | str]"]
EvictCallback = Callable[[str, m.EvictDecision], "None | Awaitable[None]"]


class Reject(Exception):
    """Raise from ``on_bind`` to refuse a bind; the message is the reason the scheduler records."""


@dataclass
class HeldTask:
    key: str
    attempt: int
    spec: TaskSpec
    request: Resource
    phase: str = "Running"
    started: float = 0.0
    timer: asyncio.TimerHandle | None = None


@dataclass
class AgentNode:
    spec: NodeSpec
    allocatable: Resource
    tasks: dict[str, HeldTask] = field(default_factory=dict)
    through_seq: int = 0
    hb_seq: int = 0
    done: OrderedDict[tuple[str, int], str] = field(default_factory=OrderedDict)  # answered attempts
    fences: OrderedDict[str, int] = field(default_factory=OrderedDict)  # task -> highest decision fence seen

    @property
    def name(self) -> str:
        return self.spec.name

    def used(self) -> Resource:
        r = Resource()
        for t in self.tasks.values():
            r.add(t.request)
        return r


class Agent:
    def __init__(self, bus: Bus, nodes: list[NodeSpec], *, on_bind: BindCallback | None = None,
                 on_evict: EvictCallback | None = None, heartbeat_interval: float = 1.0,
                 duration: float | None = None, check_capacity: bool = True, consume: bool = True,
                 register: bool = True, metrics: AgentMetrics | None = None, ack_wait: float = 30.0) -> None:
        self.bus = bus
        self.nodes: dict[str, AgentNode] = {
            n.name: AgentNode(n, Resource.from_list(n.allocatable, field=f"node {n.name}: allocatable"))
            for n in nodes}
        self.on_bind = on_bind
        self.on_evict = on_evict
        self.heartbeat_interval = heartbeat_interval
        self.duration = duration
        self.check_capacity = check_capacity
        self.consume = consume
        self.register = register
        self.ack_wait = ack_wait  # an unacknowledged decision comes again after this long (consumer creation only)
        self.metrics = metrics or AgentMetrics()
        self.boot = uuid.uuid4().hex[:12]
        names = list(self.nodes)
        self.consumer_name = S.decision_consumer(names)
        self.history: list[tuple[str, str, str, int]] = []  # (event, node, task, attempt), for tests and tools
        self.heartbeats_paused = False
        self._tasks: list[asyncio.Task[Any]] = []
        self._feed: DecisionFeed | None = None
        self._running = False
        self._last_version = 0

    # -- lifecycle -----------------------------------------------------------------------------------------------
    async def start(self) -> None:
        await self.bus.ensure_streams()
        if self.register:
            acks = await self.bus.publish_all(
                (S.state_subject("node", n.name), m.NodeUpsert(version=self._version(), node=n.spec), None)
                for n in self.nodes.values())
            bad = [a.error for a in acks if not a.ok]
            if bad:
                raise RuntimeError(f"cannot register nodes: {bad[0]}")
        self._running = True
        if self.consume:
            await self._load_answers()
            # one consumer for all the nodes (the server's cost grows with the number of consumers)
            self._feed = await self.bus.decision_feed(list(self.nodes), ack_wait=self.ack_wait)
            self._tasks.append(asyncio.create_task(self._consume(), name="agent-decisions"))
        await self._heartbeat_once()
        self._tasks.append(asyncio.create_task(self._heartbeats(), name="agent-heartbeats"))
        log.info("agent %s serving %d nodes", self.boot, len(self.nodes))

    async def stop(self) -> None:
        """Stop consuming and heartbeating; held tasks stop with the agent, unreported (as a crash would)."""
        self._running = False
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        self._tasks.clear()
        if self._feed is not None:
            await self._feed.stop()
            self._feed = None
        for n in self.nodes.values():
            for held in n.tasks.values():
                if held.timer is not None:
                    held.timer.cancel()


    async def run_forever(self) -> None:
        if not self._running:
            await self.start()
        await asyncio.gather(*self._tasks)

    @property
    def started(self) -> bool:
        return self._running

    def pause_heartbeats(self, paused: bool = True) -> None:
        self.heartbeats_paused = paused

    # -- helpers for embedding programs ----------------------------------------------------------------------------
    def running(self) -> dict[str, dict[str, int]]:
        """node -> {task: attempt} for every task this agent holds."""
        return {n.name: {k: t.attempt for k, t in n.tasks.items()} for n in self.nodes.values()}

    async def report_phase(self, node: str, task: str, phase: str, reason: str = "",
                           exit_code: int | None = None) -> bool:
        """Report a held task's phase (Running, Succeeded, Failed); a finished task is released from the node."""
        n = self.nodes[node]
        held = n.tasks.get(task)
        if held is None:
            return False
        if phase in ("Succeeded", "Failed"):
            if held.timer is not None:
                held.timer.cancel()
            n.tasks.pop(task, None)
            self._remember(n, task, held.attempt, phase)
            self.history.append((phase.lower(), node, task, held.attempt))
            self.metrics.running.set(sum(len(x.tasks) for x in self.nodes.values()))
        held.phase = phase
        ns, name = task.split("/", 1)
        ack = await self.bus.publish(S.result_subject(node, task), m.TaskPhaseChanged(
            version=self._version(), namespace=ns, name=name, node=node, attempt=held.attempt, phase=phase,
            reason=reason, exit_code=exit_code, boot=self.boot))
        if not ack.ok:
            log.warning("cannot report %s %s on %s: %s", task, phase, node, ack.error)
        return ack.ok

    # -- internals -----------------------------------------------------------------------------------------------
    def _version(self) -> int:
        self._last_version = max(self._last_version + 1, time.time_ns())
        return self._last_version

    def _remember(self, n: AgentNode, task: str, attempt: int, outcome: str) -> None:
        n.done[(task, attempt)] = outcome
        while len(n.done) > 10000:
            n.done.popitem(last=False)

    def _fenced(self, n: AgentNode, task: str, fence: int) -> bool:
        """Whether a decision is older than one already seen for this task (a deposed writer's): then it is
        ignored.  Fences are the stream sequences of the binding records that decided them."""
        seen = n.fences.get(task, 0)
        if fence and fence < seen:
            return True
        if fence > seen:
            n.fences[task] = fence
            n.fences.move_to_end(task)
            while len(n.fences) > 10000:
                n.fences.popitem(last=False)
        return False

    async def _load_answers(self) -> None:
        """What this node's agent answered before (any incarnation) is on the state stream: remember it, so a
        decision redelivered after a restart is never run twice.  What an earlier incarnation ran is not running
        now: it is remembered as lost (its bind is not run again; an evict of it is answered)."""
        sem = asyncio.Semaphore(16)

        async def read(name: str) -> list[tuple[str, int, bytes]]:
            async with sem:
                return await self.bus.last_per_subject(S.node_results(name))
        try:
            found = [x for part in await asyncio.gather(*(read(name) for name in self.nodes)) for x in part]
        except Exception as e:  # noqa: BLE001 - e.g. not permitted: carry on with an empty memory
            log.warning("cannot read this agent's earlier answers: %s", e)
            return
        n_loaded = 0
        for _subject, _seq, data in found:
            try:
                r = m.decode(data)
            except m.DecodeError:
                continue
            if not isinstance(r, (m.BindAccepted, m.BindRejected, m.TaskPhaseChanged)):
                continue
            n = self.nodes.get(r.node)
            if n is None:
                continue
            if isinstance(r, m.BindRejected):
                outcome = "rejected"
            elif isinstance(r, m.TaskPhaseChanged) and r.phase in ("Succeeded", "Failed"):
                outcome = "evicted" if r.reason.startswith("Evicted") else r.phase
            else:
                outcome = "lost"
            self._remember(n, f"{r.namespace}/{r.name}", r.attempt, outcome)
            n_loaded += 1
        if n_loaded:
            log.info("agent %s: remembered %d earlier answers", self.boot, n_loaded)

    async def _heartbeats(self) -> None:
        while self._running:
            await asyncio.sleep(self.heartbeat_interval)
            try:
                await self._heartbeat_once()
            except Exception as e:  # noqa: BLE001 - keep beating through reconnects
                log.warning("heartbeat failed: %s", e)

    async def _heartbeat_once(self) -> None:
        if self.heartbeats_paused:
            return
        for n in self.nodes.values():
            n.hb_seq += 1
            used = resource_list(n.used(), skip_zero=True)
            await self.bus.publish_core(S.heartbeat_subject(n.name), m.NodeHeartbeat(
                version=self._version(), node=n.name, boot=self.boot, seq=n.hb_seq,
                interval=self.heartbeat_interval, holding={k: t.attempt for k, t in n.tasks.items()},
                through_seq=n.through_seq, used=used, consumer=self.consumer_name))

    async def _consume(self) -> None:
        assert self._feed is not None
        while self._running:
            try:
                batch = await self._feed.fetch(1024, timeout=1.0)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - reconnects, timeouts
                log.warning("%s: fetch failed: %s", self._feed.node, e)
                await asyncio.sleep(0.2)
                continue
            if batch:
                try:
                    await self._handle_batch(batch)
                except asyncio.CancelledError:
                    raise
                except Exception:  # noqa: BLE001 - unacknowledged, the decisions come again after ack_wait
                    log.exception("%s: a batch of %d decisions failed", self._feed.node, len(batch))

    async def _handle_batch(self, batch: list[Delivery]) -> None:
        """Decide every decision of a batch in order, publish all the answers together, then ack each."""
        outcomes: list[_Outcome] = []
        for d in batch:
            n = self.nodes.get(S.decision_node(d.subject))
            if n is None:
                log.warning("a decision for a node this agent does not serve, on %s", d.subject)
                outcomes.append(_Outcome(d, []))
                continue
            # received: from here the scheduler waits for our answer for as long as we heartbeat
            n.through_seq = max(n.through_seq, d.stream_seq)
            try:
                outcomes.append(await self._decide(n, d))
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001
                log.exception("node %s: decision %d failed", n.name, d.stream_seq)
                outcomes.append(_Outcome(d, [], ok=False))
        msgs = [(subj, msg, None) for o in outcomes for subj, msg in o.messages]
        acks = await self.bus.publish_all(msgs) if msgs else []
        i = 0
        for o in outcomes:
            k = len(o.messages)
            ok = o.ok and all(a.ok for a in acks[i:i + k])
            i += k
            if ok:
                if o.commit is not None:
                    o.commit()
                await o.delivery.ack()
            else:
                if o.rollback is not None:
                    o.rollback()
                await o.delivery.nak(delay=1.0)
        self.metrics.running.set(sum(len(x.tasks) for x in self.nodes.values()))

    async def _decide(self, n: AgentNode, d: Delivery) -> _Outcome:
        try:
            msg = m.decode(d.data)
        except m.DecodeError as e:
            log.warning("node %s: malformed decision on %s: %s", n.name, d.subject, e)
            return _Outcome(d, [])
        if isinstance(msg, m.BindDecision) and msg.node == n.name:
            return await self._bind(n, d, msg)
        if isinstance(msg, m.EvictDecision) and msg.node == n.name:
            return await self._evict(n, d, msg)
        log.warning("node %s: unexpected %s on %s", n.name, type(msg).__name__, d.subject)
        return _Outcome(d, [])

    async def _bind(self, n: AgentNode, d: Delivery, b: m.BindDecision) -> _Outcome:
        key = f"{b.task.namespace}/{b.task.name}"
        held = n.tasks.get(key)
        if (key, b.attempt) in n.done or (held is not None and held.attempt >= b.attempt):
            return _Outcome(d, [])  # a redelivery, stopped before it came, or older than what we run
        if self._fenced(n, key, b.fence):
            log.warning("node %s: ignoring a bind of %s from an older writer (fence %d)", n.name, key, b.fence)
            return _Outcome(d, [])
        if held is not None:
            # a newer attempt of a task we still run: the newer one wins
            if held.timer is not None:
                held.timer.cancel()
            n.tasks.pop(key, None)
        ns, name = b.task.namespace, b.task.name
        subject = S.result_subject(n.name, key)
        try:
            req = Resource.from_list(b.task.requests, field=f"task {key}: requests")
        except ValueError as e:
            reason: str | None = str(e)
            req = Resource()
        else:
            reason = None
        if reason is None and self.check_capacity:
            idle = n.allocatable.clone().sub(n.used())
            if not req.less_equal(idle):
                reason = f"insufficient resources on {n.name}: requested {_fmt(req)}, free {_fmt(idle)}"
        if reason is None and self.on_bind is not None:
            try:
                res = self.on_bind(n.name, b)
                if inspect.isawaitable(res):
                    res = await res
                if isinstance(res, str) and res:
                    reason = res
            except Reject as e:
                reason = str(e) or "rejected"
        if reason is not None:
            def rejected() -> None:
                self._remember(n, key, b.attempt, "rejected")
                self.history.append(("reject", n.name, key, b.attempt))
                self.metrics.binds.labels("rejected").inc()
                log.info("node %s rejected %s (attempt %d): %s", n.name, key, b.attempt, reason)
            return _Outcome(d, [(subject, m.BindRejected(version=self._version(), namespace=ns, name=name,
                                                          node=n.name, attempt=b.attempt, reason=reason,
                                                          boot=self.boot))], commit=rejected)
        new = HeldTask(key, b.attempt, b.task, req, started=time.monotonic())
        n.tasks[key] = new  # counts against the node from now, for the rest of the batch too

        def accepted() -> None:
            self.history.append(("bind", n.name, key, b.attempt))
            self.metrics.binds.labels("accepted").inc()
            dur = _duration(b.task, self.duration)
            if dur is not None and n.tasks.get(key) is new:
                new.timer = asyncio.get_running_loop().call_later(
                    dur, lambda: self._spawn(self.report_phase(n.name, key, "Succeeded")))

        def undo() -> None:
            if n.tasks.get(key) is new:
                n.tasks.pop(key, None)

        # the task starts at once: Running says the bind was accepted too (bind.accepted is for an agent
        # that takes a bind now and starts the task later)
        return _Outcome(d, [
            (subject, m.TaskPhaseChanged(version=self._version(), namespace=ns, name=name, node=n.name,
                                         attempt=b.attempt, phase="Running", boot=self.boot))],
            commit=accepted, rollback=undo)

    def _spawn(self, coro: Any) -> None:
        if self._running:
            t = asyncio.create_task(coro)
            self._tasks.append(t)
            t.add_done_callback(self._forget_task)
        else:
            coro.close()

    def _forget_task(self, t: asyncio.Task[Any]) -> None:
        if t in self._tasks:  # (stop() may have cleared the list already)
            self._tasks.remove(t)

    async def _evict(self, n: AgentNode, d: Delivery, e: m.EvictDecision) -> _Outcome:
        key = f"{e.namespace}/{e.name}"
        held = n.tasks.get(key)
        if held is not None and e.attempt not in (0, held.attempt):
            return _Outcome(d, [])  # an eviction of an attempt we no longer run
        if self._fenced(n, key, e.fence):
            return _Outcome(d, [])
        if held is None and n.done.get((key, e.attempt)) in ("Succeeded", "Failed", "evicted", "rejected"):
            return _Outcome(d, [])  # answered for good already: a late evict never rewrites a finished attempt
        if held is not None and held.timer is not None:
            held.timer.cancel()
        if self.on_evict is not None:
            res = self.on_evict(n.name, e)
            if inspect.isawaitable(res):
                await res
        attempt = held.attempt if held is not None else e.attempt
        n.tasks.pop(key, None)
        self._remember(n, key, attempt, "evicted")
        self.history.append(("evict", n.name, key, attempt))
        self.metrics.evicts.inc()
        return _Outcome(d, [(S.result_subject(n.name, key), m.TaskPhaseChanged(
            version=self._version(), namespace=e.namespace, name=e.name, node=n.name, attempt=attempt,
            phase="Failed", reason=f"Evicted: {e.reason}" if held is not None else "Evicted: not running here",
            boot=self.boot))])


@dataclass
class _Outcome:
    delivery: Delivery
    messages: list[tuple[str, m.Msg]]
    commit: Callable[[], None] | None = None
    rollback: Callable[[], None] | None = None
    ok: bool = True


def _duration(task: TaskSpec, default: float | None) -> float | None:
    raw = task.annotations.get(DURATION_KEY)
    if raw is not None:
        try:
            return max(0.0, float(raw))
        except ValueError:
            pass
    return default


def _fmt(r: Resource) -> str:
    d = r.to_dict()
    parts = [f"cpu={d.pop('cpu', 0) / 1000:g}", f"memory={int(d.pop('memory', 0))}"]
    parts += [f"{k}={v / 1000 if k != 'pods' else v:g}" for k, v in d.items()]
    return ",".join(parts)
