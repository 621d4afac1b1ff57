"""The conformance kit's side of the bus: it writes what a scheduler writes and watches what an agent says.

`Probe` stands in for the scheduler towards one node's agent.  Like the scheduler
(`busched.scheduler.bindings`), every decision goes out after its binding record, written on condition
that the task's binding subject is where the probe last saw it, and carries that record's stream
sequence as its ``fence``; a bind carries ``Nats-Msg-Id: bind:<ns>/<name>:<attempt>`` unless the check
deliberately sends a redelivery.  So an agent that reads binding records back finds the ones it expects.

It hears the agent on the subjects the scheduler reads: the node's heartbeats (core NATS) and every
node's result subjects (``busched.state.result.>``: a result for the probe's tasks on another node's
subject is a violation).  Waiting is done on what the agent says (a result, a heartbeat whose
``throughSeq`` covers a decision), never on a bare sleep; only "the agent said nothing" needs a quiet
period, measured in the agent's own heartbeats.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from busched.api.objects import TaskSpec
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.client import Bus

__all__ = ["Probe", "Heard", "ResultMsg"]

ResultMsg = m.BindAccepted | m.BindRejected | m.TaskPhaseChanged


@dataclass
class Heard:
    """One result the probe heard: its subject and message."""

    subject: str
    msg: ResultMsg


class Probe:
    """Binds and evicts towards ``node``'s agent, for tasks in ``namespace``; ``timeout`` bounds every wait."""

    def __init__(self, bus: Bus, node: str, *, namespace: str = "agentcheck", timeout: float = 10.0,
                 task_template: TaskSpec | None = None) -> None:
        self.bus = bus
        self.node = node
        self.namespace = namespace
        self.timeout = timeout
        self.run_id = uuid.uuid4().hex[:8]
        self.writer = f"agentcheck-{self.run_id}"
        self.template = task_template or TaskSpec(name="t", requests={"cpu": "10m", "memory": "1Mi"})
        self.heartbeats: list[m.NodeHeartbeat] = []
        self.results: list[Heard] = []
        self.tasks: set[str] = set()  # every task key this probe used (cleaned up at the end)
        self._rec_seq: dict[str, int] = {}  # task -> the last binding record's sequence this probe saw
        self._changed = asyncio.Event()
        self._subs: list[Any] = []

    # -- hearing -------------------------------------------------------------------------------------------------
    async def start(self) -> None:
        await self.bus.ensure_streams()
        self._subs.append(await self.bus.subscribe(S.heartbeat_subject(self.node), self._on_heartbeat))
        self._subs.append(await self.bus.subscribe(f"{S.STATE_PREFIX}.result.>", self._on_result))
        await self.bus.flush()

    def _on_heartbeat(self, subject: str, data: bytes) -> None:
        try:
            hb = m.decode(data)
        except m.DecodeError:
            return
        if isinstance(hb, m.NodeHeartbeat):
            self.heartbeats.append(hb)
            self._changed.set()

    def _on_result(self, subject: str, data: bytes) -> None:
        try:
            r = m.decode(data)
        except m.DecodeError:
            return
        if isinstance(r, (m.BindAccepted, m.BindRejected, m.TaskPhaseChanged)) and \
                f"{r.namespace}/{r.name}" in self.tasks:
            self.results.append(Heard(subject, r))
            self._changed.set()

    async def wait_for(self, cond: Callable[[], Any], timeout: float | None = None) -> Any:
        """``cond()``'s first truthy value, re-checked whenever the agent says something; None on timeout."""
        deadline = asyncio.get_running_loop().time() + (self.timeout if timeout is None else timeout)
        while True:
            v = cond()
            if v:
                return v
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return None
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except asyncio.TimeoutError:
                pass

    def last_heartbeat(self) -> m.NodeHeartbeat | None:
        return self.heartbeats[-1] if self.heartbeats else None

    async def heartbeat_after(self, pred: Callable[[m.NodeHeartbeat], bool], *, beats: int = 1,
                              timeout: float | None = None) -> m.NodeHeartbeat | None:
        """A heartbeat, among those that arrive from now on, for which ``pred`` holds (``beats``: the
        ``beats``-th such one)."""
        start = len(self.heartbeats)

        def found() -> m.NodeHeartbeat | None:
            ok = [h for h in self.heartbeats[start:] if pred(h)]
            return ok[beats - 1] if len(ok) >= beats else None
        return await self.wait_for(found, timeout)

    async def settle(self, decision_seq: int) -> m.NodeHeartbeat | None:
        """Wait until the agent has read a decision (a heartbeat's ``throughSeq`` covers it) and then for two
        more of its heartbeats, so an answer it was going to give has been given.  The last heartbeat, or
        None when its ``throughSeq`` never covered the decision."""
        hb = await self.heartbeat_after(lambda h: h.through_seq >= decision_seq)
        if hb is None:
            return None
        return await self.heartbeat_after(lambda h: True, beats=2)

    def results_for(self, key: str, attempt: int | None = None) -> list[Heard]:
        return [h for h in self.results if f"{h.msg.namespace}/{h.msg.name}" == key
                and (attempt is None or h.msg.attempt == attempt)]

    # -- writing, as the scheduler does --------------------------------------------------------------------------
    def key(self, label: str) -> str:
        k = f"{self.namespace}/{label}-{self.run_id}"
        self.tasks.add(k)
        return k

    async def record(self, key: str, attempt: int, state: str = "binding", *, stop: str = "",
                     reason: str = "") -> int:
        """Write the task's binding record (conditional, as the scheduler's); its stream sequence."""
        subject = S.binding_subject(key)
        expected = self._rec_seq.get(key)
        if expected is None:
            last = await self.bus.last_state(subject)
            expected = last[0] if last is not None else 0
        ns, name = key.split("/", 1)
        ack = await self.bus.publish(subject, m.BindingRecord(
            namespace=ns, name=name, attempt=attempt, node=self.node, state=state, stop=stop, reason=reason,
            writer=self.writer), expected=expected)
        if not ack.ok:
            raise RuntimeError(f"cannot write the binding record of {key}: {ack.error} (is a scheduler running "
                               f"against this node?)")
        self._rec_seq[key] = ack.seq
        return ack.seq

    async def bind(self, key: str, attempt: int, fence: int, *, redelivery: bool = False,
                   node_in_body: str | None = None) -> int:
        """Publish a bind decision for ``key`` on the node's subject; its decision-stream sequence.
        ``redelivery``: without the message id, as a decision delivered again after the duplicate window."""
        ns, name = key.split("/", 1)
        task = TaskSpec(**{**{f: getattr(self.template, f) for f in self.template.__struct_fields__},
                           "name": name, "namespace": ns})
        msg = m.BindDecision(node=node_in_body or self.node, attempt=attempt, task=task, fence=fence)
        mid = None if redelivery else f"bind:{key}:{attempt}"
        return await self._decide(S.decision_subject(self.node, "bind", key), msg, mid)

    async def evict(self, key: str, attempt: int, fence: int, *, reason: str = "agentcheck",
                    redelivery: bool = False) -> int:
        """Publish an evict decision; ``redelivery`` as for `bind` (e.g. a deposed writer's late evict)."""
        ns, name = key.split("/", 1)
        msg = m.EvictDecision(namespace=ns, name=name, node=self.node, attempt=attempt, reason=reason, fence=fence)
        mid = None if redelivery else f"evict:{key}:{attempt}"
        return await self._decide(S.decision_subject(self.node, "evict", key), msg, mid)

    async def _decide(self, subject: str, msg: m.Msg, msg_id: str | None) -> int:
        ack = await self.bus.publish(subject, msg, msg_id=msg_id)
        if not ack.ok:
            raise RuntimeError(f"cannot publish the decision on {subject}: {ack.error}")
        return ack.seq

    # -- leaving no trace ----------------------------------------------------------------------------------------
    async def close(self) -> None:
        """Purge the probe's binding records and its tasks' results (every node's), and stop hearing."""
        for key in sorted(self.tasks):
            for subject in (S.binding_subject(key), S.task_results(key)):
                try:
                    await self.bus.purge_state(subject)
                except Exception:  # noqa: BLE001 - best effort: the run's verdict stands
                    pass
        for sub in self._subs:
            try:
                await sub.unsubscribe()
            except Exception:  # noqa: BLE001
                pass
        self._subs.clear()
