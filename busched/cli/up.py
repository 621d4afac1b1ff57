"""`busched up`: everything on one machine — nats-server, the scheduler, a simulated fleet and a demo workload."""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from busched.cli.common import add_log_argument, run_until_signal, setup_logging

log = logging.getLogger("busched.up")


def register(sub: argparse._SubParsersAction) -> None:
    from busched.cli.agent import add_fleet_arguments
    from busched.cli.connection import add_nats_arguments
    from busched.cli.run import add_scheduler_arguments

    p = sub.add_parser("up", help="start nats-server, the scheduler, a simulated fleet and a demo workload",
                       description="Start nats-server (JetStream, data in --data-dir) unless --nats is given, the "
                                   "scheduler, a simulated fleet, and apply a small demo workload, then a small new "
                                   "job every few seconds.  Ctrl-C stops everything.  The state of earlier runs in "
                                   "--data-dir is kept unless --reset.")
    add_nats_arguments(p)
    p.set_defaults(nats=None)  # None: start our own server
    g = p.add_argument_group("local NATS server")
    g.add_argument("--nats-port", type=int, default=4222, help="port of the started nats-server (0: any free port)")
    g.add_argument("--nats-monitor-port", type=int, default=8222,
                   help="monitoring port of the started nats-server (0: any free port, -1: off)")
    g.add_argument("--data-dir", default=".busched",
                   help="JetStream data, log and generated credentials (auth/) directory (default %(default)s)")
    g.add_argument("--reset", action="store_true",
                   help="delete the JetStream state of earlier runs (DATA_DIR/jetstream: their queues, jobs, tasks, "
                        "nodes and records) before starting, for a fresh cluster; the generated credentials "
                        "(DATA_DIR/auth) are kept, so busched commands and agents given them keep working")
    g.add_argument("--insecure", action="store_true",
                   help="run nats-server without authentication (any local process may then write bindings and "
                        "decisions); by default every user has its own generated credentials (docs/bus.md)")
    add_scheduler_arguments(p)
    add_fleet_arguments(p, nodes=4)
    p.set_defaults(duration=15.0)
    d = p.add_argument_group("demo")
    d.add_argument("--no-demo", action="store_true",
                   help="do not apply the demo workload, nor submit the arriving demo jobs")
    d.add_argument("--demo-every", type=float, default=5.0, metavar="SECONDS",
                   help="after the demo workload, submit a small new job (1-3 tasks with durations) every SECONDS "
                        "until stopped, so that there is always something arriving and running; the oldest "
                        "arrivals are deleted again to keep the state small (0: off; default %(default)g)")
    d.add_argument("--exit-after", type=float, default=None, metavar="SECONDS",
                   help="stop by itself after this many seconds (CI); exit 1 if no demo task ever ran")
    add_log_argument(p)
    p.set_defaults(func=cmd_up, log_level="warning")


def demo_cluster(duration: float | None) -> Any:
    from busched.agent import DURATION_KEY
    from busched.api.objects import ClusterSpec, JobSpec, QueueSpec, TaskSpec

    def tasks(job: str, n: int, cpu: str, mem: str, secs: float | None) -> list[TaskSpec]:
        ann = {DURATION_KEY: f"{secs:g}"} if secs else {}
        return [TaskSpec(name=f"{job}-{i}", namespace="demo", job=job, requests={"cpu": cpu, "memory": mem},
                         annotations=dict(ann)) for i in range(n)]

    d = duration or 15.0
    return ClusterSpec(
        queues=[QueueSpec(name="default", weight=1), QueueSpec(name="research", weight=2)],
        jobs=[JobSpec(name="train", namespace="demo", queue="research", min_member=4),
              JobSpec(name="etl", namespace="demo", queue="default", min_member=1),
              JobSpec(name="sweep", namespace="demo", queue="default", min_member=2)],
        tasks=tasks("train", 4, "2", "4Gi", d) + tasks("etl", 3, "1", "1Gi", d / 2) + tasks("sweep", 6, "500m",
                                                                                           "512Mi", d / 3))


