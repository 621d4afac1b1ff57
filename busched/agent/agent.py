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

With an ``executor`` (`busched.agent.executor`, docs/executors.md) a bind is answered ``bind.accepted``
instead and the executor starts, waits for and stops the task in the background; its phases and exit
code are reported as it gives them, and runs an earlier incarnation left are recovered at start.

The `Agent` holds the nodes and the lifecycle; its parts do the work: `busched.agent.decisions`
(answering decisions), `busched.agent.heartbeat`, `busched.agent.answers` (reading back earlier
answers at start) and `busched.agent.node` (what it knows of each node).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from busched.agent import usage as agent_usage
from busched.agent.answers import load_answers
from busched.agent.decisions import DURATION_KEY, BindCallback, Decider, EvictCallback, Reject
from busched.agent.executor import Executor, Launcher, TaskRun, recover_runs
from busched.agent.heartbeat import Heartbeat, UsageSource
from busched.agent.logs import LogReader, serve_logs
from busched.agent.node import AgentNode, HeldTask
from busched.api import build
from busched.api.objects import NodeSpec, NodeUsageSpec
from busched.api.resource import Resource
from busched.bus import edit
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.client import Bus, DecisionFeed, Delivery, StreamSettings
from busched.bus.wire import MAX_STATE_MESSAGE, cut
from busched.metrics import AgentMetrics

__all__ = ["Agent", "Reject", "HeldTask", "AgentNode", "DURATION_KEY"]

log = logging.getLogger("busched.agent")

ANSWER_WINDOW = 4  # batches of answers in flight while the next batches are read and decided


def _registrable(spec: NodeSpec) -> None:
    """A node the agent registers is one the scheduler takes (`busched.api.build.validate`, and a ``node.upsert``
    within the state stream's limit); ValueError naming why, else the node would never be known to it while its
    heartbeats come for nothing."""
    try:
        build.validate("node", spec)
    except build.SpecError as e:
        raise ValueError(f"cannot register: {e}") from None
    size = len(m.encode(m.upsert("node", spec, 2**63 - 1)))
    if size > MAX_STATE_MESSAGE:
        raise ValueError(f"cannot register node {spec.name}: its node.upsert would be {size} bytes, more than the "
                         f"{MAX_STATE_MESSAGE} a scheduler takes")


