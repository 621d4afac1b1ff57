"""`busched record --nats URL --out FILE [--until-idle S]`: the state stream and the cycle records into a file.

Writes every state message still held (from ``BUSCHED_STATE_HISTORY``, the copy a scheduler with history on
keeps, when it exists, each at its ``BUSCHED_STATE`` sequence; else from the state stream) and every cycle
record of the history stream, then follows both (polling every
``--poll`` seconds) until SIGINT/SIGTERM, or until nothing new arrived for ``--until-idle`` seconds.
The file (`busched.replay.file`, JSON lines with a versioned header) is what ``busched replay FILE`` reads.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time

from busched.cli.common import add_log_argument, run_until_signal, setup_logging

log = logging.getLogger("busched.record")


def register(sub: argparse._SubParsersAction) -> None:
    from busched.cli.connection import add_nats_arguments

    p = sub.add_parser("record", help="record the state stream and the cycle records to a file",
                       description="Write the state stream and the cycle records to FILE, following them until "
                                   "Ctrl-C/SIGTERM or --until-idle seconds without anything new.")
    p.add_argument("--out", required=True, metavar="FILE")
    p.add_argument("--until-idle", type=float, default=0.0, metavar="S",
                   help="stop once nothing new arrived for S seconds (default: only on a signal)")
    p.add_argument("--poll", type=float, default=0.5, help="seconds between reads (default %(default)s)")
    add_nats_arguments(p)
    add_log_argument(p)
    p.set_defaults(func=cmd_record, nats_role="scheduler")


def cmd_record(args: argparse.Namespace) -> int:
    setup_logging(args.log_level)
    return asyncio.run(run_until_signal(lambda stop: record(args, stop)))


async def record(args: argparse.Namespace, stop: asyncio.Event) -> int:
    from busched.bus import Bus
    from busched.bus import history as H
    from busched.cli.connection import options_from_args
    from busched.replay import file as F

    bus = await Bus.connect(options_from_args(args, "busched-record", role="scheduler"))
    state = H.StateReader(bus)  # the history copy when it exists, else the state stream (state-stream sequences)
    next_cycle = 1
    counts = {"state": 0, "cycle": 0}
    last_new = time.monotonic()
    try:
        with open(args.out, "w", encoding="utf-8") as f:
            F.write_header(f)
            while True:
                new = 0
                items = await state.read()
                if items:
                    F.write_entries(f, "state", items)
                    counts["state"] += len(items)
                    new += len(items)
                items = await H.read_stream(bus, H.HISTORY_STREAM, start=next_cycle)
                if items:
                    F.write_entries(f, "cycle", items)
                    next_cycle = items[-1][1] + 1
                    counts["cycle"] += len(items)
                    new += len(items)
                f.flush()
                now = time.monotonic()
                if new:
                    last_new = now
                if stop.is_set() or (args.until_idle and now - last_new >= args.until_idle):
                    break
                try:
                    await asyncio.wait_for(stop.wait(), args.poll)
                except asyncio.TimeoutError:
                    pass
    finally:
        await bus.close()
    log.info("recorded %d state messages (from %s) and %d cycle records to %s", counts["state"], state.source,
             counts["cycle"], args.out)
    return 0
