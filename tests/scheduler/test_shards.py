"""Node shards over a real nats-server (issue 13, "Shards"): a scheduler run with ``--shard NAME`` owns the
nodes of that NodeShard, ``hard`` (only them) or ``soft`` (them first); sharded schedulers write their binds
with node ledgers in atomic batches, so two of them placing on one node never over-commit it.

Schedulers and agents run in this process, each on its own connection (tests/faults/test_shards.py runs
two sharded schedulers as separate processes)."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from busched.agent import fleet_nodes
from busched.api.objects import ClusterSpec, JobSpec, NodeShardSpec, PriorityClassSpec, QueueSpec, TaskSpec
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.apply import apply_cluster
from busched.framework.config import load_config
from tests.nats_fixture import assert_no_overcommit, held_by_node, wait_until
from tests.scheduler.test_trust import assert_restart_rebuilds


def work(n: int, *, cpu: str = "1", job: str = "j", ns: str = "t", duration: float | None = None) -> ClusterSpec:
    ann = {"busched.io/duration": f"{duration:g}"} if duration else {}
    return ClusterSpec(queues=[QueueSpec(name="default")], jobs=[JobSpec(name=job, namespace=ns, min_member=1)],
                       tasks=[TaskSpec(name=f"{job}-{i}", namespace=ns, job=job, requests={"cpu": cpu},
                                       annotations=dict(ann)) for i in range(n)])


def placed(*agents: Any) -> dict[str, str]:
    """task -> the node an agent holds it on."""
    return {key: node for node, held in held_by_node(*agents).items() for key in held}


async def test_hard_mode_places_only_on_the_shards_nodes(harness, monkeypatch):
    from busched.scheduler import cycles

    streams: list[object] = []  # a sharded scheduler's binds go out with its ledgers, after the actions: no stream
    real = cycles.BindStream
    monkeypatch.setattr(cycles, "BindStream", lambda *a: streams.append(a) or real(*a))
    bus = await harness.bus()
    own = fleet_nodes(2, cpu="4", prefix="a")
    other = fleet_nodes(2, cpu="4", prefix="b")
    await apply_cluster(bus, ClusterSpec(node_shards=[NodeShardSpec(name="s1", nodes_desired=[n.name for n in own])]))
    sched = await harness.scheduler(shard="s1", shard_mode="hard")
    agents = [await harness.agent(own), await harness.agent(other)]
    await apply_cluster(bus, work(10))  # 10 cpu asked, 8 in the shard
    await wait_until(lambda: len(placed(*agents)) == 8, timeout=15, what="the shard's 8 cpu taken")
    await asyncio.sleep(0.5)  # kept: further cycles run (period 0.05 s) and must still place nothing outside
    where = placed(*agents)
    assert len(where) == 8 and set(where.values()) <= {n.name for n in own}
    pending = [t for t in sched.view("tasks") if t["status"] == "Pending"]
    assert len(pending) == 2
    # its binds went out with the nodes' ledgers: one ledger message per node it placed on
    for n in own:
        last = await bus.last_state(S.ledger_subject(n.name))
        assert last is not None and isinstance(m.decode(last[1]), m.NodeLedger)
    assert await bus.last_state(S.ledger_subject(other[0].name)) is None
    assert not streams


async def test_a_node_shard_by_label_selector_follows_the_nodes_labels(harness):
    bus = await harness.bus()
    own = fleet_nodes(1, cpu="4", prefix="gpu", labels={"pool": "gpu"})
    other = fleet_nodes(1, cpu="4", prefix="cpu", labels={"pool": "cpu"})
    shard = msgspec.convert({"name": "gpus", "nodeSelector": {"matchLabels": {"pool": "gpu"}}}, NodeShardSpec)
    await apply_cluster(bus, ClusterSpec(node_shards=[shard]))
    await harness.scheduler(shard="gpus", shard_mode="hard")
    agents = [await harness.agent(own), await harness.agent(other)]
    await apply_cluster(bus, work(3))
    await wait_until(lambda: len(placed(*agents)) == 3, timeout=15, what="3 tasks placed")
    assert set(placed(*agents).values()) == {own[0].name}


async def test_soft_mode_fills_its_own_nodes_first_then_spills_over(harness):
    bus = await harness.bus()
    own = fleet_nodes(2, cpu="4", prefix="a")
    other = fleet_nodes(2, cpu="4", prefix="b")
    await apply_cluster(bus, ClusterSpec(node_shards=[NodeShardSpec(name="s1", nodes_desired=[n.name for n in own])]))
    await harness.scheduler(shard="s1", shard_mode="soft")
    agents = [await harness.agent(own), await harness.agent(other)]
    await apply_cluster(bus, work(6, job="first"))  # fits in the shard: stays there
    await wait_until(lambda: len(placed(*agents)) == 6, timeout=15, what="6 tasks placed")
    assert set(placed(*agents).values()) <= {n.name for n in own}
    await apply_cluster(bus, work(6, job="more"))  # 2 more fit in the shard, 4 go elsewhere
    await wait_until(lambda: len(placed(*agents)) == 12, timeout=15, what="12 tasks placed")
    where = placed(*agents)
    on_own = sum(1 for node in where.values() if node in {n.name for n in own})
    assert on_own == 8 and len(where) - on_own == 4
    assert_no_overcommit(*agents)


async def test_without_a_shard_no_ledger_is_written(harness):
    bus = await harness.bus()
    nodes = fleet_nodes(2, cpu="4", prefix="a")
    await harness.scheduler()
    agents = [await harness.agent(nodes)]
    await apply_cluster(bus, work(4))
    await wait_until(lambda: len(placed(*agents)) == 4, timeout=15, what="4 tasks placed")
    assert [await bus.last_state(S.ledger_subject(n.name)) for n in nodes] == [None, None]


# the second scheduler orders jobs by creation only (no priority plugin) and spreads (no binpack): the two pick
# different tasks for the same free room, which is where node over-commit comes from without the ledgers
OTHER_ORDER = """
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: gang
    enablePreemptable: false
