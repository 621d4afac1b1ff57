"""`busched queue|job|node ...` over a real nats-server, with a scheduler and agents (issue 14, "Operators")."""

from __future__ import annotations

import asyncio
from typing import Any

from busched.agent import fleet_nodes
from busched.api.objects import ClusterSpec, JobSpec, NodeSpec, QueueSpec, TaskSpec
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.apply import apply_cluster
from busched.bus.edit import read_object
from busched.cli.get import lookup
from busched.cli.main import main
from tests.nats_fixture import assert_no_overcommit, held_by_node, wait_until


async def cli(harness: Any, *argv: str) -> int:
    return await asyncio.to_thread(main, [*argv, "--nats", harness.url])


def job(name: str, n: int, *, queue: str = "default", cpu: str = "1", node: str = "") -> ClusterSpec:
    sel = {"kubernetes.io/hostname": node} if node else {}
    return ClusterSpec(jobs=[JobSpec(name=name, namespace="t", queue=queue, min_member=1)],
                       tasks=[TaskSpec(name=f"{name}-{i}", namespace="t", job=name, requests={"cpu": cpu},
                                       node_selector=sel) for i in range(n)])


def tasks_of(agent: Any, job_name: str) -> dict[str, str]:
    """task -> node for the job's tasks the agent runs."""
    return {t: node for node, held in held_by_node(agent).items() for t in held if t.startswith(f"t/{job_name}-")}


# -- queues ------------------------------------------------------------------------------------------------------------
async def test_queue_create_update_and_refusals(harness, capsys):
    bus = await harness.bus()
    assert await cli(harness, "queue", "create", "q1", "--weight", "3", "--capability", "cpu=4,memory=8Gi") == 0
    q, seq = await read_object(bus, "queue", "q1")
    assert (q.weight, q.capability, q.state, q.reclaimable) == (3, {"cpu": "4", "memory": "8Gi"}, "Open", True)
    assert q.created is not None and seq > 0
    assert await cli(harness, "queue", "create", "q1") == 1
    assert "queue 'q1' already exists" in capsys.readouterr().err
    assert await cli(harness, "queue", "update", "q1", "--weight", "5") == 0
    q, _ = await read_object(bus, "queue", "q1")
    assert (q.weight, q.capability) == (5, {"cpu": "4", "memory": "8Gi"})  # the capability kept
    assert await cli(harness, "queue", "update", "nope", "--weight", "2") == 1
    assert "no queue 'nope'" in capsys.readouterr().err
    assert await cli(harness, "queue", "create", "q2", "--capability", "cpu=lots") == 1  # the scheduler's check
    assert "capability" in capsys.readouterr().err
    assert (await read_object(bus, "queue", "q2"))[0] is None
    # Volcano: an Open queue is not deleted, nor the default queue
    assert await cli(harness, "queue", "delete", "q1") == 1
    assert "only a Closed queue can be deleted" in capsys.readouterr().err
    assert await cli(harness, "queue", "delete", "default") == 1  # the scheduler's built-in one
    assert "the default queue" in capsys.readouterr().err
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="default", state="Closed")]))
    assert await cli(harness, "queue", "delete", "default") == 1  # an applied one, even Closed
    assert "the default queue" in capsys.readouterr().err
    assert await cli(harness, "queue", "close", "q1") == 0
    assert await cli(harness, "queue", "delete", "q1") == 0
    assert (await read_object(bus, "queue", "q1"))[0] is None


async def test_a_concurrent_change_is_not_lost(harness):
    """The conditional write reads again when the queue moved under it: both changes stand."""
    from busched.bus.edit import change_object

    bus = await harness.bus()
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="q", weight=1)]))
    calls: list[int] = []

    def close(q: QueueSpec) -> QueueSpec:
        import msgspec

        calls.append(q.weight)
        return msgspec.structs.replace(q, state="Closed")

    # someone else changes the weight between our read and our write (first call only)
    orig = bus.last_state

    async def read_then_race(subject: str, **kw: Any) -> Any:
        got = await orig(subject, **kw)
        if not calls:
            await apply_cluster(await harness.bus(), ClusterSpec(queues=[QueueSpec(name="q", weight=7)]))
        return got

    bus.last_state = read_then_race
    done = await change_object(bus, "queue", "q", close)
    assert calls == [1, 7]  # lost the condition once, recomputed from the newer spec
    assert (done.spec.weight, done.spec.state) == (7, "Closed")
    q, _ = await read_object(bus, "queue", "q")
    assert (q.weight, q.state) == (7, "Closed")


