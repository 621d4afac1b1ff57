"""Cycle records and replay (issue 11, items 4-6), over a real nats-server with agents.

A live run (a few hundred tasks over many cycles, a refused bind, a preemption) writes one cycle
record per deciding cycle to the history stream; `busched.replay.replay` rebuilds the cache from the
state stream message by message and re-runs every recorded cycle: with the recorded configuration
every cycle decides what the live one did; with another configuration (binpack) some differ.
`busched record` writes the same to a file that `busched replay FILE` reads.
"""

from __future__ import annotations

import asyncio
import json

from busched.agent import DURATION_KEY, Reject, fleet_nodes
from busched.api.objects import ClusterSpec, JobSpec, PriorityClassSpec, QueueSpec, TaskSpec
from busched.bus import history as H
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.apply import apply_cluster
from busched.bus.client import StreamSettings
from busched.cli.main import main
from busched.framework.config import DEFAULT_CONFIG, load_config
from busched.replay import decode_records, replay
from busched.scheduler import history as Hs
from tests.nats_fixture import held_by_node, wait_until

WITH_PREEMPT = DEFAULT_CONFIG.replace('"enqueue, allocate, backfill"', '"enqueue, allocate, preempt, backfill"')
BINPACK = WITH_PREEMPT.replace("  - name: nodeorder", "  - name: binpack\n    arguments:\n      binpack.weight: 10\n"
                                                     "  - name: nodeorder")
# the state stream must keep every message for an exact replay (docs/bus.md, "History")
STREAMS = StreamSettings(state_history=100_000, storage="memory")


def jobs(prefix: str, n_jobs: int, size: int, pc: str, *, duration: str | None = None) -> ClusterSpec:
    ann = {DURATION_KEY: duration} if duration else {}
    return ClusterSpec(
        jobs=[JobSpec(name=f"{prefix}-{j}", namespace="p", min_member=1, priority_class_name=pc)
              for j in range(n_jobs)],
        tasks=[TaskSpec(name=f"{prefix}-{j}-{i}", namespace="p", job=f"{prefix}-{j}", priority_class_name=pc,
                        requests={"cpu": "1", "memory": "1Gi"}, annotations=ann)
               for j in range(n_jobs) for i in range(size)])


def running(*agents) -> set[str]:  # noqa: ANN002
    return {k for tasks in held_by_node(*agents).values() for k in tasks}


async def live_run(harness) -> tuple[object, object, list]:  # noqa: ANN001, F811
    sched = await harness.scheduler(WITH_PREEMPT, streams=STREAMS)
    refused: list[str] = []

    def on_bind(node, bind):  # noqa: ANN001, ANN202
        key = f"{bind.task.namespace}/{bind.task.name}"
        if key == "p/short-3-1" and not refused:
            refused.append(node)
            raise Reject("disk full (once)")

    agent = await harness.agent(fleet_nodes(6, cpu="16", memory="64Gi"), on_bind=on_bind)
    bus = await harness.bus()
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="default")], priority_classes=[
        PriorityClassSpec(name="low", value=10), PriorityClassSpec(name="high", value=1000)]))
    # 200 short tasks on 96 cpus: several waves as they finish
    await apply_cluster(bus, jobs("short", 40, 5, "low", duration="0.2"))
    await wait_until(lambda: sum(sched.task_status(k) == "Succeeded" for k in sched.specs["task"]) == 200,
                     timeout=60, what="the short tasks done")
    # the cluster full of long low-priority tasks, then a high-priority gang that must preempt
    await apply_cluster(bus, jobs("long", 12, 8, "low"))
    await wait_until(lambda: len(running(agent)) == 96, timeout=30, what="the long tasks fill the cluster")
    await apply_cluster(bus, ClusterSpec(
        jobs=[JobSpec(name="high", namespace="p", min_member=8, priority_class_name="high")],
        tasks=[TaskSpec(name=f"high-{i}", namespace="p", job="high", priority_class_name="high",
                        requests={"cpu": "1", "memory": "1Gi"}) for i in range(8)]))
    await wait_until(lambda: sum(k.startswith("p/high-") for k in running(agent)) == 8, timeout=30,
                     what="high running after preemption")
    # kept: the scheduler writes its records (results, podgroup statuses, cycle records) from its running loop
    # after the agents' answers, and nothing public tells when the last of them has landed on the stream
    await asyncio.sleep(0.3)
    assert refused, "the refused bind happened"
    return sched, bus, agent


