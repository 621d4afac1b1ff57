"""failover: does work survive the leader's SIGKILL and then a NATS server's, and how long is the gap?

A NATS cluster of three nats-servers (loopback, every stream three replicas), two schedulers
(`busched run --lease 2 --replicas 3`, the bench's ``--lease`` changes the 2 s; processes of their
own: the first leads, the second is a warm standby) and ``agents`` agent processes serving ``nodes``
simulated nodes between them (16 cpu / 64Gi / 110 pods each).  ``tasks`` single-task jobs (1 cpu /
1Gi, running 2, 2.5 or 3 s by their ``busched.io/duration`` annotation) are applied at once by
`busched apply`; the fleet holds fewer at a time (160 at the defaults: 5,000 tasks, 10 nodes, 2
agents), so they are placed as others finish, for a minute and a half or more.

Once bind decisions for half the tasks have been published, the leader (whichever scheduler's
``/readyz`` says it leads then) is SIGKILLed; once three quarters are bound, the server leading the
state stream is SIGKILLed too.  Then the
bench waits (bounded) until every task has Succeeded in the surviving scheduler's view, and reports:

* ``failover_s``: from the leader's SIGKILL to the arrival of the first bind decision of a later
  epoch (the new leader's: a deposed leader's writes are refused by its epoch);
* ``placed``: tasks Running, Bound or Succeeded in the scheduler's view at the end (``succeeded`` of
  them finished);
* ``lost``: tasks applied that the scheduler no longer knows, or that ended neither placed nor
  Pending (``pending``: still waiting when the settle bound ran out, placeable as the fleet has room;
  ``binding`` of them decided but not yet answered by their node);
* ``double_runs``: tasks two nodes held at one moment, from the agents' heartbeats (`busched.bench.watch`);
* ``overcommitted_nodes``: nodes whose heartbeat said more held (requests) or used than allocatable;
* ``reruns``: tasks the agents held under two attempts one after the other (no node is lost here, so
  each is a task that ran twice, though never at once);
* ``stalled``: "" when the run went through; else why it stopped (no new bind decision for a minute,
  no leader to kill, no bind by a new leader): the figures are then those of where it stopped.

Every wait is bounded and every process (servers, schedulers, agents) is ended at the end, on error
too; an error names the log files (kept when the bench fails).
"""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from busched.api import objects as o
from busched.api.resource import Resource
from busched.bench import cluster as cl
from busched.bench.e2e import _fleet, _requirements  # the same parts: scheduler, agents, a nats-server
from busched.bench.watch import Watch, fetch_tasks

DEFAULTS = {"tasks": 5000, "nodes": 10, "agents": 2, "seed": 0, "lease": 2.0}
NODE: dict[str, str] = {"cpu": "16", "memory": "64Gi", "pods": "110"}
TASK = {"cpu": "1", "memory": "1Gi"}
DURATIONS = (2.0, 2.5, 3.0)  # seconds each task runs on its simulated node, in turn
SCHEDULER = ["--period", "0.2", "--heartbeat-timeout", "3", "--bind-lease", "5", "--backoff", "0.2",
             "--replicas", "3", "--log-level", "info"]  # and --lease (the bench's ``lease``, 2 s by default)
HEARTBEAT = 0.5  # the agents' heartbeat interval
DURATION = "busched.io/duration"
CLI = [sys.executable, "-m", "busched.cli.main"]


def workload(tasks: int, seed: int = 0) -> o.ClusterSpec:
    """``tasks`` single-task jobs in namespace ``bench``, durations from `DURATIONS` in turn (from ``seed``)."""
    jobs, specs = [], []
    for j in range(tasks):
        job, (t,) = cl.gang_job(f"fo{j:05d}", 1, cl.TaskShape(cpu=TASK["cpu"], memory=TASK["memory"]))
        jobs.append(job)
        specs.append(msgspec.structs.replace(
            t, annotations={DURATION: str(DURATIONS[(j + seed) % len(DURATIONS)])}))
    return o.ClusterSpec(queues=[o.QueueSpec(name=cl.QUEUE)], jobs=jobs, tasks=specs)


class _Procs:
    """Child processes, each logging to a file under ``dir``; `close` ends every one still running."""

    def __init__(self, dir: Path) -> None:  # noqa: A002 - the plain name
        self.dir = dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        with open(self.dir / f"{name}.log", "ab") as log:
            p = subprocess.Popen(CLI + args, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        self.procs[name] = p
        return p

    def check(self) -> None:
        """Raise if a process that should run has exited."""
        for name, p in self.procs.items():
            if p.poll() is not None and not name.startswith("killed-"):
                raise RuntimeError(f"{name} exited ({p.returncode}); its log: {self.dir / (name + '.log')}")

    def kill(self, name: str) -> None:
        p = self.procs.pop(name)
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        self.procs["killed-" + name] = p

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)