async def test_close_is_closing_until_the_jobs_finish_then_closed(harness, capsys):
    sched = await harness.scheduler()
    agent = await harness.agent(fleet_nodes(2, cpu="4", memory="8Gi"))
    bus = await harness.bus()
    assert await cli(harness, "queue", "create", "q") == 0
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="default")]))
    await apply_cluster(bus, job("a", 2, queue="q"))
    await wait_until(lambda: len(tasks_of(agent, "a")) == 2, what="job a running")
    assert await cli(harness, "queue", "close", "q") == 0
    await wait_until(lambda: sched.specs["queue"]["q"].state == "Closed", what="the close seen")
    assert (await lookup(bus, "get", "queues", "q"))["state"] == "Closing"
    capsys.readouterr()
    assert await cli(harness, "get", "queues") == 0
    assert [r.split()[2] for r in capsys.readouterr().out.splitlines()[1:] if r.startswith("q ")] == ["Closing"]
    # a closing queue takes no new work, and its running job goes on
    await apply_cluster(bus, job("b", 1, queue="q"))
    await wait_until(lambda: "t/b" in sched.specs["job"], what="job b seen")
    for _ in range(5):
        await sched.run_once(force=True)
    assert tasks_of(agent, "b") == {} and len(tasks_of(agent, "a")) == 2
    assert sched.task_status("t/b-0") == "Pending"
    # delete is refused while the queue has jobs, naming how many
    assert await cli(harness, "queue", "delete", "q") == 1
    assert "queue 'q' has 2 jobs (t/a, t/b)" in capsys.readouterr().err
    # a finishes; b never started (a Pending job of a closed queue is still a job): b deleted, then Closed
    for t, node in tasks_of(agent, "a").items():
        await agent.report_phase(node, t, "Succeeded")
    await wait_until(lambda: sched.task_status("t/a-0") == sched.task_status("t/a-1") == "Succeeded", what="a done")
    assert (await lookup(bus, "get", "queues", "q"))["state"] == "Closing"  # b is not finished
    assert await cli(harness, "job", "delete", "t/b") == 0
    await wait_until(lambda: "t/b" not in sched.specs["job"], what="b gone")
    assert (await lookup(bus, "get", "queues", "q"))["state"] == "Closed"
    assert await cli(harness, "queue", "delete", "q") == 1
    assert "has 1 job (t/a)" in capsys.readouterr().err
    assert await cli(harness, "job", "delete", "t/a") == 0
    assert await cli(harness, "queue", "delete", "q") == 0
    await wait_until(lambda: "q" not in sched.specs["queue"], what="q deleted")


async def test_reopened_queue_places_again(harness):
    sched = await harness.scheduler()
    agent = await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi"))
    bus = await harness.bus()
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="default"), QueueSpec(name="q", state="Closed")]))
    await apply_cluster(bus, job("c", 1, queue="q"))
    await wait_until(lambda: "t/c" in sched.specs["job"], what="job seen")
    for _ in range(3):
        await sched.run_once(force=True)
    assert tasks_of(agent, "c") == {}
    assert await cli(harness, "queue", "open", "q") == 0
    await wait_until(lambda: len(tasks_of(agent, "c")) == 1, what="placed once open")


# -- jobs --------------------------------------------------------------------------------------------------------------
async def test_suspend_evicts_places_nothing_and_resume_places_again(harness, capsys):
    sched = await harness.scheduler()
    agent = await harness.agent(fleet_nodes(2, cpu="4", memory="8Gi"))
    bus = await harness.bus()
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="default")]))
    await apply_cluster(bus, job("s", 3))
    await wait_until(lambda: len(tasks_of(agent, "s")) == 3, what="running")
    attempts = {t: a for held in held_by_node(agent).values() for t, a in held.items()}
    assert await cli(harness, "job", "suspend", "t/s") == 0
    await wait_until(lambda: tasks_of(agent, "s") == {}, what="evicted")
    await wait_until(lambda: all(sched.task_status(f"t/s-{i}") == "Pending" for i in range(3)), what="pending")
    for i in range(3):
        d = await lookup(bus, "describe", "tasks", f"t/s-{i}")
        assert [e["event"] for e in d["events"]][-2:] == ["stop", "release"]
        assert d["events"][-1]["reason"].endswith(": suspended")
    row = await lookup(bus, "get", "jobs", "t/s")
    assert (row["phase"], row["suspended"]) == ("Aborted", True)
    capsys.readouterr()
    assert await cli(harness, "describe", "jobs", "t/s") == 0
    assert "Aborted" in capsys.readouterr().out
    for _ in range(3):
        await sched.run_once(force=True)
    assert tasks_of(agent, "s") == {}  # nothing placed while suspended
    assert await cli(harness, "job", "suspend", "t/nope") == 1
    assert "no job 't/nope'" in capsys.readouterr().err
    assert await cli(harness, "job", "resume", "t/s") == 0
    await wait_until(lambda: len(tasks_of(agent, "s")) == 3, what="placed again")
    again = {t: a for held in held_by_node(agent).values() for t, a in held.items()}
    assert all(again[t] == attempts[t] + 1 for t in attempts)  # new attempts
    assert (await lookup(bus, "get", "jobs", "t/s"))["suspended"] is False


