"""The agent's parts without a server: a node's memories (`busched.agent.node`) and the decision
handling (`busched.agent.decisions.Decider`) over a fake bus, so a change to how decisions are
answered, acknowledged or handed back shows here in milliseconds."""

from __future__ import annotations

import asyncio

from busched.agent import Reject, fleet_nodes
from busched.agent.decisions import Decider
from busched.agent.node import MEMORY_LIMIT, AgentNode
from busched.api.objects import TaskSpec
from busched.api.resource import Resource
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.publish import Ack
from busched.metrics import AgentMetrics


def _node(cpu: str = "4") -> AgentNode:
    spec = fleet_nodes(1, cpu=cpu, memory="8Gi")[0]
    return AgentNode(spec, Resource.from_list(spec.allocatable))


class FakeBus:
    def __init__(self, fail: bool = False) -> None:
        self.published: list[tuple[str, m.Msg]] = []
        self.fail = fail

    async def publish_all(self, items, timeout: float = 10.0):
        items = list(items)
        self.published += [(s, msg) for s, msg, _ in items]
        return [Ack(error="down") if self.fail else Ack(seq=i + 1) for i in range(len(items))]


class FakeDelivery:
    def __init__(self, subject: str, msg: m.Msg, seq: int) -> None:
        self.subject, self.data, self.stream_seq, self.num_delivered = subject, m.encode(msg), seq, 1
        self.acked = self.naked = False

    async def ack(self) -> None:
        self.acked = True

    async def nak(self, delay: float | None = None) -> None:
        self.naked = True


def _decider(node: AgentNode, bus: FakeBus, **kw) -> tuple[Decider, list]:
    history: list = []
    version = iter(range(1, 10**6))
    d = Decider(bus, {node.name: node}, boot="b1", version=lambda: next(version), metrics=AgentMetrics(),
                history=history, finish=lambda n, t: None, on_bind=kw.get("on_bind"), on_evict=None,
                check_capacity=True, duration=None)
    return d, history


def _bind(node: str, name: str, attempt: int, cpu: str = "1", fence: int = 0) -> tuple[str, m.BindDecision]:
    task = TaskSpec(name=name, namespace="t", requests={"cpu": cpu, "memory": "1Gi"})
    return (S.decision_subject(node, "bind", f"t/{name}"),
            m.BindDecision(node=node, attempt=attempt, task=task, fence=fence))


def test_node_memories_are_bounded_and_fences_only_rise():
    n = _node()
    for i in range(MEMORY_LIMIT + 5):
        n.remember(f"t/j-{i}", 1, "Succeeded")
    assert len(n.done) == MEMORY_LIMIT and ("t/j-0", 1) not in n.done
    assert not n.fenced("t/a", 5)
    assert n.fenced("t/a", 4)  # older than one already seen: a deposed writer's
    assert not n.fenced("t/a", 0) and not n.fenced("t/a", 6)
    assert n.fences["t/a"] == 6


def test_a_batch_is_decided_in_order_answered_together_then_acked():
    n = _node(cpu="2")
    bus = FakeBus()
    d, history = _decider(n, bus)
    batch = [FakeDelivery(*_bind(n.name, f"j-{i}", 1), seq=i + 1) for i in range(3)]
    asyncio.run(d.handle_batch(batch))
    # two fit, the third is refused for want of room (the first two count against the node)
    assert [type(msg).__name__ for _, msg in bus.published] == ["TaskPhaseChanged", "TaskPhaseChanged",
                                                                "BindRejected"]
    assert all(x.acked for x in batch)
    assert set(n.tasks) == {"t/j-0", "t/j-1"} and n.through_seq == 3
    assert [h[0] for h in history] == ["bind", "bind", "reject"]
    # a redelivery of an answered attempt is acknowledged without a new answer
    again = FakeDelivery(*_bind(n.name, "j-2", 1), seq=4)
    asyncio.run(d.handle_batch([again]))
    assert again.acked and len(bus.published) == 3


def test_an_answer_not_stored_is_rolled_back_and_handed_back():
    n = _node()
    d, history = _decider(n, FakeBus(fail=True), on_bind=lambda node, b: None)
    x = FakeDelivery(*_bind(n.name, "j-0", 1), seq=1)
    asyncio.run(d.handle_batch([x]))
    assert x.naked and not x.acked and n.tasks == {} and history == []


def test_on_bind_may_refuse():
    def refuse(node: str, b: m.BindDecision) -> None:
        raise Reject("no")

    n = _node()
    bus = FakeBus()
    d, history = _decider(n, bus, on_bind=refuse)
    asyncio.run(d.handle_batch([FakeDelivery(*_bind(n.name, "j-0", 1), seq=1)]))
    assert isinstance(bus.published[0][1], m.BindRejected) and bus.published[0][1].reason == "no"
    assert n.done[("t/j-0", 1)] == "rejected"