class Arrivals:
    """The demo that keeps going: a small new job (gang of 1-3 tasks, each with a duration) every ``every``
    seconds, in alternating queues; the oldest arrivals beyond ``keep`` are deleted again (job and tasks)."""

    def __init__(self, duration: float | None, every: float, keep: int = 12, seed: int | None = None) -> None:
        self.duration = duration or 15.0
        self.every = every
        self.keep = keep
        self.rng = random.Random(seed)
        self.prefix = "job-" + time.strftime("%H%M%S")  # unique per run: no clash with an earlier run's state
        self.n = 0
        self.next_at = time.monotonic() + every
        self.live: list[Any] = []

    def make(self) -> Any:
        from busched.agent import DURATION_KEY
        from busched.api.objects import ClusterSpec, JobSpec, TaskSpec

        self.n += 1
        name = f"{self.prefix}-{self.n}"
        k = self.rng.randint(1, 3)
        secs = self.duration * self.rng.uniform(0.3, 1.0)
        tasks = [TaskSpec(name=f"{name}-{i}", namespace="demo", job=name,
                          requests={"cpu": self.rng.choice(["500m", "1"]), "memory": "1Gi"},
                          annotations={DURATION_KEY: f"{secs:.3g}"}) for i in range(k)]
        queue = ("default", "research")[self.n % 2]
        return ClusterSpec(jobs=[JobSpec(name=name, namespace="demo", queue=queue, min_member=k)], tasks=tasks)

    async def step(self, bus: Any) -> None:
        """Submit when due (and delete the oldest arrival beyond ``keep``); errors are printed, not raised."""
        from busched.bus.apply import apply_cluster

        if time.monotonic() < self.next_at:
            return
        self.next_at = time.monotonic() + self.every
        spec = self.make()
        try:
            _, errors = await apply_cluster(bus, spec)
            self.live.append(spec)
            while len(self.live) > self.keep:
                errors += (await apply_cluster(bus, self.live.pop(0), delete=True))[1]
        except Exception as e:  # noqa: BLE001 - the demo goes on at the next arrival
            errors = [str(e)]
        for err in errors:
            _say(f"demo arrival: error: {err}")


def cmd_up(args: argparse.Namespace) -> int:
    setup_logging(args.log_level)
    from busched.cli.run import lease_shard_problem

    problem = lease_shard_problem(args)
    if problem:
        log.error("%s", problem)
        return 2
    return asyncio.run(run_until_signal(lambda stop: up(args, stop)))


def _say(text: str) -> None:
    print(f"[busched up] {text}", flush=True)