async def test_a_finished_job_suspended_stays_as_it_ended(harness):
    """Volcano's Completed is final: suspending a job whose tasks all ended does not make it Aborted."""
    sched = await harness.scheduler()
    agent = await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi"))
    bus = await harness.bus()
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="default")]))
    await apply_cluster(bus, job("f", 2))
    await wait_until(lambda: len(tasks_of(agent, "f")) == 2, what="running")
    for t, node in tasks_of(agent, "f").items():
        await agent.report_phase(node, t, "Succeeded")
    await wait_until(lambda: all(sched.task_status(f"t/f-{i}") == "Succeeded" for i in range(2)), what="done")
    assert await cli(harness, "job", "suspend", "t/f") == 0
    await wait_until(lambda: sched.specs["job"]["t/f"].suspend, what="the suspend heard")
    row = await lookup(bus, "get", "jobs", "t/f")
    assert row["suspended"] is True and row["phase"] != "Aborted" and row["tasks"] == {"Succeeded": 2}


async def test_suspend_seen_by_a_restarted_scheduler(harness):
    """Suspended while no scheduler ran: the next one stops the live tasks at its first cycle."""
    sched = await harness.scheduler()
    agent = await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi"))
    bus = await harness.bus()
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="default")]))
    await apply_cluster(bus, job("r", 2))
    await wait_until(lambda: len(tasks_of(agent, "r")) == 2, what="running")
    await sched.stop()
    assert await cli(harness, "job", "suspend", "t/r") == 0
    sched2 = await harness.scheduler()
    await wait_until(lambda: tasks_of(agent, "r") == {}, what="evicted by the new scheduler")
    await wait_until(lambda: sched2.task_status("t/r-0") == "Pending", what="pending")


async def test_job_delete_removes_its_tasks_and_stops_them(harness, capsys):
    sched = await harness.scheduler()
    agent = await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi"))
    bus = await harness.bus()
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="default")]))
    await apply_cluster(bus, job("d", 2))
    await apply_cluster(bus, job("keep", 1))
    await wait_until(lambda: len(tasks_of(agent, "d")) == 2 and tasks_of(agent, "keep"), what="running")
    assert await cli(harness, "job", "delete", "t/d") == 0
    assert "job t/d deleted with its 2 tasks" in capsys.readouterr().out
    await wait_until(lambda: tasks_of(agent, "d") == {}, what="stopped")
    await wait_until(lambda: not any(k.startswith("t/d-") for k in sched.specs["task"]), what="tasks gone")
    assert "t/d" not in sched.specs["job"] and "t/keep-0" in sched.specs["task"]
    assert len(tasks_of(agent, "keep")) == 1
    assert await cli(harness, "job", "delete", "t/d") == 1
    assert "no job 't/d'" in capsys.readouterr().err


# -- nodes -------------------------------------------------------------------------------------------------------------
async def test_cordon_survives_an_agent_restart_and_uncordon(harness, capsys):
    sched = await harness.scheduler()
    nodes = fleet_nodes(1, cpu="4", memory="8Gi")
    agent = await harness.agent(nodes)
    bus = await harness.bus()
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="default")]))
    assert await cli(harness, "node", "cordon", "node-00") == 0
    await wait_until(lambda: sched.specs["node"]["node-00"].unschedulable, what="cordon seen")
    await agent.stop()
    agent = await harness.agent(nodes)  # registers node-00 again, from its own spec (schedulable)
    spec, _ = await read_object(bus, "node", "node-00")
    assert spec.unschedulable  # kept
    await apply_cluster(bus, job("x", 1))
    await wait_until(lambda: "t/x-0" in sched.specs["task"], what="task seen")
    for _ in range(3):
        await sched.run_once(force=True)
    assert tasks_of(agent, "x") == {}
    assert (await lookup(bus, "get", "nodes", "node-00"))["unschedulable"] is True
    capsys.readouterr()
    assert await cli(harness, "get", "nodes") == 0
    assert "alive,SchedulingDisabled" in capsys.readouterr().out.splitlines()[1]
    assert await cli(harness, "node", "uncordon", "node-00") == 0
    await wait_until(lambda: len(tasks_of(agent, "x")) == 1, what="placed once uncordoned")


