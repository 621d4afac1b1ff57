"""`busched explain NS/NAME --cycle N [SOURCE | --nats URL]`: explain on a record (issue 11, item 8).

A live run over a real nats-server is recorded (as tests/replay/test_replay.py records it: the state stream keeps
every message); a task that could not be placed in a recorded cycle (its node too small; kept off its only
node after a refusal) and was placed later is explained on the state before that cycle: the reason code of
that moment, not the current one; before the cycle that placed it, Schedulable; after, Running.  The command
line end to end, over NATS and from a `busched record` file.
"""

from __future__ import annotations

import asyncio
import json

from busched.agent import Reject, fleet_nodes
from busched.api.objects import ClusterSpec, JobSpec, QueueSpec, TaskSpec
from busched.bus.apply import apply_cluster
from busched.cli.get import lookup
from busched.cli.main import main
from busched.replay.explain import explain_cycle
from tests.nats_fixture import held_by_node, wait_until
from tests.replay.test_replay import STREAMS, read_all

KEYS = {"reason", "message", "nodes", "scores", "cycle"}


def job(name: str, cpu: str) -> ClusterSpec:
    return ClusterSpec(jobs=[JobSpec(name=name, namespace="t", min_member=1)],
                       tasks=[TaskSpec(name=f"{name}-0", namespace="t", job=name, requests={"cpu": cpu})])


def running(*agents) -> set[str]:  # noqa: ANN002
    return {k for tasks in held_by_node(*agents).values() for k in tasks}


def binding(records, task: str):  # noqa: ANN001, ANN201
    """The record of the cycle that bound ``task``."""
    return next(r for r in records if any(t == task for t, _ in r.binds))


async def test_node_too_small_then_placed_explained_on_the_record(harness, tmp_path, capsys):
    await harness.scheduler(streams=STREAMS)
    small = await harness.agent(fleet_nodes(2, cpu="4", memory="8Gi"))
    bus = await harness.bus()
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="default")]))
    await apply_cluster(bus, ClusterSpec(jobs=job("a", "3").jobs + job("e", "3").jobs,
                                         tasks=job("a", "3").tasks + job("e", "3").tasks))
    await wait_until(lambda: {"t/a-0", "t/e-0"} <= running(small), what="a and e running")
    # one cpu left on each node (the queue's share has room for b): b fits on neither; c does, and the cycle
    # that binds c is recorded with b waiting
    await apply_cluster(bus, ClusterSpec(jobs=job("b", "2").jobs + job("c", "1").jobs,
                                         tasks=job("b", "2").tasks + job("c", "1").tasks))
    await wait_until(lambda: "t/c-0" in running(small), what="c running")
    big = await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi", prefix="big"))
    await wait_until(lambda: "t/b-0" in running(big), what="b running on the new node")
    await apply_cluster(bus, job("d", "1"))
    await wait_until(lambda: "t/d-0" in running(small, big), what="d running")
    # kept: the scheduler writes its records (results, cycle records) from its running loop after the agents'
    # answers, and nothing public tells when the last of them has landed on the stream
    await asyncio.sleep(0.3)
    state, records = await read_all(bus)
    rc, rb, rd = binding(records, "t/c-0"), binding(records, "t/b-0"), binding(records, "t/d-0")
    assert rc.n < rb.n < rd.n

    then = await explain_cycle(state, records, "t/b-0", str(rc.n))
    assert set(then) >= KEYS and then["cycle"] == rc.n and then["boot"] == rc.boot
    assert then["reason"] == "NodeTooSmall", then
    assert then["message"] == "0/2 nodes are unavailable: 2 Insufficient cpu."
    assert then["nodes"] == {"Insufficient cpu": 2} and then["scores"] == {}
    job_then = await explain_cycle(state, records, "t/b", f"{rc.boot}:{rc.n}")
    assert job_then["reason"] == "NodeTooSmall" and job_then["message"].startswith("task t/b-0: 0/2 nodes")
    before = await explain_cycle(state, records, "t/b-0", str(rb.n))  # the state the cycle that placed it saw
    assert before["reason"] == "Schedulable" and before["message"].startswith("1/3 nodes are available")
    assert list(before["scores"]) == ["big-00"]
    after = await explain_cycle(state, records, "t/b-0", str(rd.n))
    assert after["reason"] in ("Placed", "Running") and after["node"] == "big-00", after
    now = await lookup(bus, "explain", "", "t/b-0", timeout=5)  # the live answer is today's
    assert now["reason"] == "Running" and "cycle" not in now

    # the command line: over NATS, then from a record file
    capsys.readouterr()
    code = await asyncio.to_thread(main, ["explain", "t/b-0", "--cycle", str(rc.n), "--nats", harness.url, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and set(out) >= KEYS and out["reason"] == "NodeTooSmall" and out["cycle"] == rc.n
    f = tmp_path / "run.bsrec"
    assert await asyncio.to_thread(main, ["record", "--nats", harness.url, "--out", str(f),
                                          "--until-idle", "0.3", "--poll", "0.1"]) == 0
    capsys.readouterr()
    code = await asyncio.to_thread(main, ["explain", "t/b-0", str(f), "--cycle", str(rd.n)])
    text = capsys.readouterr().out
    assert code == 0 and text.startswith(f"before cycle {rd.boot}:{rd.n}\n") and "t/b-0" in text
    assert await asyncio.to_thread(main, ["explain", "t/b-0", str(f), "--cycle", "999999"]) == 2
    assert await asyncio.to_thread(main, ["explain", "t/nothing", str(f), "--cycle", str(rc.n)]) == 1
    assert await asyncio.to_thread(main, ["explain", "t/b-0", str(f)]) == 2  # a record needs --cycle


async def test_excluded_after_refusal_on_the_record(harness):
    await harness.scheduler(streams=STREAMS, exclusion_ttl=1.5)
    refusals: list[str] = []

    def on_bind(node, bind):  # noqa: ANN001, ANN202
        if bind.task.name == "x-0" and not refusals:
            refusals.append(node)
            raise Reject("disk full (once)")

    agent = await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi"), on_bind=on_bind)
    bus = await harness.bus()
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="default")]))
    await apply_cluster(bus, job("x", "1"))
    await wait_until(lambda: refusals, what="x refused")
    await apply_cluster(bus, job("y", "1"))  # placed while x is kept off the only node
    await wait_until(lambda: "t/y-0" in running(agent), what="y running")
    await wait_until(lambda: "t/x-0" in running(agent), timeout=10, what="x placed once its exclusion ended")
    await asyncio.sleep(0.3)  # kept: the scheduler's last records land when its loop writes them (as above)
    state, records = await read_all(bus)
    ry, rx = binding(records, "t/y-0"), binding(records, "t/x-0")
    assert "t/x-0" in ry.excl, ry
    then = await explain_cycle(state, records, "t/x-0", str(ry.n))
    assert then["reason"] == "ExcludedAfterRefusal", then
    assert "1 node node-00 refused this task recently" in then["message"]
    later = await explain_cycle(state, records, "t/x-0", str(rx.n))
    assert later["reason"] == "Schedulable", later