def test_a_bind_the_agent_cannot_read_is_rejected_naming_why_not_left_unanswered():
    import msgspec

    n = _node()
    bus = FakeBus()
    d, _ = _decider(n, bus)
    subject, bind = _bind(n.name, "new", 2)
    raw = msgspec.json.decode(m.encode(bind))
    raw["task"]["gpuTopology"] = {"ring": 8}  # a field of a newer scheduler's task spec
    unreadable = FakeDelivery(subject, bind, seq=1)
    unreadable.data = msgspec.json.encode(raw)
    other = FakeDelivery(subject, m.EvictDecision(namespace="t", name="x", node="elsewhere", attempt=1), seq=2)
    other.data = b"{not json"
    asyncio.run(d.handle_batch([unreadable, other]))
    assert unreadable.acked and other.acked
    assert len(bus.published) == 1  # the garbage names no bind: only logged
    subj, msg = bus.published[0]
    assert subj == S.result_subject(n.name, "t/new") and isinstance(msg, m.BindRejected)
    assert (msg.namespace, msg.name, msg.attempt, msg.boot) == ("t", "new", 2, "b1")
    assert "cannot read the bind" in msg.reason and "gpuTopology" in msg.reason


def test_epochs_are_compared_within_a_shard_only():
    """Two shards' leaders write at once, each with its own lease's epoch: a decision of shard a's epoch 1 is
    not a deposed writer's because shard b's leader is at epoch 3; within one shard, an older epoch is."""
    n = _node()
    assert not n.fenced("t/x", 0, 3, "b")
    assert not n.fenced("t/y", 0, 1, "a")  # another shard's epoch: not fenced
    assert not n.fenced("t/z", 0, 1)  # the default shard's likewise
    assert n.fenced("t/w", 0, 2, "b")  # shard b's own older epoch is
    assert not n.fenced("t/w", 0, 3, "b")


class GatedBus(FakeBus):
    """Its answers are acknowledged only once ``gate`` is set (the stream is slow to answer)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def publish_all(self, items, timeout: float = 10.0):
        items = list(items)
        self.published += [(s, msg) for s, msg, _ in items]
        await self.gate.wait()
        return [Ack(seq=i + 1) for i in range(len(items))]


def test_an_agent_decides_its_next_batch_while_the_answers_of_the_last_are_on_their_way(monkeypatch):
    from busched.agent import Agent
    from busched.agent import agent as agent_mod

    monkeypatch.setattr(agent_mod, "ANSWER_WINDOW", 2)

    async def main() -> None:
        bus = GatedBus()
        a = Agent(bus, fleet_nodes(1, cpu="2", memory="8Gi"))  # type: ignore[arg-type]
        name = next(iter(a.nodes))
        first = [FakeDelivery(*_bind(name, "j-0", 1), seq=1)]
        await a._handle_batch(first)  # decided; its answer not yet stored
        assert "t/j-0" in a.nodes[name].tasks and not first[0].acked
        second = [FakeDelivery(*_bind(name, "j-1", 1), seq=2), FakeDelivery(*_bind(name, "j-2", 1), seq=3)]
        waiting = asyncio.create_task(a._handle_batch(second))  # two batches in flight: it waits for the first
        for _ in range(5):
            await asyncio.sleep(0)
        # decided with j-0 counted against the node (2 cpu): j-2 is refused, and nothing is acknowledged yet
        assert [type(msg).__name__ for _, msg in bus.published] == ["TaskPhaseChanged", "TaskPhaseChanged",
                                                                    "BindRejected"]
        assert not waiting.done() and not any(d.acked for d in first + second)
        bus.gate.set()
        await waiting
        await asyncio.gather(*a._answering)
        assert all(d.acked for d in first + second)
        assert [h[0] for h in a.history] == ["bind", "bind", "reject"]

    asyncio.run(main())


def test_a_bind_from_an_older_writer_is_answered_rejected_not_run():
    """A deposed leader's bind that reaches the node after the new leader's (a NATS cluster's election delayed
    it): not run, and answered, so the new leader, which holds its record and sees the agent past its
    sequence, does not wait for it for ever (tests/faults/test_nats_cluster.py saw such a task stay Binding)."""
    n = _node()
    bus = FakeBus()
    d, history = _decider(n, bus)
    subj_new, new = _bind(n.name, "new", 1, fence=90)
    new.epoch = 7
    subj_old, old = _bind(n.name, "old", 1, fence=63)
    old.epoch = 1
    first, late = FakeDelivery(subj_new, new, seq=1), FakeDelivery(subj_old, old, seq=2)
    asyncio.run(d.handle_batch([first]))
    asyncio.run(d.handle_batch([late]))
    assert late.acked and "t/old" not in n.tasks and "t/new" in n.tasks
    subj, msg = bus.published[-1]
    assert subj == S.result_subject(n.name, "t/old") and isinstance(msg, m.BindRejected)
    assert (msg.name, msg.attempt, msg.boot) == ("old", 1, "b1") and "older writer" in msg.reason
    again = FakeDelivery(subj_old, old, seq=3)  # a redelivery: answered once
    asyncio.run(d.handle_batch([again]))
    assert again.acked and len(bus.published) == 2
