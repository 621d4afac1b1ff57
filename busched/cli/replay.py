"""`busched replay`: rebuild the scheduler's cache from the state stream and re-run every recorded cycle.

``busched replay --nats URL`` reads the state messages from ``BUSCHED_STATE_HISTORY`` (the copy a
scheduler with history on keeps) when it exists, else from the state stream (every message it still
holds), and the cycle records of the history stream (``source`` in the JSON names the stream read);
``busched replay FILE`` reads a file written by ``busched record``.
With the recorded configuration every cycle must decide what the live one did; ``--config OTHER``
is a what-if over the same inputs.  ``--json`` prints one object: ``cycles``, ``identical``,
``different``, ``incomplete``, ``diffs`` (per differing cycle: binds added/missing/moved, evicts,
pipelined and podgroup phases added/missing), ``placed``/``evicted`` (recorded vs replayed),
``events`` and ``events_per_second``.  Exit status 0 when every compared cycle is identical, 1 otherwise.

``--cycle N --export FILE.yaml`` (``N``, or ``BOOT:N`` when several boots recorded a cycle N) writes the
state before that cycle as a scenario with ``expect`` filled from its recorded decisions
(`busched.replay.export`): ``busched scenario check FILE.yaml`` runs it.  Exit status 0, 2 when the
cycle cannot be exported.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from typing import Any

from busched.cli.common import add_log_argument, setup_logging

log = logging.getLogger("busched.replay")


def register(sub: argparse._SubParsersAction) -> None:
    from busched.cli.connection import add_nats_arguments

    p = sub.add_parser("replay", help="re-run recorded cycles and compare their decisions",
                       description="Rebuild the cache from the state stream (or a `busched record` file), run each "
                                   "recorded cycle with its recorded now, seed and configuration, and compare.")
    p.add_argument("source", nargs="?", help="a file written by `busched record` (default: the bus, --nats)")
    p.add_argument("--cycles", metavar="A..B", help="the cycle numbers to compare (A..B, A.., ..B or N)")
    p.add_argument("--config", metavar="FILE", help="run every cycle with this configuration instead (a what-if)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--cycle", metavar="N", help="with --export: the cycle to export (N, or BOOT:N)")
    p.add_argument("--export", metavar="FILE.yaml", help="write the state before --cycle as a scenario file")
    add_nats_arguments(p)
    add_log_argument(p)
    p.set_defaults(func=cmd_replay, nats_role="scheduler")


async def read_bus(args: argparse.Namespace) -> tuple[list[tuple[str, int, bytes]], list[bytes]]:
    state, hist, _ = await read_bus_source(args)
    return state, hist


async def read_bus_source(args: argparse.Namespace) -> tuple[list[tuple[str, int, bytes]], list[bytes], str]:
    """The state messages (from the history copy ``BUSCHED_STATE_HISTORY`` when it exists, else the state
    stream: `busched.bus.history.read_state`), the cycle records, and the name of the stream the state came from."""
    from busched.bus import Bus
    from busched.bus import history as H
    from busched.cli.connection import options_from_args

    bus = await Bus.connect(options_from_args(args, "busched-replay", role="scheduler"))
    try:
        state, source = await H.read_state(bus)
        hist = await H.read_stream(bus, H.HISTORY_STREAM)
    finally:
        await bus.close()
    return state, [d for _, _, d in hist], source


def cmd_replay(args: argparse.Namespace) -> int:
    setup_logging("warning" if args.log_level == "info" else args.log_level)
    from busched.replay import decode_records, replay

    if bool(args.cycle) != bool(args.export):
        print("error: --cycle and --export go together", file=sys.stderr)
        return 2
    config: Any = None
    if args.config:
        from busched.cli.run import load_scheduler_config
        from busched.framework.config import ConfigError

        try:
            config = load_scheduler_config(args.config)
        except (OSError, ConfigError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2

    source = {"source": args.source}

    async def read() -> tuple[list[tuple[str, int, bytes]], list[bytes]]:
        if args.source:
            from busched.replay.file import read_file

            return read_file(args.source)
        state, hist, source["source"] = await read_bus_source(args)
        return state, hist

    if args.export:
        return export(args, read)

    async def main() -> Any:
        state, hist = await read()
        return await replay(state, decode_records(hist), config=config, cycles=args.cycles)

    res = asyncio.run(main())
    out = {**res.as_dict(), **source}  # source: the record file, or the stream the state messages came from
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{res.cycles} cycles replayed ({res.events} state messages, {out['events_per_second']} events/s): "
              f"{res.identical} identical, {res.different} different"
              + (f", {res.incomplete} with history missing below them" if res.incomplete else "")
              + f" (state from {source['source']})")
        print(f"placed: recorded {res.placed['recorded']}, replayed {res.placed['replayed']}; "
              f"evicted: recorded {res.evicted['recorded']}, replayed {res.evicted['replayed']}")
        for d in res.diffs[:20]:
            print(json.dumps(d))
    return 0 if res.different == 0 else 1


def export(args: argparse.Namespace, read: Any) -> int:
    from busched.replay import decode_records
    from busched.replay import export as E

    async def main() -> tuple[dict[str, Any], list[str]]:
        state, hist = await read()
        return await E.export_cycle(state, decode_records(hist), args.cycle,
                                    source=args.source or f"--nats {args.nats or ''}".strip())

    try:
        doc, notes = asyncio.run(main())
    except E.ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    E.write_scenario(doc, notes, args.export)
    c = doc["cluster"]
    print(f"{args.export}: cycle {doc['name'].rsplit(' ', 1)[-1]}: {len(c.get('nodes', []))} nodes, "
          f"{len(c.get('tasks', []))} tasks, {len(c.get('jobs', []))} jobs; expect {len(doc['expect']['binds'])} "
          f"binds, {len(doc['expect']['evicted'])} evicted")
    for n in notes:
        print(f"note: {n}", file=sys.stderr)
    return 0