async def up(args: argparse.Namespace, stop: asyncio.Event) -> int:
    from busched.agent import Agent
    from busched.bus import Bus, BusError
    from busched.bus.apply import apply_cluster
    from busched.bus.auth import AuthDir, AuthError, prepare_agent_consumer
    from busched.bus.connect import NatsOptions
    from busched.bus.server import NatsServer, NatsServerError, free_port, port_in_use
    from busched.cli.agent import nodes_from_args
    from busched.cli.connection import options_from_args
    from busched.cli.run import load_scheduler_config, settings_from_args
    from busched.scheduler import Scheduler, overview
    from busched.web.server import parse_listen, start_http

    server = None
    cleanup: list[Any] = []
    t_start = time.monotonic()
    ever_ran = False
    try:
        fleet = nodes_from_args(args)
        secured = False
        if args.nats:
            opts = options_from_args(args, "busched-up")
            sopts = aopts = copts = opts
            _say(f"using NATS at {opts.url}")
            if args.reset:
                _say("--reset ignored: it resets the nats-server busched up starts, not one given with --nats")
        else:
            data = Path(args.data_dir).resolve()
            mon = None if args.nats_monitor_port < 0 else (args.nats_monitor_port or free_port())
            kw: dict[str, Any] = dict(port=args.nats_port, monitor_port=mon, log_file=str(data / "nats-server.log"))
            auth = AuthDir.of_data_dir(data)
            creds: dict[str, Any] = {}
            for what, port in (("client", args.nats_port), ("monitoring", mon)):
                # before --reset: never delete the state of a server that is still running
                if port and port_in_use("127.0.0.1", port):
                    _say(f"cannot start nats-server: its {what} port 127.0.0.1:{port} is already in use (another "
                         f"nats-server or busched up?); stop it, or choose another port with "
                         f"--nats-{'port' if what == 'client' else 'monitor-port'}, or use it with --nats URL")
                    return 1
            js_dir = data / "jetstream"
            if args.reset:
                if js_dir.exists():
                    try:
                        shutil.rmtree(js_dir)
                    except OSError as e:
                        _say(f"cannot reset {js_dir}: {e}")
                        return 1
                    _say(f"--reset: deleted the JetStream state of earlier runs ({js_dir}); credentials kept")
            elif _has_state(js_dir):
                _say(f"{data} holds the JetStream state of an earlier run: its queues, jobs and tasks come back; "
                     f"`busched up --reset` starts fresh")
            try:
                if args.insecure:
                    server = NatsServer(data / "jetstream", **kw)
                else:
                    # generate (or reuse) one user per role; secrets only in 0600 files, never on a command line
                    server = NatsServer(data / "jetstream", config_file=auth.server_config, pid_file=auth.pid_file,
                                        **kw)
                    auth.ensure(url=server.url, agents={args.prefix: [n.name for n in fleet]})
                    creds = {role: auth.get(role) for role in ("scheduler", "cli")}
                    creds["agent"] = auth.get("agent", args.prefix)
                    secured = True
                server.start()
            except (NatsServerError, AuthError, OSError, ValueError) as e:
                server = None
                _say(f"cannot start nats-server: {e}")
                return 1
            _say(f"nats-server {server.url} (JetStream data in {data}, log {data / 'nats-server.log'}"
                 + (f", monitoring http://127.0.0.1:{mon}" if mon else "") + ")")
            if secured:
                def as_(role: str) -> NatsOptions:
                    c = creds[role]
                    return NatsOptions(url=server.url, user=c.user, password=c.password, inbox_prefix=c.inbox_prefix,
                                       name="busched-up")
                sopts, aopts, copts = as_("scheduler"), as_("agent"), as_("cli")
                _say(f"authentication on: users scheduler, cli and agent-{args.prefix}, their credentials in "
                     f"{auth.path} (0600); busched commands run from this directory use them")
            else:
                sopts = aopts = copts = NatsOptions(url=server.url, name="busched-up")
                _say("WARNING: --insecure: nats-server has no authentication; any local process can write "
                     "bindings and decisions")
        try:
            sbus = await Bus.connect(sopts, name="busched-scheduler")
            cleanup.append(sbus)
            abus = await Bus.connect(aopts, name="busched-agent")
            cleanup.append(abus)
        except BusError as e:
            _say(str(e))
            return 1
        sched = Scheduler(sbus, load_scheduler_config(args.config), settings_from_args(args))
        http = None
        if args.http:
            host, port = parse_listen(args.http)
            try:
                http = await start_http(host, port, sched.metrics.registry, ready=lambda: sched.ready,
                                        healthy=lambda: sbus.connected, status=lambda: overview.build(sched),
                                        role=lambda: overview.role(sched))
            except OSError as e:
                _say(f"cannot listen on {args.http}: {e.strerror}; metrics are off")
        await sched.start()
        _say(f"scheduler ready in {sched.catchup_seconds:.2f}s, a cycle as new work settles and every "
             f"{args.period:g}s"
             + (f"; status page {http.url}/, metrics at {http.url}/metrics, health {http.url}/healthz, "
                f"readiness {http.url}/readyz"
                if http else ""))
        sched_task = asyncio.create_task(sched.run_forever())
        if secured:
            # a fleet's agent may not create its own consumer (docs/bus.md, Authentication): make each one here
            for c in auth.credentials():
                if c.role == "agent":
                    try:
                        await prepare_agent_consumer(sbus, c.nodes)
                    except Exception as e:  # noqa: BLE001 - that fleet's agent reports its own failure
                        _say(f"cannot create the decision consumer of agent-{c.name}: {e}")
        agent = Agent(abus, fleet, heartbeat_interval=args.heartbeat, duration=args.duration,
                      check_capacity=not args.no_capacity_check)
        await agent.start()
        _say(f"{len(agent.nodes)} simulated nodes ({args.cpu} cpu, {args.memory} memory each): "
             + ", ".join(agent.nodes))
        cbus = None
        if not args.no_demo:
            demo = demo_cluster(args.duration)
            try:
                cbus = await Bus.connect(copts, name="busched-apply")
            except BusError as e:
                _say(str(e))
                return 1
            cleanup.append(cbus)
            n, errors = await apply_cluster(cbus, demo)
            where = f" --nats {copts.url}" if copts.url != "nats://127.0.0.1:4222" and not secured else ""
            _say(f"applied the demo workload: {n} objects (jobs demo/train, demo/etl, demo/sweep); "
                 f"watch it with `busched get tasks{where}` and `busched events --follow{where}`")
            for err in errors:
                _say(f"error: {err}")
        arrivals = Arrivals(args.duration, args.demo_every) if cbus is not None and args.demo_every > 0 else None
        if arrivals is not None:
            _say(f"a new demo job every {args.demo_every:g}s (demo/{arrivals.prefix}-N; --demo-every, --no-demo)")
        _say("Ctrl-C to stop" if args.exit_after is None else f"stopping by itself after {args.exit_after:g}s")
        last = ""
        deadline = None if args.exit_after is None else t_start + args.exit_after
        while not stop.is_set():
            if arrivals is not None:
                await arrivals.step(cbus)
            timeout = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
            if arrivals is not None:
                timeout = max(0.0, min(timeout, arrivals.next_at - time.monotonic()))
            try:
                await asyncio.wait_for(stop.wait(), timeout)
            except asyncio.TimeoutError:
                pass
            if sched_task.done():
                sched_task.result()
                if sched.election.deposed:  # e.g. the machine slept past the lease: join again as a standby
                    _say("the scheduler lost its lease (paused past it?): joining again as a standby")
                    await sched.stop()
                    cleanup.remove(sbus)  # the deposed scheduler's connection: closed now, not at exit
                    await sbus.close()
                    sbus = await Bus.connect(sopts, name="busched-scheduler")
                    cleanup.append(sbus)
                    sched = Scheduler(sbus, sched.config, sched.settings, metrics=sched.metrics)
                    await sched.start()
                    sched_task = asyncio.create_task(sched.run_forever())
            summary = _summary(sched)
            ever_ran = ever_ran or "Running" in summary or "Succeeded" in summary
            if summary != last:
                _say(summary)
                last = summary
            if deadline is not None and time.monotonic() >= deadline:
                break
        _say("stopping")
        await agent.stop()
        await sched.stop()
        await sched_task
        if http is not None:
            await http.stop()
        if args.exit_after is not None and not args.no_demo and not ever_ran:
            _say("no demo task ever ran")
            return 1
        return 0
    finally:
        for b in cleanup:
            try:
                await b.close()
            except Exception:  # noqa: BLE001
                pass
        if server is not None:
            server.stop()
            _say("nats-server stopped")


def _has_state(js_dir: Path) -> bool:
    try:
        return any(p.is_file() for p in js_dir.rglob("*"))
    except OSError:
        return False


def _summary(sched: Any) -> str:
    tasks: dict[str, int] = {}
    for t in sched.view("tasks"):
        tasks[t["status"]] = tasks.get(t["status"], 0) + 1
    jobs: dict[str, int] = {}
    for j in sched.view("jobs"):
        jobs[j["phase"]] = jobs.get(j["phase"], 0) + 1
    nodes = sum(1 for n in sched.view("nodes") if n["state"] == "alive")
    t = ", ".join(f"{v} {k}" for k, v in sorted(tasks.items())) or "none"
    j = ", ".join(f"{v} {k}" for k, v in sorted(jobs.items())) or "none"
    return f"nodes alive: {nodes}; tasks: {t}; jobs: {j}"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(0)
