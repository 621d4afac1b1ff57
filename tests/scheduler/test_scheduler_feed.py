"""The state feed and the effective objects alone (busched.scheduler.events.StateFeed,
busched.scheduler.effective.EffectiveObjects), over a real cache and binding table with a fake bus;
no nats-server and no Scheduler."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from busched.api import objects as o
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.client import Ack
from busched.cache.cache import Cache
from busched.metrics import SchedulerMetrics
from busched.scheduler.bindings import BindingTable
from busched.scheduler.effective import EffectiveObjects
from busched.scheduler.events import StateFeed
from busched.scheduler.records import BACKOFF_GATE, NodeLive, SchedulerSettings


class History:
    """The bus as the feed and the table use it here: every write stored, the history and purges kept."""

    def __init__(self) -> None:
        self.seq = 0
        self.history: dict[str, list[tuple[int, bytes]]] = {}
        self.purged: list[tuple[str, int | None]] = []

    async def subject_history(self, subject: str) -> list[tuple[int, bytes]]:
        return self.history.get(subject, [])

    async def purge_state(self, subject: str, before_seq: int | None = None) -> bool:
        self.purged.append((subject, before_seq))
        return True

    async def publish_all(self, items: Iterable[tuple[Any, ...]]) -> list[Ack]:
        acks = []
        for _ in items:
            self.seq += 1
            acks.append(Ack(seq=self.seq))
        return acks

    async def last_state(self, subject: str) -> tuple[int, bytes] | None:
        return None

    async def last_decision(self, subject: str) -> tuple[int, bytes] | None:
        return None

    async def delete_decision(self, seq: int) -> bool:
        return True

    async def consumer_delivered(self, consumer: str) -> int | None:
        return None


class Parts:
    def __init__(self, **settings: Any) -> None:
        self.now = 10.0
        self.work = 0
        self.bus = History()
        st = SchedulerSettings(**settings)
        self.cache = Cache()
        self.specs: dict[str, dict[str, Any]] = {k: {} for k in m.UPSERTS}
        self.live: dict[str, NodeLive] = {}
        self.pg: dict[str, m.PodGroupStatus] = {}
        self.outbox: dict[str, tuple[m.Msg, str | None]] = {}
        metrics = SchedulerMetrics()

        def new_work() -> None:
            self.work += 1

        self.table = BindingTable(st, lambda: self.now, self.bus, boot="me", metrics=metrics,
                                  next_version=lambda: 1, task_specs=self.specs["task"],
                                  node_specs=self.specs["node"], live=self.live, outbox=self.outbox,
                                  refresh_task=lambda key: self.effective.refresh_task(key), new_work=new_work,
                                  finish_delete=lambda key: self.feed.finish_delete(key),
                                  purge_object=lambda kind, key: self.feed.purge_object(kind, key),
                                  reject=lambda r, k, t: self.feed.reject(r, k, t),
                                  count=lambda k, w: self.feed.count(k, w), ready=lambda: True, journal=self)
        self.effective = EffectiveObjects(st, self.cache, self.specs, table=self.table, live=self.live,
                                          pg_status=self.pg)
        self.feed = StateFeed(st, lambda: self.now, self.bus, cache=self.cache, specs=self.specs, table=self.table,
                              effective=self.effective, live=self.live, pg_status=self.pg, outbox=self.outbox,
                              new_work=new_work, metrics=metrics)
        self.table.caught_up = True

    def put(self, kind: str, msg: m.Msg, key: str, seq: int) -> str:
        return self.feed.handle_state(S.state_subject(kind, key), m.encode(msg), seq)


def queue() -> m.Msg:
    return m.QueueUpsert(version=1, queue=o.QueueSpec(name="q"))


def task(name: str = "a") -> m.Msg:
    return m.TaskUpsert(version=1, task=o.TaskSpec(name=name, namespace="t", job="j"))


def test_specs_are_applied_in_stream_order_and_a_replay_is_stale() -> None:
    p = Parts()
    assert p.put("queue", queue(), "q", 5) == "applied"
    assert p.put("queue", queue(), "q", 5) == "stale"
    assert p.feed.seqs[("queue", "q")] == 5 and p.work == 1
    assert "q" in p.specs["queue"]


def test_bad_messages_are_refused_and_the_object_stays() -> None:
    p = Parts(max_event_bytes=200)
    p.put("queue", queue(), "q", 1)
    subj = S.state_subject("queue", "q")
    assert p.feed.handle_state(subj, b"{not json", 2) == "malformed"
    assert p.feed.handle_state(subj, b"x" * 300, 3) == "oversized"
    assert p.put("queue", m.QueueUpsert(version=1, queue=o.QueueSpec(name="other")), "q", 4) == "mismatch"
    assert p.specs["queue"]["q"].name == "q"
    assert p.feed.refused[("queue", "q")].startswith("mismatch")


def test_a_task_is_effective_once_synced_bound_and_backed_off() -> None:
    p = Parts()
    p.put("task", task(), "t/a", 1)
    rec = m.BindingRecord(version=1, namespace="t", name="a", attempt=1, node="n1", state="binding", writer="x")
    assert p.feed.handle_state(S.binding_subject("t/a"), m.encode(rec), 2) == "applied"
    assert "t/a" in p.effective.dirty_tasks
    p.effective.sync_cache()
    assert not p.effective.dirty_tasks
    eff = p.effective.effective_task("t/a", p.specs["task"]["t/a"])
    assert eff.node == "n1" and p.effective.task_status("t/a") == "Binding"
    p.table.backoff_until["t/a"] = 99.0
    assert BACKOFF_GATE in p.effective.effective_task("t/a", p.specs["task"]["t/a"]).scheduling_gates


def test_a_node_is_ready_only_while_its_agent_is_alive() -> None:
    p = Parts()
    p.put("node", m.NodeUpsert(version=1, node=o.NodeSpec(name="n1", allocatable={"cpu": "4"})), "n1", 1)
    assert p.live["n1"].state == "unknown"
    snap = p.cache.snapshot(memo=False)
    assert [n.name for n in snap.nodes if n.ready] == []
    p.live["n1"].state = "alive"
    p.effective.refresh_node("n1")
    snap = p.cache.snapshot(memo=False)
    assert [n.name for n in snap.nodes if n.ready] == ["n1"]


async def test_a_deleted_object_is_purged_from_the_stream() -> None:
    p = Parts()
    p.put("task", task(), "t/a", 1)
    assert p.put("task", m.TaskDelete(version=2, namespace="t", name="a"), "t/a", 2) == "applied"
    assert "t/a" not in p.specs["task"]
    await p.feed.flush_purges()
    assert (S.state_subject("task", "t/a"), 3) in p.bus.purged and (S.binding_subject("t/a"), None) in p.bus.purged


async def test_a_subject_whose_last_message_was_refused_is_rebuilt_from_its_history() -> None:
    p = Parts()
    p.table.caught_up = False
    subj = S.state_subject("queue", "q")
    p.bus.history[subj] = [(1, m.encode(queue())), (2, b"garbage")]
    p.feed.handle_state_batch([(subj, b"garbage", 2)])
    assert "q" not in p.specs["queue"] and p.feed.rejected_at_catchup == {subj: 2}
    await p.feed.replay_rejected()
    assert "q" in p.specs["queue"]