async def read_all(bus) -> tuple[list, list]:  # noqa: ANN001
    state = await H.read_stream(bus, S.STATE_STREAM)
    hist = await H.read_stream(bus, H.HISTORY_STREAM)
    return state, decode_records(d for _, _, d in hist)


async def test_live_run_replays_identically_and_a_what_if_differs(harness, tmp_path):
    sched, bus, agent = await live_run(harness)
    state, records = await read_all(bus)
    assert len(records) >= 5
    assert all(r.boot == sched.boot for r in records)
    assert records[0].config and not any(r.config for r in records[1:])
    assert sum(len(r.evicts) for r in records) >= 8, "a preemption was recorded"
    assert any(r.excl for r in records) or any(r.backoff for r in records), "the refusal's inputs were recorded"
    assert sum(len(r.binds) for r in records) >= 300

    res = await replay(state, records)
    out = res.as_dict()
    print(json.dumps({k: v for k, v in out.items() if k != "diffs"}))
    assert res.cycles == len(records)
    assert res.different == 0, out["diffs"][:3]
    assert res.identical == res.cycles and res.incomplete == 0

    other = await replay(state, records, config=load_config(BINPACK))
    assert other.different > 0
    d = other.diffs[0]
    assert {"boot", "cycle"} <= set(d) and ("binds" in d or "evicts" in d or "phases" in d)

    # a range
    sub = await replay(state, records, cycles=f"{records[2].n}..{records[4].n}")
    assert sub.cycles == 3 and sub.identical == 3

    # the command line, from the bus and from a recorded file
    code = await asyncio.to_thread(main, ["replay", "--nats", harness.url, "--json"])
    assert code == 0
    f = tmp_path / "run.bsrec"
    assert await asyncio.to_thread(main, ["record", "--nats", harness.url, "--out", str(f),
                                          "--until-idle", "0.3", "--poll", "0.1"]) == 0
    head = json.loads(f.read_text().splitlines()[0])
    assert head["format"] == "busched-record" and head["version"] == 1
    from busched.replay.file import read_file

    fstate, fhist = read_file(str(f))
    assert [q for _, q, _ in fstate][: len(state)] == [q for _, q, _ in state]
    fres = await replay(fstate, decode_records(fhist))
    assert fres.different == 0 and fres.cycles >= len(records)
    cfg = tmp_path / "binpack.yaml"
    cfg.write_text(BINPACK)
    assert await asyncio.to_thread(main, ["replay", str(f), "--config", str(cfg), "--json"]) == 1


def test_config_round_trips_through_its_canonical_json():
    for text in (DEFAULT_CONFIG, WITH_PREEMPT, BINPACK):
        c = load_config(text)
        j = Hs.config_json(c)
        assert Hs.config_json(Hs.config_from_json(j)) == j
        assert Hs.config_from_json(j) == c
    assert Hs.config_digest(Hs.config_json(load_config(DEFAULT_CONFIG))) != \
        Hs.config_digest(Hs.config_json(load_config(BINPACK)))


def test_cycle_record_is_compact():
    rec = m.CycleRecord(boot="70564e71", n=12, now=1795526935.65, seq=1234, cfg="243d234957d3578f",
                        binds=[("p/short-3-1", "node-02")])
    data = m.encode(rec)
    assert m.decode(data) == rec
    assert b"evicts" not in data and b"unready" not in data  # empty fields are omitted
    assert len(data) < 160


async def test_history_zero_writes_no_records(harness):
    sched = await harness.scheduler(streams=StreamSettings(history_max_age=0, storage="memory"))
    agent = await harness.agent(fleet_nodes(1))
    bus = await harness.bus()
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="default")]))
    await apply_cluster(bus, jobs("j", 1, 2, ""))
    await wait_until(lambda: len(running(agent)) == 2, what="placed")
    assert await H.read_stream(bus, H.HISTORY_STREAM) == []
    assert sched.cycle > 0