async def _until(cond: Any, timeout: float, what: str, procs: _Procs, interval: float = 0.05) -> Any:
    """Poll ``cond`` (sync or async) until truthy; RuntimeError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        procs.check()
        v = cond()
        if asyncio.iscoroutine(v):
            v = await v
        if v:
            return v
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g}s waiting for {what} (logs in {procs.dir})")
        await asyncio.sleep(interval)


async def _role(http: aiohttp.ClientSession, port: int) -> str:
    """``leader`` or ``standby`` as the scheduler's /readyz says ("" while it is not ready)."""
    try:
        async with http.get(f"http://127.0.0.1:{port}/readyz") as r:
            text = await r.text()
            return text.partition(": ")[2].split(" ")[0] if r.status == 200 else ""
    except (aiohttp.ClientError, asyncio.TimeoutError):
        return ""


async def _run(tasks: int, nodes: int, agents: int, seed: int, lease: float, root: Path,
               settle: float) -> dict[str, Any]:
    from busched.bus import Bus, StreamSettings
    from busched.bus import subjects as S
    from busched.bus.server import free_port
    from busched.bus.server_cluster import NatsCluster

    nats = NatsCluster(root / "nats", size=3)
    procs = _Procs(root)
    bus = None
    http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2))
    try:
        nats.start(timeout=30)
        bus = await Bus.connect(nats.url, name="bench-failover")
        await bus.ensure_streams(StreamSettings(replicas=3), history=False)
        watch = Watch(Resource.from_list(NODE), Resource.from_list(TASK))
        await watch.start(bus)

        ports = [free_port(), free_port()]

        def scheduler(i: int) -> None:
            procs.start(f"sched{i}", ["run", "--nats", nats.url, "--http", f"127.0.0.1:{ports[i]}", "--lease",
                                      str(lease), *SCHEDULER])

        scheduler(0)  # the first leads; the second starts once it does, a standby
        await _until(lambda: _is(http, ports[0], "leader"), 60, "sched0 leading", procs)
        scheduler(1)
        for i, (prefix, n) in enumerate(_fleet(nodes, agents, prefix="fo")):  # start beside the standby's start
            procs.start(f"agent{i}", ["agent", "--nats", nats.url, "--replicas", "3", "--nodes", str(n),
                                      "--cpu", NODE["cpu"], "--memory", NODE["memory"], "--pods", NODE["pods"],
                                      "--prefix", prefix, "--heartbeat", str(HEARTBEAT), "--log-level", "info"])
        await _until(lambda: _is(http, ports[1], "standby"), 60, "sched1 a ready standby", procs)
        await _until(lambda: len(watch.nodes) >= nodes, 60, f"heartbeats of {nodes} nodes", procs)

        spec = workload(tasks, seed)
        keys = {f"{t.namespace}/{t.name}" for t in spec.tasks}
        path = root / "work.yaml"
        path.write_bytes(msgspec.yaml.encode(spec))
        t_apply = time.monotonic()
        apply = await asyncio.create_subprocess_exec(*CLI, "apply", "-f", str(path), "--nats", nats.url,
                                                     stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(apply.communicate(), 120)
        if apply.returncode != 0:
            raise RuntimeError(f"busched apply failed ({apply.returncode}): {out.decode(errors='replace')[-2000:]}")

        figures: dict[str, Any] = {"failover_s": None, "stalled": ""}
        try:
            await _faults(watch, keys, procs, http, ports, nats, bus, S.STATE_STREAM, figures)
        except StalledError as e:  # the run stopped moving: what it got to is reported, with why
            figures["stalled"] = str(e)
            settle = min(settle, 20.0)

        # settle: until every task has Succeeded in the surviving scheduler's view (bounded)
        view: dict[str, dict[str, Any]] = {}

        async def all_done() -> bool:
            nonlocal view
            try:
                view = await fetch_tasks(bus)
            except Exception:  # noqa: BLE001 - no scheduler answers right now (a NATS server is gone): ask again
                return False
            return all(view.get(k, {}).get("status") == "Succeeded" for k in keys)

        try:
            await _until(all_done, settle, "every task Succeeded", procs, interval=0.5)
        except RuntimeError:
            pass  # reported below as pending or lost
        elapsed = time.monotonic() - t_apply
        status = {k: view.get(k, {}).get("status", "") for k in keys}
        placed = sum(s in ("Running", "Bound", "Succeeded") for s in status.values())
        pending = sum(s in ("Pending", "Binding") for s in status.values())
        return {"placed": placed, "lost": len(keys) - placed - pending, "pending": pending,
                "binding": sum(s == "Binding" for s in status.values()),
                "succeeded": sum(s == "Succeeded" for s in status.values()),
                "double_runs": len(watch.double_runs), "overcommitted_nodes": len(watch.overcommitted),
                **figures, "reruns": sum(len(v) > 1 for v in watch.placements.values()),
                "epochs_with_binds": len(watch.first_bind_of_epoch), "seconds": round(elapsed, 1),
                "heartbeats": watch.heartbeats}
    finally:
        try:
            await http.close()
            procs.close()
            if bus is not None:
                await bus.close()
        finally:
            nats.stop()


class StalledError(RuntimeError):
    """The cluster stopped making progress (no new bind for `IDLE` seconds, or no leader)."""


IDLE = 60.0  # seconds without a new bind decision after which a run is reported stalled


async def _bound(watch: Watch, keys: set[str], target: float, what: str, procs: _Procs) -> int:
    """Until bind decisions for ``target`` of ``keys`` are seen; `StalledError` after `IDLE` s without a new one."""
    last = [len(watch.bound & keys), time.monotonic()]

    def cond() -> bool:
        n = len(watch.bound & keys)
        if n != last[0]:
            last[:] = [n, time.monotonic()]
        elif time.monotonic() - last[1] > IDLE:
            raise StalledError(f"no new bind for {IDLE:g}s at {n} of {len(keys)} bound, waiting for {what} "
                          f"(logs in {procs.dir})")
        return n >= target

    await _until(cond, 3600, what, procs)
    return len(watch.bound & keys)


async def _faults(watch: Watch, keys: set[str], procs: _Procs, http: aiohttp.ClientSession, ports: list[int],
                  nats: Any, bus: Any, state_stream: str, figures: dict[str, Any]) -> None:
    """The leader (whichever leads then) SIGKILLed once half the tasks are bound; the NATS server leading the
    state stream SIGKILLed once three quarters are.  Figures go into ``figures`` as they are measured."""
    figures["bound_at_leader_kill"] = await _bound(watch, keys, len(keys) / 2, "half the tasks bound", procs)
    try:
        leader, old_epoch = await _until(lambda: _leader(http, ports), 30, "a leader to kill", procs)
    except RuntimeError as e:
        raise StalledError(str(e)) from None
    figures.update(old_epoch=old_epoch, killed_scheduler=f"sched{leader}",
                   leader_changes_before_kill=len(watch.first_bind_of_epoch) - 1)
    t_kill = time.monotonic()
    procs.kill(f"sched{leader}")
    try:
        await _until(lambda: any(e > old_epoch for e in watch.first_bind_of_epoch), IDLE,
                     "a bind of the new leader", procs)
    except RuntimeError as e:
        raise StalledError(str(e)) from None
    new_epoch = min(e for e in watch.first_bind_of_epoch if e > old_epoch)
    figures.update(new_epoch=new_epoch, failover_s=round(watch.first_bind_of_epoch[new_epoch] - t_kill, 3))

    figures["bound_at_server_kill"] = await _bound(watch, keys, len(keys) * 3 / 4, "three quarters bound", procs)
    info = await bus.js.stream_info(state_stream)
    victim = nats.index_of(info.cluster.leader) if info.cluster and info.cluster.leader else 0
    nats.kill(victim)
    figures["killed_server"] = victim


async def _leader(http: aiohttp.ClientSession, ports: list[int]) -> tuple[int, int] | None:
    """(index, epoch) of the scheduler whose /readyz says it leads, None while none does."""
    for i, port in enumerate(ports):
        try:
            async with http.get(f"http://127.0.0.1:{port}/readyz") as r:
                text = await r.text()
        except (aiohttp.ClientError, asyncio.TimeoutError):
            continue
        found = re.search(r": leader \(.*epoch (\d+)\)", text) if r.status == 200 else None
        if found:
            return i, int(found.group(1))
    return None


async def _is(http: aiohttp.ClientSession, port: int, role: str) -> bool:
    return await _role(http, port) == role


def run(tasks: int, nodes: int, agents: int = 2, seed: int = 0, lease: float = 2.0, settle: float = 180.0,
        **_kw: Any) -> dict[str, Any]:
    _requirements()
    root = Path(tempfile.mkdtemp(prefix="busched-failover-"))
    try:
        res = asyncio.run(_run(tasks, nodes, agents, seed, lease, root, settle))
    except BaseException:
        print(f"failover: logs kept in {root}", file=sys.stderr)
        raise
    if not res["stalled"]:  # a stalled run's logs stay for a look (its reason names the directory)
        shutil.rmtree(root, ignore_errors=True)
    return {"workload": "failover", "tasks": tasks, "nodes": nodes, "agents": agents, "servers": 3,
            "schedulers": 2, "lease": lease, **res}

