"""restart: how long from a scheduler (re)start to its first bind, with a big cluster already running?

5,000 nodes (32 cpu / 256Gi / 110 pods) and 140,000 running tasks (1 cpu /
4Gi) in 87,000 jobs (jobs of two and of one task, spread over the nodes) are
already known; one new single-task job waits.  That is the size at which
Volcano users report eight minutes from restart to first bind.

Two paths, each timed from a cold start to the first bind decision:

* ``first_bind_s_in_process``: the state read from its serialized form (JSON,
  as it would be stored), loaded into a fresh `Cache`, then one cycle until
  allocate has made the first bind;
* ``first_bind_s_bus`` (when busched.bus is there and a nats-server can be
  started): every object is first published to the state stream of a real
  NATS server (not timed); then a fresh `Scheduler` starts, catches up with
  the stream (``catchup_s``) and runs cycles until one publishes a bind.

``first_bind_s`` is the bus figure when it ran, else the in-process one.

Through the bus, the state is published, a checkpoint of it written (`busched.scheduler.checkpoint`:
``checkpoint_write_s``, ``checkpoint_bytes``) and ``TAIL`` more events published after it, as a scheduler
that ran before would have left it.  A scheduler that reads the whole stream catches up first
(``catchup_s_full``, its peak RSS then ``peak_rss_mb_catchup_full``); then the timed one starts from the
checkpoint and the tail (``first_bind_s``, ``catchup_s``, ``peak_rss_mb_catchup``, and ``peak_rss_mb`` after
its first cycle).  Each runs in a fresh process, as a restarted
scheduler does: its peak RSS is its own.  Where the timed start's time goes: ``catchup_cpu_s`` (the
process's CPU to the end of the catch-up; steadier than wall time on a shared machine),
``restore_read_s`` (fetching and decoding the checkpoint, reading the tail) and ``restore_apply_s``,
``first_cycle_stages_s`` (each stage of the binding cycle: prepare, snapshot, actions, of which ``open``
and each action, publish) and ``first_bind_cpu_s`` (the CPU to the binds' publishing).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import multiprocessing
import tempfile
import threading
import time
from typing import Any

import msgspec

from busched.api import objects as o
from busched.bench import cluster as cl
from busched.bench.driver import bench_config, rss_mb, timed_cycle
from busched.cache.cache import Cache
from busched.framework.config import DEFAULT_CONFIG
from busched.framework.cycle import paused_gc

DEFAULTS = {"nodes": 5000, "tasks": 140000, "jobs": 87000, "seed": 0}
TAIL = 2000  # state events published after the checkpoint


def build(nodes: int, tasks: int, jobs: int) -> o.ClusterSpec:
    """``jobs`` running jobs holding ``tasks`` tasks (jobs of two first, then of one), plus one pending job."""
    node_specs = cl.nodes(nodes)
    names = [n.name for n in node_specs]
    jobs = max(1, min(jobs, tasks))
    pairs = max(0, min(tasks - jobs, jobs))
    job_specs: list[o.JobSpec] = []
    task_specs: list[o.TaskSpec] = []
    k = 0
    for j in range(jobs):
        size = 2 if j < pairs else 1
        where = [names[(k + i) % len(names)] for i in range(size)]
        k += size
        job, ts = cl.gang_job(f"run{j:06d}", size, phase="Running", placed_on=where, min_member=1)
        job_specs.append(job)
        task_specs.extend(ts)
    job, ts = cl.gang_job("new", 1)
    job_specs.append(job)
    task_specs.extend(ts)
    return o.ClusterSpec(nodes=node_specs, tasks=task_specs, jobs=job_specs, queues=[o.QueueSpec(name=cl.QUEUE)])


def in_process(blob: bytes, config: Any, seed: int) -> dict[str, Any]:
    first: list[float] = []
    t0 = time.perf_counter()
    with paused_gc():  # a bulk load builds millions of objects: no collector passes over them meanwhile
        spec = msgspec.json.decode(blob, type=o.ClusterSpec)
        cache = Cache()
        cache.load(spec)
        # as Scheduler.start does after a big catch-up: what the load built lives as long as the
        # scheduler, so it is frozen out of later collections instead of re-enabling the collector
        # on millions of young objects (a full pass over them, ~1.7 s, before the first cycle)
        gc.freeze()
    loaded = time.perf_counter() - t0
    _, timing = timed_cycle(cache, config, seed=seed, on_decision=lambda ssn: first.append(time.perf_counter()))
    gc.unfreeze()  # this process goes on (the bus run): the load's objects are collectable again
    return {"first_bind_s": round((first[0] if first else time.perf_counter()) - t0, 3),
            "load_s": round(loaded, 3), "phases_ms": timing.ms(), "bound": bool(first)}


def bus_available() -> str:
    """Why the bus path cannot run here ("" when it can)."""
    try:
        from busched.bus.server import find_nats_server
        from busched.scheduler import Scheduler  # noqa: F401

        find_nats_server()
    except Exception as e:  # noqa: BLE001 - any missing piece means: not available
        return f"{type(e).__name__}: {e}"
    return ""


async def _through_bus(spec: o.ClusterSpec, config_name: str, seed: int, store: str) -> dict[str, Any]:
    from busched.bus.apply import cluster_events
    from busched.bus.client import Bus
    from busched.bus.server import NatsServer
    from busched.scheduler.checkpoint import CheckpointSettings
    from busched.scheduler.checkpoint_writer import CheckpointWriter

    # a restarted scheduler is a fresh process: collect what the in-process run left behind first (else the
    # scheduler's freeze after its catch-up would keep that garbage for good)
    gc.collect()
    srv = NatsServer(store, host="127.0.0.1", port=0)
    srv.start(timeout=20)
    try:
        pub = await Bus.connect(srv.url)
        await pub.ensure_streams()
        events = cluster_events(spec)
        n_events = len(events)
        t_pub = time.perf_counter()
        cut = max(0, len(events) - TAIL)
        for i in range(0, cut, 2000):
            await _publish(pub, events[i:min(i + 2000, cut)])
        t_ck = time.perf_counter()
        ck_bytes = await CheckpointWriter(pub, CheckpointSettings(), lambda: True).write_once(force=True)
        ck_s = time.perf_counter() - t_ck
        for i in range(cut, len(events), 2000):
            await _publish(pub, events[i:i + 2000])
        published = time.perf_counter() - t_pub
        await pub.close()
        del events

        # each start in a fresh process, as a restarted scheduler is (its peak RSS its own): A/B in the same run,
        # one that reads the whole stream up to its catch-up only (a bind of its own would leave the other
        # nothing to bind), then the timed one, from the checkpoint and the tail
        full = _in_child(srv.url, config_name, seed, False, False)
        res = _in_child(srv.url, config_name, seed, True, True)
        return {**res, "published_events": n_events, "publish_s": round(published, 3),
                "checkpoint_write_s": round(ck_s, 3), "checkpoint_bytes": ck_bytes,
                "catchup_s_full": full["catchup_s"], "peak_rss_mb_catchup_full": full["peak_rss_mb_catchup"]}
    finally:
        srv.stop()


def _in_child(url: str, config_name: str, seed: int, read: bool, bind: bool) -> dict[str, Any]:
    """`_restart` in a fresh interpreter (spawned: nothing of this process's heap)."""
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        return pool.submit(_child, url, config_name, seed, read, bind).result()


def _child(url: str, config_name: str, seed: int, read: bool, bind: bool) -> dict[str, Any]:
    config, _, _ = bench_config(config_name)
    return asyncio.run(_restart(url, config, seed, read, bind))


def _own_peak_mb() -> float:
    """This process's peak RSS (VmHWM: its own since exec; getrusage's keeps the parent's peak across it)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024.0, 1)
    except OSError:
        pass
    return round(rss_mb(), 1)


async def _restart(url: str, config: Any, seed: int, read: bool, bind: bool) -> dict[str, Any]:
    """A scheduler's start over the stream at ``url`` (from the checkpoint with ``read``), then with ``bind``
    cycles until the first bind decision is seen on the decision subjects."""
    from busched.bus import subjects as S
    from busched.bus.client import Bus
    from busched.scheduler import Scheduler, SchedulerSettings, overview
    from busched.scheduler.checkpoint import CheckpointSettings

    # the first bind decision as an agent would see it, on the decision subjects: from a thread with its
    # own connection and event loop, as an agent has its own process (a watcher on the scheduler's event
    # loop would only hear of it once the scheduler next yields, after closing its session)
    seen: list[float] = []
    watcher = _Watcher(url, f"{S.DECISION_PREFIX}.>", seen)
    watcher.start()
    settings = SchedulerSettings(require_heartbeat=False, cycle_in_thread=False, period=0.0, seed=seed,
                                 checkpoint=CheckpointSettings(read=read))
    t0, c0 = time.perf_counter(), time.process_time()
    bus = await Bus.connect(url)
    sched = Scheduler(bus, config, settings)
    await sched.start(timeout=1800)
    caught_up, caught_up_cpu = time.perf_counter() - t0, time.process_time() - c0
    peak_caught_up = _own_peak_mb()
    cycles = 0
    cycle_done = cycle_cpu = None
    stages: dict[str, float] = {}
    while bind and not seen and cycles < 5:
        report = await sched.run_once()
        cycles += 1
        if report.binds:
            cycle_done = time.perf_counter() - t0
            cycle_cpu = report.stages.pop("cpu", None)  # to the binds' publishing
            # each stage's own seconds (the report has them from the cycle's start)
            last = 0.0
            for name, at in report.stages.items():
                stages[name], last = round(at - last, 3), at
            row = overview.recent(sched)[0]  # of "actions": the session's open, and each action
            stages["open"] = round(row["open"], 3)
            stages.update((f"action_{name}", round(v, 3)) for name, v in row["actions"].items())
            for _ in range(500):  # the watcher hears of it from its own thread: 5 s at most
                if seen:
                    break
                await asyncio.sleep(0.01)
            break
    peak = _own_peak_mb()
    restored = sched.restored
    await sched.stop()
    await bus.close()
    watcher.close()
    first = seen[0] - t0 if seen else None
    return {"first_bind_s": round(first, 3) if first is not None else None, "catchup_s": round(caught_up, 3),
            "first_cycle_done_s": round(cycle_done, 3) if cycle_done is not None else None,
            "cycles": cycles, "peak_rss_mb": peak, "peak_rss_mb_catchup": peak_caught_up,
            "from_checkpoint": restored is not None,
            # where the time went: the catch-up's CPU, the checkpoint's read (fetch, decode, tail) and apply,
            # and the binding cycle's stages (wall) and CPU
            "catchup_cpu_s": round(caught_up_cpu, 3),
            "restore_read_s": round(restored.read_s, 3) if restored is not None else None,
            "restore_apply_s": round(restored.apply_s, 3) if restored is not None else None,
            "first_cycle_stages_s": stages,
            "first_cycle_cpu_s": round(cycle_cpu, 3) if cycle_cpu is not None else None,
            "first_bind_cpu_s": round(caught_up_cpu + cycle_cpu, 3) if cycle_cpu is not None else None}


async def _publish(pub: Any, events: list[Any]) -> None:
    if not events:
        return
    acks = await pub.publish_all(((s, msg, None) for s, msg in events), timeout=120)
    bad = [a.error for a in acks if not a.ok]
    if bad:
        raise RuntimeError(f"publishing the state failed: {bad[0]}")


class _Watcher:
    """Times the first message on ``subject`` from a thread of its own (its own connection and loop)."""

    def __init__(self, url: str, subject: str, seen: list[float]) -> None:
        self.url, self.subject, self.seen = url, subject, seen
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="bench-watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(30) or self._error is not None:
            raise RuntimeError(f"the decision watcher did not start: {self._error}")

    def _run(self) -> None:
        async def main() -> None:
            from busched.bus.client import Bus

            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            bus = await Bus.connect(self.url)
            await bus.subscribe(self.subject, lambda subject, data: self.seen.append(time.perf_counter()))
            await bus.flush()
            self._ready.set()
            await self._stop.wait()
            await bus.close()

        try:
            asyncio.run(main())
        except BaseException as e:  # noqa: BLE001 - reported by start()
            self._error = e
            self._ready.set()

    def close(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


def run(nodes: int, tasks: int, jobs: int, seed: int = 0, config: str = DEFAULT_CONFIG, **_kw: Any) -> dict[str, Any]:
    cfg, missing_p, missing_a = bench_config(config)
    spec = build(nodes, tasks, jobs)
    blob = msgspec.json.encode(spec)
    inproc = in_process(blob, cfg, seed)
    out: dict[str, Any] = {
        "workload": "restart",
        "nodes": nodes,
        "jobs": len(spec.jobs) - 1,
        "tasks": len(spec.tasks) - 1,
        "first_bind_s_in_process": inproc["first_bind_s"],
        "in_process": inproc,
    }
    why = bus_available()
    if why:
        out["bus"] = {"available": False, "reason": why}
        out["first_bind_s"] = inproc["first_bind_s"]
    else:
        with tempfile.TemporaryDirectory(prefix="busched-bench-") as d:
            res = asyncio.run(_through_bus(spec, config, seed, d))
        out["bus"] = {"available": True, **res}
        out["first_bind_s_bus"] = res["first_bind_s"]
        out["peak_rss_mb"] = res["peak_rss_mb"]
        out["first_bind_s"] = res["first_bind_s"] if res["first_bind_s"] is not None else inproc["first_bind_s"]
    out["rss_mb"] = round(rss_mb(), 1)
    out["missing_plugins"] = missing_p
    out["missing_actions"] = missing_a
    return out