- plugins:
  - name: predicates
  - name: proportion
  - name: nodeorder
"""


def contended_work() -> ClusterSpec:
    """40 one-cpu tasks of 0.3 s in four jobs (for 16 cpu), the later jobs of a higher priority."""
    cluster = ClusterSpec(queues=[QueueSpec(name="default")],
                          priority_classes=[PriorityClassSpec(name="high", value=100)])
    for j in range(4):
        part = work(10, job=f"g{j}", duration=0.3)
        if j >= 2:
            part.jobs[0].priority_class_name = "high"
        cluster.jobs += part.jobs
        cluster.tasks += part.tasks
    return cluster


async def run_contended(harness: Any, *, ledgers: bool = True) -> tuple[list[str], dict[str, set[str]], Any, Any]:
    """Two soft shards whose nodes are each other's spill-over, agents that do not check capacity themselves
    (so nothing but the schedulers keeps a node within its allocatable), more work than fits at once; until
    every task ran.  Returns the over-commits the agents ever showed, the nodes each task ran on, the
    schedulers."""
    bus = await harness.bus()
    a = fleet_nodes(2, cpu="4", prefix="a")
    b = fleet_nodes(2, cpu="4", prefix="b")
    await apply_cluster(bus, ClusterSpec(node_shards=[NodeShardSpec(name="sa", nodes_desired=[n.name for n in a]),
                                                      NodeShardSpec(name="sb", nodes_desired=[n.name for n in b])]))
    one = await harness.scheduler(shard="sa", shard_mode="soft")
    two = await harness.scheduler(load_config(OTHER_ORDER), shard="sb", shard_mode="soft", period=0.07)
    if not ledgers:
        one.table.ledgers = two.table.ledgers = None
    agents = [await harness.agent(a, check_capacity=False), await harness.agent(b, check_capacity=False)]
    overcommits: list[str] = []
    seen: dict[str, set[str]] = {}

    async def sample() -> None:
        while True:
            try:
                assert_no_overcommit(*agents)
            except AssertionError as e:
                overcommits.append(str(e))
            for key, node in placed(*agents).items():
                seen.setdefault(key, set()).add(node)
            await asyncio.sleep(0.005)  # kept: a sampler over the agents' own state, running beside the test

    sampler = asyncio.create_task(sample())
    try:
        cluster = contended_work()
        await apply_cluster(bus, cluster)
        keys = {f"t/{t.name}" for t in cluster.tasks}

        def done() -> bool:
            ok = {f"{t['namespace']}/{t['name']}" for t in one.view("tasks") if t["status"] == "Succeeded"}
            return keys <= ok

        await wait_until(done, timeout=60, what="every task run to completion")
    finally:
        sampler.cancel()
    return overcommits, seen, one, two


async def test_two_soft_shards_contending_for_the_same_nodes_never_overcommit(harness):
    overcommits, seen, one, two = await run_contended(harness)
    assert not overcommits, overcommits[:3]
    assert all(len(nodes) == 1 for nodes in seen.values()), {k: v for k, v in seen.items() if len(v) > 1}
    assert len(seen) == 40
    # the schedulers met on a node (a batch lost its condition): the ledgers were exercised, not only avoided
    assert one.table.ledgers.lost + two.table.ledgers.lost > 0
    assert sum(s.metrics.publish_errors.labels("node")._value.get() for s in (one, two)) > 0  # counted, by node
    # and what each holds is what the stream says: a scheduler started now rebuilds it exactly
    for s in (one, two):
        await assert_restart_rebuilds(harness, s)


async def test_without_the_ledgers_the_same_contention_overcommits(harness):
    """The control: the same two schedulers writing each record on its own (no node ledger) over-commit a node,
    so the test above can fail."""
    overcommits, _, _, _ = await run_contended(harness, ledgers=False)
    assert overcommits


async def test_a_sharded_schedulers_cycles_replay_identically(harness):
    """Its cycle records carry the shard, so `busched replay` runs each cycle with the same snapshot shard."""
    from busched.bus import history as H
    from busched.bus.client import StreamSettings
    from busched.replay import decode_records, replay

    bus = await harness.bus()
    own = fleet_nodes(1, cpu="4", prefix="a")
    other = fleet_nodes(1, cpu="4", prefix="b")
    await apply_cluster(bus, ClusterSpec(node_shards=[NodeShardSpec(name="s1", nodes_desired=[own[0].name])]))
    sched = await harness.scheduler(shard="s1", shard_mode="soft", purge=False,
                                    streams=StreamSettings(state_history=100_000, storage="memory"))
    agents = [await harness.agent(own), await harness.agent(other)]
    await apply_cluster(bus, work(6, duration=0.2))  # 4 on the shard's node first, 2 spill over
    await wait_until(lambda: all(sched.task_status(k) == "Succeeded" for k in sched.specs["task"]), timeout=20,
                     what="every task run")
    assert len({t for held in held_by_node(*agents).values() for t in held}) == 0
    await asyncio.sleep(0.3)  # kept (as in tests/replay): the last records are written from the running loop
    records = decode_records(d for _, _, d in await H.read_stream(bus, H.HISTORY_STREAM))
    assert {(r.shard, r.shard_mode) for r in records} == {("s1", "soft")}
    res = await replay(await H.read_stream(bus, S.STATE_STREAM), records)
    assert res.cycles == len(records) and sum(len(r.binds) for r in records) == 6
    assert res.different == 0 and res.incomplete == 0, res.as_dict()["diffs"][:3]