async def test_registration_reads_a_cordon_written_meanwhile(harness):
    """The agent's write is conditional: a cordon landing between its read and its write is read again."""
    from busched.bus.edit import register_nodes

    bus = await harness.bus()
    await bus.ensure_streams()
    node = NodeSpec(name="n1", allocatable={"cpu": "1"})
    assert await register_nodes(bus, [node]) == []
    orig = bus.last_state
    raced: list[bool] = []

    async def read_then_cordon(subject: str, **kw: Any) -> Any:
        got = await orig(subject, **kw)
        if not raced:
            raced.append(True)
            other = await harness.bus()
            await other.publish(subject, m.NodeUpsert(node=NodeSpec(name="n1", allocatable={"cpu": "1"},
                                                                    unschedulable=True)))
        return got

    bus.last_state = read_then_cordon
    assert await register_nodes(bus, [node]) == []
    spec, _ = await read_object(bus, "node", "n1")
    assert spec.unschedulable


async def test_drain_moves_tasks_elsewhere_without_overcommit(harness, capsys):
    sched = await harness.scheduler()
    agent = await harness.agent(fleet_nodes(2, cpu="3", memory="8Gi"))
    bus = await harness.bus()
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="default")]))
    await apply_cluster(bus, job("w", 3, node="node-00"))  # pinned first, to fill node-00
    await wait_until(lambda: len(tasks_of(agent, "w")) == 3, what="on node-00")
    # unpin them: the drain must move them to node-01 (3 cpu there, exactly room for them)
    await apply_cluster(bus, job("w", 3))
    await wait_until(lambda: not sched.specs["task"]["t/w-0"].node_selector, what="unpinned seen")
    assert await cli(harness, "node", "drain", "node-00", "--wait", "--timeout", "20") == 0
    out = capsys.readouterr().out
    assert "evicting 3 tasks" in out and "node node-00 drained" in out
    await wait_until(lambda: set(tasks_of(agent, "w").values()) == {"node-01"} and len(tasks_of(agent, "w")) == 3,
                     what="moved to node-01")
    assert_no_overcommit(agent)
    assert held_by_node(agent)["node-00"] == {}
    assert (await lookup(bus, "get", "nodes", "node-00"))["unschedulable"] is True
    d = await lookup(bus, "describe", "tasks", "t/w-0")
    assert any(e["event"] == "release" and e["reason"].endswith(": drain") for e in d["events"])


async def test_drain_is_refused_for_a_node_not_cordoned_and_a_bad_request(harness):
    await harness.scheduler()
    await harness.agent(fleet_nodes(1, cpu="1", memory="1Gi"))
    bus = await harness.bus()
    reply = m.decode(await bus.request(S.API_DRAIN, m.DrainRequest(node="node-00")))
    assert "is not cordoned" in reply.error
    reply = m.decode(await bus.request(S.API_DRAIN, m.DrainRequest(node="nope")))
    assert reply.error == "no node 'nope'"
    reply = m.decode(await bus.request(S.API_DRAIN, b'{"type":"drain","node":""}'))
    assert reply.error.startswith("bad request") and "node" in reply.error
    reply = m.decode(await bus.request(S.API_DRAIN, m.GetRequest(kind="nodes")))
    assert "expected a drain request" in reply.error
    assert await cli(harness, "node", "cordon", "nope") == 1


async def test_apply_warns_about_a_job_in_a_closed_queue(harness, tmp_path, capsys):
    """Volcano's admission refuses a new job in a queue that is not Open; apply says so (and publishes)."""
    bus = await harness.bus()
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="shut", state="Closed"), QueueSpec(name="open")]))
    f = tmp_path / "jobs.yaml"
    f.write_text("jobs:\n- {name: a, namespace: t, queue: shut}\n- {name: b, namespace: t, queue: open}\n"
                 "- {name: c, namespace: t, queue: mine}\nqueues:\n- {name: mine, state: Closed}\n")
    assert await cli(harness, "apply", "-f", str(f)) == 0
    err = capsys.readouterr().err
    assert "job t/a names queue shut, which is Closed" in err and "job t/c names queue mine, which is Closed" in err
    assert "t/b" not in err
    assert (await read_object(bus, "job", "t/a"))[0] is not None  # published all the same
