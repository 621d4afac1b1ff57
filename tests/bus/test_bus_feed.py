"""The bus's consumers on a real nats-server: a node's decision feed and a narrowed state watch."""

from __future__ import annotations

import asyncio

from busched.api.objects import TaskSpec
from busched.bus import messages as m
from busched.bus import subjects as S
from tests.nats_fixture import wait_until


def bind(node: str, i: int) -> tuple[str, m.Msg, str]:
    task = TaskSpec(name=f"t{i}", namespace="f", requests={"cpu": "1"})
    return (S.decision_subject(node, "bind", f"f/t{i}"), m.BindDecision(version=i + 1, node=node, attempt=1, task=task),
            f"bind:f/t{i}:1")


async def test_decision_feed_answers_with_what_arrived_without_waiting_for_a_full_batch(harness):
    bus = await harness.bus()
    await bus.ensure_streams()
    feed = await bus.decision_feed("n1")
    assert await feed.fetch(16, timeout=0.2) == []  # nothing yet: the request expires, nothing is returned
    acks = await bus.publish_all([bind("n1", i) for i in range(3)] + [bind("n2", 9)])
    assert all(a.ok for a in acks)
    # three decisions of a batch of 256 arrive: they come back at once, not when the minute is over
    got = await asyncio.wait_for(feed.fetch(256, timeout=60), 20)
    while len(got) < 3:
        got += await asyncio.wait_for(feed.fetch(256, timeout=60), 20)
    assert [d.subject for d in got] == [S.decision_subject("n1", "bind", f"f/t{i}") for i in range(3)]
    assert [d.num_delivered for d in got] == [1, 1, 1]
    assert [d.stream_seq for d in got] == [a.seq for a in acks[:3]]
    for d in got:
        await d.ack()
    # acknowledged: a new feed on the same durable consumer gets nothing again; a later decision it does get
    await feed.stop()
    again = await bus.decision_feed("n1")
    assert await again.fetch(16, timeout=0.3) == []
    await bus.publish_all([bind("n1", 5)])
    later = await asyncio.wait_for(again.fetch(256, timeout=60), 20)
    assert [d.subject for d in later] == [S.decision_subject("n1", "bind", "f/t5")]
    await again.stop()


async def test_unacknowledged_decision_is_delivered_again(harness):
    bus = await harness.bus()
    await bus.ensure_streams()
    feed = await bus.decision_feed("n1", ack_wait=0.5)
    await bus.publish_all([bind("n1", 0)])
    first = await asyncio.wait_for(feed.fetch(8, timeout=30), 20)
    assert len(first) == 1 and first[0].num_delivered == 1
    await first[0].nak()
    second = await asyncio.wait_for(feed.fetch(8, timeout=30), 20)
    assert len(second) == 1 and second[0].num_delivered == 2 and second[0].stream_seq == first[0].stream_seq
    await feed.stop()


async def test_narrowed_watch_follows_only_its_subjects_from_the_next_message(harness):
    bus = await harness.bus()
    await bus.ensure_streams()
    writer = await harness.bus()
    task = S.state_subject("task", "w/a")
    own = S.binding_subject("w/a")
    await writer.publish_all([(own, b"{}", None), (task, b"{}", None)])
    got: list[tuple[str, int]] = []
    w = await bus.watch_state(batch_handler=lambda items: got.extend((s, q) for s, _, q in items))
    await asyncio.wait_for(w.caught_up.wait(), 10)
    assert [s for s, _ in got] == [own, task]  # the catch-up has everything

    async def keep_writing() -> None:
        for i in range(200):
            await writer.publish_all([(S.binding_subject(f"w/b{i}"), b"{}", None),
                                      (S.state_subject("task", f"w/t{i}"), b"{}", None)])

    writing = asyncio.create_task(keep_writing())
    await asyncio.sleep(0)
    follow = [f"{S.STATE_PREFIX}.task.>", f"{S.STATE_PREFIX}.result.>"]
    await w.narrow(follow)
    narrowed_at = len(got)
    await writing
    await wait_until(lambda: any(s == S.state_subject("task", "w/t199") for s, _ in got), what="the last task event")
    # a barrier, not a pause: the watch reads the stream in order, so once a marker published after everything
    # has arrived, anything late (a message twice, or one the narrowing should have left out) has arrived too
    marker = S.result_subject("marker", "w/end")
    await writer.publish_all([(marker, b"{}", None)])
    await wait_until(lambda: any(s == marker for s, _ in got), what="the marker after everything")
    seqs = [q for _, q in got]
    assert len(seqs) == len(set(seqs)) and seqs == sorted(seqs)  # nothing twice, in stream order
    tasks = [s for s, _ in got if ".task." in s]
    assert tasks == [task] + [S.state_subject("task", f"w/t{i}") for i in range(200)]  # nothing missed
    assert all(".binding." not in s for s, _ in got[narrowed_at:])
    assert w.subjects == follow
    await w.stop()


