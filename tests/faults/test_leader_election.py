"""Leader election (issue 13): two `busched run` on one bus, exactly one leads; the leader SIGKILLed, paused past
its lease (SIGSTOP, then SIGCONT), or killed mid-cycle (after its binding records, before its decisions; after its
decisions); the standby takes over and the invariants hold after each (README.md)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from busched.bus import Bus
from busched.bus import messages as m
from busched.bus import subjects as S
from tests.faults.cluster import Cluster, Scheduler, check_invariants, wait_for, workload


def role(s: Scheduler) -> str:
    """What its /readyz says: ``leader (shard default, epoch N)`` or ``standby (...)``."""
    status, text = s._get("/readyz")
    return text.partition(": ")[2].strip() if status == 200 else ""


async def roles(*scheds: Scheduler) -> list[str]:
    return [r.split(" ")[0] for r in await asyncio.gather(*(asyncio.to_thread(role, s) for s in scheds))]


async def one_leader(*scheds: Scheduler, timeout: float = 15.0) -> tuple[Scheduler, list[Scheduler]]:
    """Wait until exactly one of ``scheds`` leads and every other is a ready standby."""
    async def settled() -> tuple[Scheduler, list[Scheduler]] | None:
        rs = await roles(*scheds)
        if rs.count("leader") == 1 and rs.count("standby") == len(scheds) - 1:
            i = rs.index("leader")
            return scheds[i], [s for j, s in enumerate(scheds) if j != i]
        return None
    return await wait_for(settled, timeout, "exactly one leader, the others standby")


async def lease_of(bus: Bus, shard: str = "default") -> Any:
    (state,) = [s for s in await bus.read_leases() if s.shard == shard]
    return state.record


class DecisionLog:
    """Every decision published, with its epoch and when it arrived (monotonic)."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, str, int, str]] = []  # (when, kind, epoch, task)

    async def start(self, bus: Bus) -> None:
        await bus.subscribe(f"{S.DECISION_PREFIX}.>", self.on)

    def on(self, subject: str, data: bytes) -> None:
        d = m.decode(data)
        if isinstance(d, m.BindDecision):
            self.seen.append((time.monotonic(), "bind", d.epoch, f"{d.task.namespace}/{d.task.name}"))
        elif isinstance(d, m.EvictDecision):
            self.seen.append((time.monotonic(), "evict", d.epoch, f"{d.namespace}/{d.name}"))


async def start_pair(cluster: Cluster, *, first_extra: list[str] | None = None) -> tuple[Scheduler, Scheduler]:
    """Two schedulers and two agents (4 nodes); the first leads (the second starts once it does)."""
    s1 = cluster.scheduler("s1", extra=first_extra)
    a = cluster.agent("la", 2)
    b = cluster.agent("lb", 2)
    await s1.wait_ready()
    await wait_for(lambda: asyncio.to_thread(lambda: role(s1).startswith("leader")), 15, "s1 leading")
    s2 = cluster.scheduler("s2")
    await s2.wait_ready()
    await cluster.wait_nodes(a.node_names + b.node_names)
    return s1, s2


async def test_one_leader_and_the_standby_takes_over_a_killed_leader(cluster: Cluster) -> None:
    obs = cluster.observer
    s1 = cluster.scheduler("s1")
    s2 = cluster.scheduler("s2")
    a = cluster.agent("la", 2)
    b = cluster.agent("lb", 2)
    await s1.wait_ready()
    await s2.wait_ready()
    await cluster.wait_nodes(a.node_names + b.node_names)
    leader, (standby,) = await one_leader(s1, s2)
    assert leader.metric_sum("busched_leader", shard="default") == 1
    assert standby.metric_sum("busched_leader", shard="default") == 0
    await cluster.apply(workload("le", 8, prefix="early"))
    await check_invariants(obs)
    assert standby.metric_sum("busched_cycles_total") == 0  # a standby runs no cycle
    epoch = (await lease_of(obs.bus)).epoch
    assert leader.metric_sum("busched_leader_epoch", shard="default") == epoch

    await cluster.apply(workload("le", 8, prefix="late"), name="late")
    leader.kill()
    t0 = time.monotonic()
    await wait_for(lambda: asyncio.to_thread(lambda: role(standby).startswith("leader")), 10, "the standby leading")
    failover = time.monotonic() - t0
    assert failover <= 3.0, f"took over {failover:.2f}s after the leader's loss"
    await check_invariants(obs)
    rec = await lease_of(obs.bus)
    assert rec.epoch > epoch
    assert standby.metric_sum("busched_leader_epoch", shard="default") == rec.epoch
    doubled = {k: sorted(v) for k, v in obs.bind_decisions.items() if len(v) != 1}
    assert not doubled, f"tasks bound more than once: {doubled}"