class Agent:
    def __init__(self, bus: Bus, nodes: list[NodeSpec], *, on_bind: BindCallback | None = None,
                 on_evict: EvictCallback | None = None, heartbeat_interval: float = 1.0,
                 duration: float | None = None, check_capacity: bool = True, consume: bool = True,
                 register: bool = True, metrics: AgentMetrics | None = None, ack_wait: float = 30.0,
                 executor: Executor | None = None, grace: float = 30.0, concurrency: int = 4,
                 streams: StreamSettings | None = None, usage: UsageSource | None = None,
                 usage_interval: float = agent_usage.INTERVAL, wall_clock: Callable[[], float] = time.time) -> None:
        if not 0 < heartbeat_interval <= 3600:  # what a heartbeat's readers take (NodeHeartbeat.interval)
            raise ValueError(f"heartbeat_interval: over 0 and at most 3600 seconds, not {heartbeat_interval}")
        if register:
            for spec in nodes:
                _registrable(spec)
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
        self.streams = streams  # how the streams are made if this agent comes first (e.g. their replicas)
        self.metrics = metrics or AgentMetrics()
        self.boot = uuid.uuid4().hex[:12]
        names = list(self.nodes)
        self.consumer_name = S.decision_consumer(names)
        self.history: list[tuple[str, str, str, int]] = []  # (event, node, task, attempt), for tests and tools
        self._tasks: list[asyncio.Task[Any]] = []
        self._feed: DecisionFeed | None = None
        self._answering: collections.deque[asyncio.Task[None]] = collections.deque()  # answers in flight, in order
        self._running = False
        self._last_version = 0
        self.wall_clock = wall_clock  # epoch seconds: tasks' start times, the simulated load's measurement time
        if usage is None:
            usage = _default_usage(executor, wall_clock, usage_interval)
        self._heartbeat = Heartbeat(bus, self.nodes, boot=self.boot, interval=heartbeat_interval,
                                    consumer=self.consumer_name, version=self._version, usage=usage)
        # an executor (busched.agent.executor): binds accepted now, started, waited for and stopped in the background
        self.launcher = Launcher(executor, self._report_run, concurrency=concurrency, grace=grace) \
            if executor is not None else None
        self._decider = Decider(bus, self.nodes, boot=self.boot, version=self._version, metrics=self.metrics,
                                history=self.history, finish=self._finish, on_bind=on_bind, on_evict=on_evict,
                                check_capacity=check_capacity, duration=duration,
                                launch=self._launch if executor is not None else None,
                                halt=self.launcher.stop if self.launcher is not None else None,
                                wall_clock=wall_clock)

    # -- lifecycle -----------------------------------------------------------------------------------------------
    async def start(self) -> None:
        await self.bus.ensure_streams(self.streams, history=False)
        if self.register:
            # an operator's cordon survives the agent's restart (busched.bus.edit.register_nodes)
            bad = await edit.register_nodes(self.bus, [n.spec for n in self.nodes.values()], version=self._version())
            if bad:
                raise RuntimeError(f"cannot register nodes: {bad[0]}")
        self._running = True
        if self.consume:
            await load_answers(self.bus, self.nodes, self.boot)
            if self.launcher is not None:  # before the first heartbeat, so it holds what is still running
                await recover_runs(self.launcher, self.nodes)
                if isinstance(self.launcher.executor, LogReader):
                    await serve_logs(self.bus, list(self.nodes), self.launcher.executor)
            # one consumer for all the nodes (the server's cost grows with the number of consumers)
            self._feed = await self.bus.decision_feed(list(self.nodes), ack_wait=self.ack_wait)
            self._tasks.append(asyncio.create_task(self._consume(), name="agent-decisions"))
        await self._heartbeat.once()
        self._tasks.append(asyncio.create_task(self._heartbeat.run(lambda: self._running), name="agent-heartbeats"))
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
        if self.launcher is not None:
            await self.launcher.drain()
            await self.launcher.close()
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

    @property
    def heartbeats_paused(self) -> bool:
        return self._heartbeat.paused

    @heartbeats_paused.setter
    def heartbeats_paused(self, paused: bool) -> None:
        self._heartbeat.paused = paused

    def pause_heartbeats(self, paused: bool = True) -> None:
        self._heartbeat.paused = paused

    # -- helpers for embedding programs ----------------------------------------------------------------------------
    def running(self) -> dict[str, dict[str, int]]:
        """node -> {task: attempt} for every task this agent holds."""
        return {n.name: {k: t.attempt for k, t in n.tasks.items()} for n in self.nodes.values()}

    async def report_phase(self, node: str, task: str, phase: str, reason: str = "",
                           exit_code: int | None = None, boot: str = "") -> bool:
        """Report a held task's phase (Running, Succeeded, Failed); a finished task is released from the node."""
        n = self.nodes[node]
        held = n.tasks.get(task)
        if held is None:
            return False
        if phase in ("Succeeded", "Failed"):
            if held.timer is not None:
                held.timer.cancel()
            n.tasks.pop(task, None)
            n.remember(task, held.attempt, phase)
            self.history.append((phase.lower(), node, task, held.attempt))
            self.metrics.running.set(sum(len(x.tasks) for x in self.nodes.values()))
        held.phase = phase
        if phase == "Running":
            held.start_time = self.wall_clock()
        ns, name = task.split("/", 1)
        msg = m.TaskPhaseChanged(version=self._version(), namespace=ns, name=name, node=node, attempt=held.attempt,
                                 phase=phase, reason=cut(reason), exit_code=exit_code, boot=boot or self.boot,
                                 start_time=held.start_time if phase == "Running" else None)
        # the same id on every copy: one the stream stored although its acknowledgement was lost is not stored twice
        msg_id = f"phase.{self.boot}.{node}.{task}.{held.attempt}.{msg.version}"
        ack = await self.bus.publish(S.result_subject(node, task), msg, msg_id=msg_id)
        if not ack.ok:
            log.warning("cannot report %s %s on %s: %s; reporting it again", task, phase, node, ack.error)
            self._spawn(self._report_again(node, task, msg, msg_id))
        return ack.ok

    async def _report_again(self, node: str, task: str, msg: m.TaskPhaseChanged, msg_id: str) -> None:
        """Publish a report the stream did not take until it does, while it is still the task's latest news.

        No heartbeat carries a finished task, so a lost Succeeded would leave it Running for the scheduler for
        ever: e.g. on a NATS cluster whose stream is electing a new leader, for seconds after a server was lost.
        """
        wait = 0.5
        while self._running:
            await asyncio.sleep(wait)
            wait = min(5.0, 2 * wait)
            cur = self.nodes[node].tasks.get(task)
            if (cur is None) != (msg.phase in ("Succeeded", "Failed")) or \
                    (cur is not None and (cur.attempt, cur.phase) != (msg.attempt, msg.phase)):
                return  # newer news of the task (another attempt, another phase) is reported by itself
            ack = await self.bus.publish(S.result_subject(node, task), msg, msg_id=msg_id)
            if ack.ok:
                log.info("reported %s %s on %s", task, msg.phase, node)
                return

    # -- internals -----------------------------------------------------------------------------------------------
    def _version(self) -> int:
        self._last_version = max(self._last_version + 1, time.time_ns())
        return self._last_version

    async def _consume(self) -> None:
        assert self._feed is not None
        try:
            await self._consume_loop()
        finally:
            # stopping (as a crash would): answers not yet stored are not waited for; their decisions, never
            # acknowledged, come again to the next incarnation
            for t in self._answering:
                t.cancel()
            self._answering.clear()

    async def _consume_loop(self) -> None:
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
        """Decide every decision of a batch in order now; publish all its answers together, then ack each, in the
        background (`Decider.decide_batch`, `Decider.answer`): the next batch is read and decided while these
        answers are on their way, up to `ANSWER_WINDOW` batches of answers in flight.  A batch decided meanwhile
        counts the binds of the batches before it against their nodes even while their answers may still fail
        (and be rolled back): it can only refuse more, never overcommit."""
        outcomes = await self._decider.decide_batch(batch)
        t = asyncio.create_task(self._answer(outcomes))
        self._answering.append(t)
        while self._answering and (len(self._answering) >= ANSWER_WINDOW or self._answering[0].done()):
            await self._answering.popleft()

    async def _answer(self, outcomes: list[Any]) -> None:
        try:
            await self._decider.answer(outcomes)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - unacknowledged, the decisions come again after ack_wait
            log.exception("%s: answering a batch of %d decisions failed", self.consumer_name, len(outcomes))

    def _launch(self, node: str, held: HeldTask) -> None:
        assert self.launcher is not None
        self.launcher.launch(TaskRun(node, held.key, held.attempt, held.spec, boot=self.boot))

    async def _report_run(self, node: str, run: TaskRun, phase: str, reason: str, exit_code: int | None) -> bool:
        """An executor's news of a run, reported while the node still holds that attempt (with the boot
        that took it: a run recovered from an earlier incarnation keeps its boot)."""
        held = self.nodes[node].tasks.get(run.key)
        if held is None or held.attempt != run.attempt:
            return False
        return await self.report_phase(node, run.key, phase, reason, exit_code, boot=run.boot)

    def _finish(self, node: str, task: str) -> None:
        """A task's duration is up: report it Succeeded."""
        self._spawn(self.report_phase(node, task, "Succeeded"))

    def _spawn(self, coro: Any) -> None:
        if self._running:
            t = asyncio.create_task(coro)
            self._tasks.append(t)
            t.add_done_callback(self._forget)
        else:
            coro.close()

    def _forget(self, task: asyncio.Task[Any]) -> None:
        if task in self._tasks:
            self._tasks.remove(task)


def _default_usage(executor: Executor | None, wall_clock: Callable[[], float], interval: float) -> UsageSource | None:
    """Where a heartbeat's load comes from unless the embedding program says: an executor that measures it
    (`busched.agent.usage.MeasuresUsage`), else, for the simulated agent (no executor), its tasks' requests
    (`RequestsMeter`); an executor that cannot measure reports none."""
    if executor is None:
        meter = agent_usage.RequestsMeter(wall_clock, interval=interval)

        async def requested(n: AgentNode) -> NodeUsageSpec | None:
            return meter.measure(n)
        return requested
    if isinstance(executor, agent_usage.MeasuresUsage):
        measures = executor

        async def measured(n: AgentNode) -> NodeUsageSpec | None:
            return await measures.usage(n.name)
        return measured
    return None