def test_followed_subjects_are_every_kind_results_and_bindings_but_not_podgroup_records():
    # binding records are followed: another scheduler's must not be missed (ours are skipped by sequence); so are
    # node ledgers (a sharded scheduler's view of a node stands on them, busched.scheduler.ledger) and a new
    # leader's epoch (busched.scheduler.election), which fences the records that follow it
    assert set(S.FOLLOWED_KINDS) == set(m.UPSERTS) | {"result", "binding", "ledger", "leader"}
    followed = S.followed_subjects()
    assert S.state_subject("task", "a/b").startswith(followed[S.FOLLOWED_KINDS.index("task")][:-1])
    assert any(S.binding_subject("a/b").startswith(f[:-1]) for f in followed)
    assert not any(S.podgroup_subject("a/b").startswith(f[:-1]) for f in followed)


async def test_an_agent_answers_a_bind_it_starts_at_once_with_running_alone(harness):
    from busched.agent import fleet_nodes
    from busched.api.objects import ClusterSpec, JobSpec, QueueSpec
    from busched.bus.apply import apply_cluster

    bus = await harness.bus()
    await bus.ensure_streams()
    answers: list[m.Msg] = []
    await bus.subscribe(f"{S.STATE_PREFIX}.result.>", lambda s, d: answers.append(m.decode(d)))
    await bus.flush()
    await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi"))
    sched = await harness.scheduler()
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="default")],
                                         jobs=[JobSpec(name="a", namespace="f", min_member=1)],
                                         tasks=[TaskSpec(name="a-0", namespace="f", job="a", requests={"cpu": "1"})]))
    await wait_until(lambda: sched.task_status("f/a-0") == "Running", what="Running")
    await bus.flush()
    assert [(type(a).__name__, getattr(a, "phase", ""), a.attempt) for a in answers] == [
        ("TaskPhaseChanged", "Running", 1)]
    assert sched.metrics.bind_latency._sum.get() > 0  # the bind's answer was timed as before


async def test_a_fleet_agent_keeps_one_consumer_across_restarts_and_a_new_set_replays_nothing(harness):
    from busched.agent import fleet_nodes

    bus = await harness.bus()
    await bus.ensure_streams()
    first = await harness.agent(fleet_nodes(2, cpu="4", memory="8Gi"))
    await first.stop()  # the fleet's consumer stays on the server
    await bus.publish_all([bind("node-01", 1)])  # decided while the agent was away
    again = await harness.agent(fleet_nodes(2, cpu="4", memory="8Gi"))
    await wait_until(lambda: ("bind", "node-01", "f/t1", 1) in again.history, what="the waiting bind taken")
    assert again.running() == {"node-00": {}, "node-01": {"f/t1": 1}}
    await again.stop()
    # another set of nodes is another consumer, which starts from new decisions: node-01's bind, already
    # taken and acknowledged by the first consumer, is not run a second time
    other = await harness.agent(fleet_nodes(3, cpu="4", memory="8Gi"))
    await bus.publish_all([bind("node-02", 2)])
    await wait_until(lambda: ("bind", "node-02", "f/t2", 1) in other.history, what="a new bind taken")
    assert [e for e in other.history if e[0] == "bind"] == [("bind", "node-02", "f/t2", 1)]
    assert S.fleet_consumer(["node-00", "node-01"]) == S.fleet_consumer(["node-01", "node-00"])
    assert S.fleet_consumer(["node-00", "node-01"]) != S.fleet_consumer(["node-00", "node-01", "node-02"])
