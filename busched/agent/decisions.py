"""How an agent answers its decisions: run or refuse a bind, stop a task on an evict, then acknowledge.

A batch of decisions is decided in order (a bind counts against its node for the rest of the batch),
every answer is published together, and only then is each decision acknowledged, or handed back
when its answer was not stored, so a crash in between never loses an answer nor runs an attempt
twice (docs/bus.md, "Agents").  Deciding (`decide_batch`) and answering (`answer`) are two steps, so
an agent may decide its next batch while the answers of the last are on their way.  The `Agent` owns
one `Decider`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

from busched.agent.node import AgentNode, HeldTask
from busched.api.objects import TaskSpec
from busched.api.resource import Resource
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.client import Bus, Delivery
from busched.bus.wire import cut
from busched.metrics import AgentMetrics

__all__ = ["Decider", "Reject", "DURATION_KEY", "BindCallback", "EvictCallback", "Launch", "Halt"]

log = logging.getLogger("busched.agent")

DURATION_KEY = "busched.io/duration"

BindCallback = Callable[[str, m.BindDecision], "None | str | Awaitable[None | str]"]
EvictCallback = Callable[[str, m.EvictDecision], "None | Awaitable[None]"]
Launch = Callable[[str, HeldTask], None]
Halt = Callable[[str, str, int], None]


class Reject(Exception):  # noqa: N818 - the public name embedding programs raise
    """Raise from ``on_bind`` to refuse a bind; the message is the reason the scheduler records."""


@dataclass
class _Outcome:
    delivery: Delivery
    messages: list[tuple[str, m.Msg]]
    commit: Callable[[], None] | None = None
    rollback: Callable[[], None] | None = None
    ok: bool = True


class Decider:
    """The decision handling of one `Agent`, with the agent's settings, memories and callbacks.

    ``finish(node, task)`` is called when a task's duration is up (the agent reports it Succeeded);
    ``history`` is the agent's list of what it did, appended to here."""

    def __init__(self, bus: Bus, nodes: Mapping[str, AgentNode], *, boot: str, version: Callable[[], int],
                 metrics: AgentMetrics, history: list[tuple[str, str, str, int]], finish: Callable[[str, str], Any],
                 on_bind: BindCallback | None, on_evict: EvictCallback | None, check_capacity: bool,
                 duration: float | None, launch: Launch | None = None, halt: Halt | None = None,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.bus = bus
        self.nodes = nodes
        self.boot = boot
        self.version = version
        self.metrics = metrics
        self.history = history
        self.finish = finish
        self.on_bind = on_bind
        self.on_evict = on_evict
        self.check_capacity = check_capacity
        self.duration = duration
        self.launch = launch  # given (an executor): a bind is accepted now and started by launch(node, held)
        self.halt = halt  # given: an evicted attempt is stopped by halt(node, task, attempt)
        self.wall_clock = wall_clock  # a started task's startTime (epoch seconds)

    async def handle_batch(self, batch: list[Delivery]) -> None:
        """Decide every decision of a batch in order, publish all the answers together, then ack each."""
        await self.answer(await self.decide_batch(batch))

    async def decide_batch(self, batch: list[Delivery]) -> list[_Outcome]:
        """Decide every decision of a batch in order (a bind counts against its node from here, for the rest of
        the batch and for the batches after it); nothing is published or acknowledged yet (`answer`)."""
        nodes = self.nodes
        outcomes: list[_Outcome] = []
        for d in batch:
            n = nodes.get(S.decision_node(d.subject))
            if n is None:
                log.warning("a decision for a node this agent does not serve, on %s", d.subject)
                outcomes.append(_Outcome(d, []))
                continue
            # received: from here the scheduler waits for our answer for as long as we heartbeat
            n.through_seq = max(n.through_seq, d.stream_seq)
            try:
                outcomes.append(await self.decide(n, d))
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001
                log.exception("node %s: decision %d failed", n.name, d.stream_seq)
                outcomes.append(_Outcome(d, [], ok=False))
        return outcomes

    async def answer(self, outcomes: list[_Outcome]) -> None:
        """Publish the answers of a decided batch together; then each decision whose answers are stored is
        committed and acknowledged, the others rolled back and handed back."""
        nodes = self.nodes
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
        self.metrics.running.set(sum(len(x.tasks) for x in nodes.values()))

    async def decide(self, n: AgentNode, d: Delivery) -> _Outcome:
        try:
            msg = m.decode(d.data)
        except m.DecodeError as e:
            log.warning("node %s: malformed decision on %s: %s", n.name, d.subject, e)
            return self.refuse_unreadable(n, d, str(e))
        if isinstance(msg, m.BindDecision) and msg.node == n.name:
            return await self.bind(n, d, msg)
        if isinstance(msg, m.EvictDecision) and msg.node == n.name:
            return await self.evict(n, d, msg)
        log.warning("node %s: unexpected %s on %s", n.name, type(msg).__name__, d.subject)
        return _Outcome(d, [])

    def refuse_unreadable(self, n: AgentNode, d: Delivery, error: str) -> _Outcome:
        """A bind this agent cannot read (a task spec from a newer scheduler, say) is rejected, naming why:
        left unanswered, the scheduler would keep the task bound here for as long as the agent heartbeats.
        What names the task and attempt is read leniently (`_BindHead`); anything else is only logged."""
        try:
            head = msgspec.json.decode(d.data, type=_BindHead)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return _Outcome(d, [])
        if head.type != "bind" or head.node != n.name or not head.task.name or head.attempt < 1:
            return _Outcome(d, [])
        key = f"{head.task.namespace}/{head.task.name}"
        reason = f"cannot read the bind: {error}"[:1024]
        self.metrics.binds.labels("rejected").inc()
        return _Outcome(d, [(S.result_subject(n.name, key), m.BindRejected(
            version=self.version(), namespace=head.task.namespace, name=head.task.name, node=n.name,
            attempt=head.attempt, reason=reason, boot=self.boot))])

    async def bind(self, n: AgentNode, d: Delivery, b: m.BindDecision) -> _Outcome:
        key = f"{b.task.namespace}/{b.task.name}"
        held = n.tasks.get(key)
        if (key, b.attempt) in n.done or (held is not None and held.attempt >= b.attempt):
            return _Outcome(d, [])  # a redelivery, stopped before it came, or older than what we run
        if n.fenced(key, b.fence, b.epoch, b.shard):
            # not run, and said so: the leader that took over may hold this bind's record as its own (written
            # before its epoch) and, once this agent is past the decision's sequence, waits for its answer
            log.warning("node %s: rejecting a bind of %s from an older writer (fence %d, epoch %d)", n.name, key,
                        b.fence, b.epoch)
            why = f"a bind from an older writer (fence {b.fence}, epoch {b.epoch}): not run"

            def stale() -> None:
                n.remember(key, b.attempt, "rejected")
                self.metrics.binds.labels("rejected").inc()

            return _Outcome(d, [(S.result_subject(n.name, key), m.BindRejected(
                version=self.version(), namespace=b.task.namespace, name=b.task.name, node=n.name,
                attempt=b.attempt, reason=why, boot=self.boot))], commit=stale)
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
            reason = cut(reason)  # (an on_bind's reason may be anything: busched.bus.wire.MAX_REASON)

            def rejected() -> None:
                n.remember(key, b.attempt, "rejected")
                self.history.append(("reject", n.name, key, b.attempt))
                self.metrics.binds.labels("rejected").inc()
                log.info("node %s rejected %s (attempt %d): %s", n.name, key, b.attempt, reason)
            return _Outcome(d, [(subject, m.BindRejected(version=self.version(), namespace=ns, name=name,
                                                          node=n.name, attempt=b.attempt, reason=reason,
                                                          boot=self.boot))], commit=rejected)
        new = HeldTask(key, b.attempt, b.task, req, started=time.monotonic())
        n.tasks[key] = new  # counts against the node from now, for the rest of the batch too

        def accepted() -> None:
            self.history.append(("bind", n.name, key, b.attempt))
            self.metrics.binds.labels("accepted").inc()
            if self.launch is not None:
                if n.tasks.get(key) is new:
                    self.launch(n.name, new)
                return
            dur = _duration(b.task, self.duration)
            if dur is not None and n.tasks.get(key) is new:
                new.timer = asyncio.get_running_loop().call_later(dur, lambda: self.finish(n.name, key))

        def undo() -> None:
            if n.tasks.get(key) is new:
                n.tasks.pop(key, None)

        if self.launch is not None:
            # an executor starts the task later (busched.agent.executor): accepted now, Running once it runs
            new.phase = "Accepted"
            return _Outcome(d, [(subject, m.BindAccepted(version=self.version(), namespace=ns, name=name,
                                                         node=n.name, attempt=b.attempt, boot=self.boot))],
                            commit=accepted, rollback=undo)
        # the task starts at once: Running says the bind was accepted too (bind.accepted is for an agent
        # that takes a bind now and starts the task later)
        new.start_time = self.wall_clock()
        return _Outcome(d, [
            (subject, m.TaskPhaseChanged(version=self.version(), namespace=ns, name=name, node=n.name,
                                         attempt=b.attempt, phase="Running", boot=self.boot,
                                         start_time=new.start_time))],
            commit=accepted, rollback=undo)

    async def evict(self, n: AgentNode, d: Delivery, e: m.EvictDecision) -> _Outcome:
        key = f"{e.namespace}/{e.name}"
        held = n.tasks.get(key)
        if held is not None and e.attempt not in (0, held.attempt):
            return _Outcome(d, [])  # an eviction of an attempt we no longer run
        if n.fenced(key, e.fence, e.epoch, e.shard):
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
        if held is not None and self.halt is not None:
            self.halt(n.name, key, attempt)
        n.tasks.pop(key, None)
        n.remember(key, attempt, "evicted")
        self.history.append(("evict", n.name, key, attempt))
        self.metrics.evicts.inc()
        return _Outcome(d, [(S.result_subject(n.name, key), m.TaskPhaseChanged(
            version=self.version(), namespace=e.namespace, name=e.name, node=n.name, attempt=attempt,
            phase="Failed", reason=cut(f"Evicted: {e.reason}") if held is not None else "Evicted: not running here",
            boot=self.boot))])


class _TaskName(msgspec.Struct):
    name: Annotated[str, msgspec.Meta(max_length=253)] = ""
    namespace: Annotated[str, msgspec.Meta(max_length=253)] = "default"


class _BindHead(msgspec.Struct):
    """What names a bind's task and attempt, read without the rest of it (unknown fields ignored)."""

    type: str = ""
    node: str = ""
    attempt: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] = 0
    task: _TaskName = msgspec.field(default_factory=_TaskName)


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
