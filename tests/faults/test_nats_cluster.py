"""busched on a NATS cluster of three servers (issue 13, "JetStream cluster"): every stream replicated three
times, every process given the three URLs.  Work is placed; then the server that leads the state stream, or
the one the scheduler is connected to, is SIGKILLed while a burst is being placed and half of it finishes:
the clients on it reconnect to the others, JetStream elects new leaders, work goes on and the invariants of
tests/faults hold; the server comes back on its store, catches up and the cluster takes work again."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from busched.bus import Bus, StreamSettings, asks, checkpoints
from busched.bus import lease as lease_mod
from busched.bus import subjects as S
from busched.bus.server_cluster import NatsCluster
from busched.metrics import JETSTREAM_ASKS
from tests.faults.cluster import Cluster, check_invariants, wait_for, workload

SCHEDULER = "busched-scheduler"  # its connection's name, as the servers list it


async def replicas_current(c: Cluster, stream: str) -> Any:
    """The stream's cluster info when its leader and every replica are current, else None."""
    assert c.observer is not None and c.observer.bus is not None
    info = await c.observer.bus.js.stream_info(stream)
    cl = info.cluster
    if cl is None or not cl.leader or len(cl.replicas or []) != c.replicas - 1:
        return None
    return cl if all(p.current and not p.offline for p in cl.replicas or []) else None


async def start_fleet(c: Cluster) -> None:
    """A scheduler and two agents of two nodes each (4 cpu, 8Gi), all alive."""
    sched = c.scheduler(heartbeat_timeout=2.0, bind_lease=3.0)
    a = c.agent("ca", 2)
    b = c.agent("cb", 2)
    await sched.wait_ready()
    await c.wait_nodes(a.node_names + b.node_names)


async def test_work_is_placed_on_a_three_server_cluster_with_replicated_streams(cluster3: Cluster) -> None:
    obs = cluster3.observer
    assert obs is not None and obs.bus is not None
    await start_fleet(cluster3)
    await cluster3.apply(workload("c1", 12, tasks_per_job=2, duration=600))
    view = await check_invariants(obs)
    assert sum(t["status"] == "Running" for t in view.values()) == 24
    for stream in (S.STATE_STREAM, S.DECISION_STREAM):
        info = await obs.bus.js.stream_info(stream)
        assert info.config.num_replicas == 3, f"{stream}: {info.config.num_replicas} replicas"
        await wait_for(lambda s=stream: replicas_current(cluster3, s), 10, f"{stream}'s replicas current")
    # the agents' durable decision consumers inherit the stream's three replicas
    durables = [n async for n in _consumer_names(obs.bus.js, S.DECISION_STREAM)]
    assert durables, "no durable decision consumer"
    for name in durables:
        ci = await obs.bus.js.consumer_info(S.DECISION_STREAM, name)
        assert ci.cluster is not None and len(ci.cluster.replicas or []) == 2, f"{name}: {ci.cluster}"


async def _consumer_names(js: Any, stream: str) -> Any:
    for ci in await js.consumers_info(stream):
        if ci.config.durable_name:
            yield ci.name


@pytest.mark.parametrize("victim", ["state stream leader", "scheduler's server"])
async def test_one_nats_server_killed_mid_run_then_back(cluster3: Cluster, victim: str) -> None:
    obs = cluster3.observer
    assert obs is not None and obs.bus is not None
    nats = cluster3.nats
    assert isinstance(nats, NatsCluster)
    await start_fleet(cluster3)
    await cluster3.apply(workload("k1", 8, duration=600))
    before = await check_invariants(obs)

    leader = (await obs.bus.js.stream_info(S.STATE_STREAM)).cluster.leader
    held = nats.server_of(SCHEDULER)
    assert held is not None, "the scheduler's connection is on no server"
    i = nats.index_of(leader) if victim == "state stream leader" else held
    # the kill lands while the scheduler places a new burst (binds, their records and answers in flight) and
    # while half of it finishes (results reported through the cluster)
    await cluster3.apply(workload("k2", 8, durations=[1.5, 600]), name="burst")
    nats.kill(i)
    if i == held:  # its client reconnects to one of the two others
        await wait_for(lambda: nats.server_of(SCHEDULER) not in (None, i), 10, "the scheduler reconnected")
    # more work while the server is gone: applied through the two others, placed by the same scheduler
    await cluster3.apply(workload("k3", 4, duration=600), name="during")
    during = await check_invariants(obs)
    new_leader = (await obs.bus.js.stream_info(S.STATE_STREAM)).cluster.leader
    assert nats.index_of(new_leader) != i, f"the state stream is still led by the killed {new_leader}"
    moved = {k: (before[k]["node"], before[k]["attempt"], during[k]["node"], during[k]["attempt"])
             for k in before if (during[k]["node"], during[k]["attempt"]) != (before[k]["node"], before[k]["attempt"])}
    assert not moved, f"tasks restarted by the loss of one NATS server: {moved}"
    # the burst's four short tasks finish.  Not at once: when the killed server led the lease bucket's (or the
    # state stream's) raft group, nats-server elects a new leader after 4-9 s, longer than the 2 s lease: the
    # scheduler cannot renew, is deposed, fences its binds and leads again after the election (CI saw 14 s)
    async def short_ones_succeeded() -> bool:
        return sum(t["status"] == "Succeeded" for t in (await obs.tasks()).values()) == 4

    await wait_for(short_ones_succeeded, 30, "the burst's four 1.5 s tasks succeeded")
    during = await check_invariants(obs)
    assert all(len(obs.attempts(k)) == 1 for k in obs.cluster.applied), \
        {k: sorted(obs.attempts(k)) for k in obs.cluster.applied if len(obs.attempts(k)) != 1}

    nats.restart(i)
    for stream in (S.STATE_STREAM, S.DECISION_STREAM):
        await wait_for(lambda s=stream: replicas_current(cluster3, s), 30, f"{stream} caught up on the restarted "
                                                                            "server")
    await cluster3.apply(workload("k4", 4, duration=600), name="after")
    after = await check_invariants(obs)
    assert sum(t["status"] == "Running" for t in after.values()) == 8 + 4 + 4 + 4
    # a bind published while its agent's decision consumer elected a new leader (seconds on this machine) may
    # outlive the 3 s bind lease: it is released and placed again, and must never have run
    released = [(k, r.node, r.attempt) for k, recs in (await obs.binding_history()).items() for r in recs
                if r.state == "released"]
    ran = [(k, node, attempt) for k, node, attempt in released if (node, attempt) in obs.seen_attempts.get(k, set())]
    assert not ran, f"released after running: {ran}"
    assert not {k for k, _, _ in released} & set(before), f"tasks running before the loss released: {released}"