async def test_paused_leader_writes_nothing_after_the_takeover(cluster: Cluster) -> None:
    obs = cluster.observer
    decisions = DecisionLog()
    await decisions.start(obs.bus)
    old, new = await start_pair(cluster)
    await cluster.apply(workload("lp", 6, prefix="before"))
    await check_invariants(obs)
    before = await lease_of(obs.bus)
    old_boot, old_epoch = before.holder, before.epoch

    old.pause()  # past its lease (2 s) while work arrives
    try:
        await cluster.apply(workload("lp", 6, prefix="paused", queue=False), name="paused")
        await wait_for(lambda: asyncio.to_thread(lambda: role(new).startswith("leader")), 10, "the standby leading")
        await wait_for(lambda: sum(1 for k in obs.held() if k.startswith("lp/paused")) == 6, 15,
                       "the work that came during the pause running")
        took_over = await lease_of(obs.bus)
        assert took_over.holder != old_boot and took_over.epoch > old_epoch
    finally:
        old.resume()
    resumed = time.monotonic()
    # it notices its lease lapsed, writes nothing, and joins again as a standby
    await wait_for(lambda: asyncio.to_thread(lambda: role(old).startswith("standby")), 20, "the old leader standby")
    await cluster.apply(workload("lp", 4, prefix="after", queue=False), name="after")
    await check_invariants(obs)

    # nothing of the old epoch reached the decision stream after it woke up
    late = [d for d in decisions.seen if d[0] >= resumed and d[2] <= old_epoch]
    assert not late, f"decisions of the deposed epoch after it resumed: {late}"
    # and no binding record of it follows its successor's epoch on the state stream
    history = await obs.history()
    marker = next(i for i, (subj, data) in enumerate(history)
                  if subj == S.leader_subject("default") and m.decode(data).epoch == took_over.epoch)
    after_marker = [m.decode(data) for subj, data in history[marker + 1:]
                    if subj.startswith(f"{S.STATE_PREFIX}.binding.")]
    stale = [(r.namespace, r.name, r.epoch, r.writer) for r in after_marker
             if isinstance(r, m.BindingRecord) and (r.writer == old_boot or r.epoch < took_over.epoch)]
    assert not stale, f"binding records of the deposed leader after the takeover: {stale}"
    assert after_marker, "the new leader's records are on the stream"
    # its podgroup statuses too: they are written on condition of its epoch's message (the server refuses the old one's)
    assert any(subj.startswith(f"{S.STATE_PREFIX}.podgroup.") for subj, _ in history[marker + 1:])


@pytest.mark.parametrize("point", ["records", "decisions"])
async def test_leader_killed_mid_cycle(cluster: Cluster, point: str) -> None:
    obs = cluster.observer
    old, new = await start_pair(cluster, first_extra=["--debug-exit-at", point])
    before = await lease_of(obs.bus)
    await cluster.apply(workload("lk", 10, prefix="burst"))
    await wait_for(lambda: not old.alive(), 15, f"the leader exiting at {point}")
    assert old.popen.returncode == 70, old.tail()
    await wait_for(lambda: asyncio.to_thread(lambda: role(new).startswith("leader")), 10, "the standby leading")
    view = await check_invariants(obs)
    assert len(view) == 10
    records = await obs.binding_history()
    written_by_old = {k for k, recs in records.items() if any(r.writer == before.holder for r in recs)}
    assert written_by_old, "the old leader wrote its records before it died"
    # a task the old leader recorded keeps its attempt: the new leader sends its decision (records) or finds it
    # sent (decisions), and never binds it again
    doubled = {k: sorted(v) for k, v in obs.bind_decisions.items() if len(v) != 1}
    assert not doubled, f"tasks bound more than once: {doubled}"
    assert all(view[k]["attempt"] == 1 for k in written_by_old), {k: view[k] for k in written_by_old}
