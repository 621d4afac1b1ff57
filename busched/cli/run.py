"""`busched run`: the scheduler over NATS, with its status page (/), /metrics, /healthz and /readyz."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from busched.cli.common import add_log_argument, add_replicas_argument, run_until_signal, setup_logging

if TYPE_CHECKING:  # (a command imports what it uses when it runs: a fast `busched --help`)
    from busched.framework.config import SchedulerConfig
    from busched.scheduler import SchedulerSettings

log = logging.getLogger("busched.run")


def add_scheduler_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("scheduler")
    g.add_argument("--config", metavar="FILE", help="scheduler configuration (Volcano's volcano-scheduler.conf "
                                                    "shape); default: the built-in one")
    g.add_argument("--config-check", type=float, default=5.0, metavar="SECONDS",
                   help="how often --config FILE is read again; a changed file applies from the next cycle, one "
                        "that does not load is refused and the previous configuration stays (SIGHUP reads it at "
                        "once, also with 0: no polling) (default %(default)s)")
    g.add_argument("--period", type=float, default=1.0,
                   help="seconds from the end of a cycle to the next when no new work arrives (default %(default)s)")
    g.add_argument("--no-trigger", action="store_true",
                   help="cycle on the period only, not also as soon as new work (objects, finished or refused tasks) "
                        "has settled")
    g.add_argument("--bind-lease", type=float, default=10.0,
                   help="seconds an alive agent has to take a bind before it is stopped and placed again "
                        "(default %(default)s)")
    g.add_argument("--heartbeat-timeout", type=float, default=5.0,
                   help="seconds without a heartbeat before a node is unreachable: no new binds there "
                        "(default %(default)s)")
    g.add_argument("--node-lost-grace", type=float, default=20.0,
                   help="seconds a node stays unreachable before it is lost and its tasks are placed again "
                        "(default %(default)s)")
    g.add_argument("--backoff", type=float, default=1.0,
                   help="first backoff in seconds after a rejected bind, doubling (default %(default)s)")
    g.add_argument("--exclusion", type=float, default=60.0,
                   help="seconds a node that refused a task is not offered it again (default %(default)s)")
    g.add_argument("--max-attempts", type=int, default=10,
                   help="failed binds in a row (refused, never taken) after which a task is Failed; 0: never "
                        "(default %(default)s)")
    g.add_argument("--no-require-heartbeat", action="store_true",
                   help="schedule onto nodes that have no live agent (dry runs)")
    g.add_argument("--max-event-bytes", type=max_event_bytes, default=256 * 1024, metavar="N",
                   help="reject state messages larger than this; at least the room a bind adding annotations (a "
                        "device assignment) needs in its binding record, 4,923 (default %(default)s)")
    g.add_argument("--history", default="7d", metavar="DURATION",
                   help="how long the history streams keep cycle records and a copy of every state message "
                        "(BUSCHED_HISTORY, BUSCHED_STATE_HISTORY: `busched replay --nats`; the copy stores each "
                        "state message once more): 90s, 12h, 7d; 0 keeps none (default %(default)s)")
    g.add_argument("--shard", type=shard_name, default="", metavar="NAME",
                   help="own the nodes of the NodeShard NAME (Volcano's node sharding; apply one with `nodeShards:` "
                        "in a cluster file): this scheduler's binds are then written with node ledgers, so two "
                        "schedulers never over-commit a node (docs/bus.md, Shards; nats-server 2.12+); each shard "
                        "elects its own leader (the lease's key; 'default' without --shard)")
    g.add_argument("--shard-mode", choices=("hard", "soft"), default="hard",
                   help="with --shard: hard places on and evicts from the shard's nodes only; soft tries them "
                        "first and the other nodes when they cannot take a task (default %(default)s)")
    g.add_argument("--checkpoint", type=float, default=300.0, metavar="SECONDS",
                   help="write a checkpoint of the state stream this often (when it has grown by 10,000 messages "
                        "since the last), in the busched_checkpoints object store, so a restart reads only the "
                        "messages after it (docs/bus.md, Checkpoints); 0: write none (default %(default)s)")
    g.add_argument("--lease", type=float, default=2.0, metavar="SECONDS",
                   help="leader election: the lease's length; a scheduler starts as standby (following the state "
                        "stream, no cycles, no writes) and leads once it holds its shard's lease, renewed every "
                        "third of it; a standby takes over when the leader has not renewed for this long; 0: no "
                        "election, lead at once (one scheduler only) (default %(default)s)")
    # test-only (tests/faults): end the process (exit 70) when the leader's first cycle with binds reaches POINT:
    # "records" (binding records stored, decisions not sent) or "decisions" (decisions sent, the cycle not ended)
    g.add_argument("--debug-exit-at", default="", choices=["", "records", "decisions"], help=argparse.SUPPRESS)
    g.add_argument("--http", default="127.0.0.1:8080", metavar="HOST:PORT",
                   help="where the status page (/, /status.json), /metrics, /healthz and /readyz listen "
                        "(default %(default)s; '' to disable)")


def settings_from_args(args: argparse.Namespace) -> SchedulerSettings:
    from busched.bus.client import StreamSettings
    from busched.scheduler import SchedulerSettings
    from busched.scheduler.checkpoint import CheckpointSettings

    streams = StreamSettings(history_max_age=parse_duration(getattr(args, "history", "7d")),
                             replicas=getattr(args, "replicas", 1))  # (`busched up` has one server: no --replicas)
    return SchedulerSettings(streams=streams,
                             period=args.period, trigger=not args.no_trigger, bind_lease=args.bind_lease,
                             heartbeat_timeout=args.heartbeat_timeout, backoff_initial=args.backoff,
                             node_lost_grace=args.node_lost_grace, exclusion_ttl=args.exclusion,
                             max_attempts=args.max_attempts,
                             require_heartbeat=not args.no_require_heartbeat, max_event_bytes=args.max_event_bytes,
                             shard=getattr(args, "shard", ""), shard_mode=getattr(args, "shard_mode", "hard"),
                             lease=max(0.0, getattr(args, "lease", 0.0)),
                             checkpoint=CheckpointSettings(interval=max(0.0, getattr(args, "checkpoint", 0.0))))


def max_event_bytes(text: str) -> int:
    """``--max-event-bytes N``: refused below `busched.scheduler.write_bounds.MIN_EVENT_BYTES`, where every bind
    adding annotations (a device assignment) on some nodes, on every node below ~1.8 KB, would be refused when
    written (released as ``invalid``, its task Failed after --max-attempts), rather than found out bind by bind."""
    from busched.scheduler.write_bounds import LATER, MIN_EVENT_BYTES

    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--max-event-bytes: not a number of bytes: {text!r}") from None
    if n < MIN_EVENT_BYTES:
        raise argparse.ArgumentTypeError(
            f"--max-event-bytes: {n} is less than {MIN_EVENT_BYTES}, the least a bind adding annotations (a device "
            f"assignment) needs: its binding record with its node's and shard's names at their bound "
            f"({MIN_EVENT_BYTES - LATER} bytes) and the {LATER} a later record of its attempt adds; below it such "
            f"binds would be refused when written and their tasks Failed after --max-attempts")
    return n


def shard_name(text: str) -> str:
    """``--shard NAME``: a NodeShard's name, which admission bounds (`busched.api.limits.MAX_SHARD_NAME`) and every
    binding record and node ledger of the scheduler carries; a longer one would make records their readers
    refuse, so it is refused at start."""
    from busched.api.limits import MAX_SHARD_NAME

    if len(text) > MAX_SHARD_NAME:
        raise argparse.ArgumentTypeError(f"--shard: {len(text)} characters, more than {MAX_SHARD_NAME} (a NodeShard's "
                                         f"name, carried by every binding record and node ledger)")
    return text


def lease_shard_problem(args: argparse.Namespace) -> str | None:
    """Why ``--shard`` cannot be elected with ``--lease`` (the default), or None.  A lease's key in the leases
    bucket is the shard's name, 1-64 letters, digits, '-' or '_' (`busched.bus.lease`); a NodeShard's name may be
    longer or hold dots, and the scheduler then failed at its start with a traceback."""
    from busched.bus.lease import valid_key

    shard = getattr(args, "shard", "") or ""
    if shard and getattr(args, "lease", 0) > 0 and not valid_key(shard):
        return (f"--shard {shard[:80]!r}: a shard elected with --lease (default 2 s) is named by 1-64 letters, digits, "
                f"'-' or '_' (its key in the leases bucket); rename the NodeShard, or run it alone with --lease 0")
    return None


def _exit_at(wanted: str) -> Callable[[str], None]:
    """The test-only checkpoint of ``--debug-exit-at``: the process ends at once, nothing flushed."""
    def checkpoint(point: str) -> None:
        if point == wanted:
            log.warning("--debug-exit-at %s: exiting", point)
            logging.shutdown()
            os._exit(70)
    return checkpoint


def parse_duration(text: str) -> float:
    """Seconds from ``90``, ``90s``, ``15m``, ``12h`` or ``7d``."""
    text = str(text).strip()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        if text and text[-1] in units:
            return float(text[:-1]) * units[text[-1]]
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--history: not a duration: {text!r} (e.g. 7d, 12h, 0)") from None


def load_scheduler_config(path: str | None) -> SchedulerConfig:
    from busched.actions import ACTIONS
    from busched.framework.argcheck import check_arguments
    from busched.framework.config import DEFAULT_CONFIG, load_config
    from busched.plugins import PLUGINS

    known = {"known_actions": list(ACTIONS), "known_plugins": list(PLUGINS)}
    if not path:
        config = load_config(DEFAULT_CONFIG, **known)
    else:
        config = load_config(Path(path).read_text(), where=path, **known)
    # an argument no plugin or action reads is a warning; a Volcano argument we lack refuses the file
    config = check_arguments(config, plugins=PLUGINS, actions=ACTIONS, where=path or "config")
    for warning in config.warnings:
        log.warning("%s", warning)
    return config


def register(sub: argparse._SubParsersAction) -> None:
    from busched.cli.connection import add_nats_arguments

    p = sub.add_parser("run", help="run the scheduler", description="Run the scheduler: catch up with the state "
                       "stream, then schedule as new work settles (and every --period seconds) and publish decisions.")
    add_nats_arguments(p)
    add_scheduler_arguments(p)
    add_replicas_argument(p)
    add_log_argument(p)
    p.add_argument("--check", action="store_true",
                   help="only check the configuration (--config, else the built-in one): print its warnings; "
                        "exit 0 when it loads, 2 when it is refused")
    p.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    setup_logging(args.log_level)
    from busched.framework.config import ConfigError

    try:
        config = load_scheduler_config(args.config)
    except (OSError, ConfigError) as e:
        log.error("%s", e)
        return 2
    problem = lease_shard_problem(args)
    if problem:
        log.error("%s", problem)
        return 2
    if getattr(args, "check", False):
        print(f"configuration {args.config or '(built-in)'} loads, with {len(config.warnings)} warning(s)")
        return 0
    return asyncio.run(run_until_signal(lambda stop: serve(args, config, stop)))


async def serve(args: argparse.Namespace, config: SchedulerConfig, stop: asyncio.Event) -> int:
    """The scheduler until ``stop``; a scheduler deposed as leader (`busched.scheduler.election`) is replaced by
    a fresh one on a new connection, which catches up and joins as a standby."""
    from busched.bus import Bus, BusError
    from busched.cli.connection import options_from_args
    from busched.metrics import SchedulerMetrics
    from busched.scheduler import Scheduler, overview
    from busched.web.server import parse_listen, start_http

    settings = settings_from_args(args)
    metrics = SchedulerMetrics()  # one registry for every incarnation: /metrics stays one series
    current: list[Scheduler] = []
    http = None
    watcher: asyncio.Task[None] | None = None  # re-reads --config FILE (busched.cli.reload)
    cfg = None
    if args.config:
        from busched.cli.reload import ConfigFile, install_sighup, watch

        cfg = ConfigFile(args.config, load_scheduler_config, lambda c: current[0].use_config(c), metrics)
    bus: Bus | None = None
    try:
        while True:
            try:
                bus = await Bus.connect(options_from_args(args, "busched-scheduler"), wait=60)
            except BusError as e:
                log.error("%s", e)
                return 1
            sched = Scheduler(bus, config if not current else current[0].config, settings, metrics=metrics)
            current[:] = [sched]
            if getattr(args, "debug_exit_at", ""):
                sched.table.checkpoint = _exit_at(args.debug_exit_at)
            if args.http and http is None:
                host, port = parse_listen(args.http)
                http = await start_http(host, port, metrics.registry, ready=lambda: current[0].ready,
                                        healthy=lambda: current[0].bus.connected,
                                        status=lambda: overview.build(current[0],
                                                                      cfg.state() if cfg is not None else None),
                                        role=lambda: overview.role(current[0]))
                log.info("status page at %s/ (metrics %s/metrics, health %s/healthz, readiness %s/readyz)",
                         http.url, http.url, http.url, http.url)
            await sched.start()
            if cfg is not None and watcher is None:
                install_sighup(asyncio.get_running_loop(), cfg)
                if args.config_check > 0:
                    watcher = asyncio.create_task(watch(cfg, args.config_check, stop))
            loop_task = asyncio.create_task(sched.run_forever())
            stop_task = asyncio.create_task(stop.wait())
            done, _ = await asyncio.wait({loop_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
            if loop_task in done:
                loop_task.result()
            stop_task.cancel()
            rejoin = sched.election.deposed and not stop.is_set()
            log.info("deposed as leader: joining again as a standby" if rejoin else "stopping")
            await sched.stop()
            await loop_task
            await bus.close()
            bus = None
            if not rejoin:
                return 0
    finally:
        if watcher is not None:
            watcher.cancel()
        if http is not None:
            await http.stop()
        if bus is not None:
            await bus.close()