# -- JetStream API requests through a leader election (busched.bus.asks) -----------------------------------------
async def _lead_on(bus: Bus, cluster: NatsCluster, stream: str, server: str) -> bool:
    """Ask ``stream``'s leader to step down in favour of ``server`` (nats-server 2.11+: a preferred placement);
    True once ``server`` leads it."""
    info = await bus.js.stream_info(stream)
    if info.cluster is not None and info.cluster.leader == server:
        return True
    req = json.dumps({"placement": {"preferred": server}}).encode()
    try:
        await bus.nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", req, timeout=2)
    except Exception:  # noqa: BLE001 - asked again by the caller's bounded loop
        pass
    return False


async def test_requests_made_while_the_cluster_elects_are_answered_well_within_the_clients_timeout(
        nats_cluster: NatsCluster) -> None:
    """The JetStream meta leader, which also leads the lease bucket's, the checkpoints' and the state stream's
    raft groups, is SIGKILLed; at once a standby looks at the lease as a scheduler that rejoins does (the bucket
    looked up, its key read), the stored checkpoint is read, a state subject is read by direct get and the state
    stream's extent asked.  The cluster drops the requests while it elects (its followers wait 4-9 s before
    they campaign): asked again (`busched.bus.asks`), every one is answered soon after the election (6-8 s on
    the loaded 2-core test machine), where one request waited nats-py's whole 10 s and failed (the direct get
    failed at once: "no responders")."""
    setup = await Bus.connect(nats_cluster.url)
    try:
        await setup.ensure_streams(StreamSettings(replicas=3), history=False)
        subject = S.state_subject("queue", "q1")
        ack = await setup.publish(subject, b'{"q":1}')
        assert ack.ok, ack.error
        holder = setup.lease(shard="default", holder="leader-a", duration=2.0, clock=time.monotonic, replicas=3)
        assert await holder.step(), "the first scheduler did not get the lease"
        checkpoint = bytes(range(256)) * 1200  # 300 KiB: three chunks
        assert await setup.checkpoint_put("ck", checkpoint, replicas=3)
        victim = nats_cluster.meta_leader()
        assert victim is not None
        streams = [f"KV_{lease_mod.BUCKET}", f"OBJ_{checkpoints.BUCKET}", S.STATE_STREAM]
        for stream in streams:
            await wait_for(lambda s=stream: _lead_on(setup, nats_cluster, s, victim), 15, f"{stream} led by {victim}",
                           interval=0.5)
    finally:
        await setup.close()
    i = nats_cluster.index_of(victim)
    # a client on a server that stays (a reconnection is not what is measured here)
    bus = await Bus.connect(",".join(u for j, u in enumerate(nats_cluster.urls) if j != i))
    try:
        before, _ = JETSTREAM_ASKS.snapshot()
        nats_cluster.kill(i)
        loop = asyncio.get_running_loop()

        async def timed(what: str, op: Any) -> tuple[str, float, Any]:
            t0 = loop.time()
            got = await op
            return what, loop.time() - t0, got

        standby = bus.lease(shard="default", holder="standby-b", duration=2.0, clock=time.monotonic, replicas=3)
        results = await asyncio.wait_for(asyncio.gather(
            timed("lease step", standby.step()),
            timed("checkpoint read", bus.checkpoint_get("ck")),
            timed("direct get", bus.last_state(subject, direct=True)),
            timed("stream info", bus.stream_last_seq(S.STATE_STREAM))), 30)
        after, _ = JETSTREAM_ASKS.snapshot()
        asked_again = {k: n - before.get(k, 0) for k, n in after.items() if n > before.get(k, 0)}
        took = {what: round(t, 2) for what, t, _ in results}
        got = {what: g for what, _, g in results}
        print("took:", took, "unanswered asks:", asked_again)
        assert got["lease step"] is False and standby.current is not None
        assert standby.current.record.holder == "leader-a"
        assert got["checkpoint read"] == checkpoint
        assert got["direct get"] == (ack.seq, b'{"q":1}')
        assert got["stream info"] == ack.seq
        # the election was hit: requests went unanswered, and were asked again rather than waited on for 10 s
        assert sum(n for (_, reason), n in asked_again.items() if reason == "timeout") > 0, asked_again
        # each is within one request's bound; a checkpoint read is three requests in a row (the bucket, the
        # object's meta, a consumer on its chunks), and the one made just after the election can go unanswered
        # once more (CI: the bucket asked 4 times over 8 s, then the consumer once, 10 s in all), so it gets one
        # more ask's time
        bound = {"checkpoint read": asks.ASKING.total_s + asks.ASKING.ask_s}
        assert all(t < bound.get(what, asks.ASKING.total_s) for what, t in took.items()), took
    finally:
        await bus.close()
