"""Fault 5: poison on the state stream.  Each bad input is published raw twice (on a subject of its own, and on
the subject of a task that is running) beside good work: the good work still runs, each bad input is refused and
counted (busched_state_events_rejected_total), and after a scheduler restart the state is what it was before."""

from __future__ import annotations

import asyncio
import json

import msgspec

from busched.api.objects import TaskSpec
from busched.bus import messages as m
from busched.bus import subjects as S
from tests.faults.cluster import check_invariants, dump, wait_for, workload

NS = "p5"


def _task(name: str, **spec: object) -> dict:
    return {"name": name, "namespace": NS, "job": "bad", "requests": {"cpu": "500m", "memory": "256Mi"}, **spec}


def _upsert(task: dict, version: int = 1) -> bytes:
    return json.dumps({"type": "task.upsert", "version": version, "task": task}).encode()


def not_json(name: str) -> bytes:
    return b"\x00{not json at all" + name.encode()


def bad_affinity(name: str) -> bytes:
    return _upsert(_task(name, affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": "x"}}}))


def negative_cpu(name: str) -> bytes:
    return _upsert(_task(name, requests={"cpu": "-8", "memory": "256Mi"}))


def deep_nesting(name: str) -> bytes:
    deep = "[" * 10_000 + "]" * 10_000
    return (f'{{"type":"task.upsert","version":1,"task":{{"name":"{name}","namespace":"{NS}",'
            f'"affinity":{{"x":{deep}}}}}}}').encode()


POISONS = {
    "not_json": not_json,
    "bad_affinity": bad_affinity,
    "negative_cpu": negative_cpu,
    "deep_nesting": deep_nesting,
}


def rejected_total(sched) -> float:  # noqa: ANN001
    return sched.metric_sum("busched_state_events_rejected_total", kind="task") - \
        sched.metric_sum("busched_state_events_rejected_total", kind="task", reason="stale")


async def _good_cluster(cluster, name: str):  # noqa: ANN001, ANN202
    obs = cluster.observer
    sched = cluster.scheduler()
    a = cluster.agent("pa", 2)
    b = cluster.agent("pb", 2)
    await sched.wait_ready()
    await cluster.wait_nodes(a.node_names + b.node_names)
    await cluster.apply(workload(NS, 8, duration=600))
    await check_invariants(obs)
    return obs, sched


async def _restart_and_compare(cluster, obs, sched, before):  # noqa: ANN001, ANN202
    sched.terminate()
    s2 = cluster.scheduler(name="sched-r")
    await s2.wait_ready()
    after = await check_invariants(obs)
    rows = {k: (v["status"], v.get("node"), v.get("attempt"), tuple(sorted(v.get("requests", {}).items())))
            for k, v in after.items()}
    old = {k: (v["status"], v.get("node"), v.get("attempt"), tuple(sorted(v.get("requests", {}).items())))
           for k, v in before.items()}
    assert rows == old, f"the state differs after a restart:\nbefore {dump(before)}\nafter {dump(after)}"
    return s2


# issue 10: not JSON on a running task's subject (item 4: it must survive a restart), a wrong-shaped affinity
# (item 1), a negative request (item 2), JSON nested 10,000 deep (item 1).  All four go to one cluster (each its
# own subjects and its own running task), so one restart covers them: four clusters of processes cost ~60 s of CI.
async def test_poisons_are_refused_counted_and_survive_a_restart(cluster):  # noqa: ANN001
    obs, sched = await _good_cluster(cluster, "poisons")
    base = await asyncio.to_thread(rejected_total, sched)
    victims = {}
    for i, (poison, make) in enumerate(POISONS.items()):
        own = poison.replace("_", "-")
        running = f"{NS}/j{i:03d}-0"
        victims[poison] = running
        # once on a subject of its own, once on the subject of a running task
        await obs.publish_raw(S.state_subject("task", f"{NS}/bad-{own}"), make(f"bad-{own}"))
        await obs.publish_raw(S.state_subject("task", running), make(f"j{i:03d}-0"))
    # more good work after the poison: still scheduled
    await cluster.apply(workload(NS, 4, duration=600, prefix="after", queue=False), name="after")

    want = 2 * len(POISONS)
    await wait_for(lambda: asyncio.to_thread(lambda: rejected_total(sched) - base >= want), 10,
                   f"{want} poison messages counted as rejected")
    before = await check_invariants(obs)
    for poison, running in victims.items():
        assert f"{NS}/bad-{poison.replace('_', '-')}" not in before, (poison, dump(before))
        assert before[running]["status"] == "Running" and before[running]["attempt"] == 1, (poison, dump(before))
    assert all(before[f"{NS}/after{i:03d}-0"]["status"] == "Running" for i in range(4)), dump(before)
    assert await asyncio.to_thread(rejected_total, sched) - base == want
    assert sched.alive(), sched.tail()

    # a restart catches up from the last message of every subject: the running tasks' are the poisons
    await _restart_and_compare(cluster, obs, sched, before)


async def test_huge_version_then_normal_apply(cluster):  # noqa: ANN001
    """Issue 10 item 3: the stream orders an object's changes; a publisher's version (bounded to 2**63-1, a larger
    one refused and counted) can never hold an object back."""
    obs, sched = await _good_cluster(cluster, "huge_version")
    base = await asyncio.to_thread(rejected_total, sched)
    key = f"{NS}/v-0"
    # a version at the top of int64, with a spec that must not win (too big for any node)
    await obs.publish_raw(S.state_subject("task", key), m.encode(m.TaskUpsert(version=2**63 - 1, task=TaskSpec(
        name="v-0", namespace=NS, job="v", requests={"cpu": "64", "memory": "256Mi"}))))
    # and one past the bound: refused as malformed
    await obs.publish_raw(S.state_subject("task", f"{NS}/v-1"), m.encode(m.TaskUpsert(version=5, task=TaskSpec(
        name="v-1", namespace=NS, job="v"))).replace(b'"version":5', b'"version":18446744073709551621'))
    await asyncio.sleep(0.5)
    # then the object applied normally (wall-clock version): this is the one that must count
    spec = workload(NS, 1, prefix="v", queue=False, duration=600)
    spec = msgspec.structs.replace(spec, tasks=[msgspec.structs.replace(spec.tasks[0], name="v-0", job="v")])
    spec.jobs[0].name = "v"
    await cluster.apply(spec, name="normal")

    before = await check_invariants(obs)
    assert before[key]["requests"] == {"cpu": "500m", "memory": "256Mi"}, dump(before)
    assert before[key]["status"] == "Running", dump(before)
    assert await asyncio.to_thread(rejected_total, sched) - base == 1, "the version past 2**63-1 was not counted"
    await _restart_and_compare(cluster, obs, sched, before)
