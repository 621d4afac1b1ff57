"""`busched get scheduler`: every shard's lease (`busched.bus.lease`), read from its bucket.

Who leads each shard (the holder: a scheduler's boot, as its binding records name their writer), with
which epoch, when it last renewed and when its lease ends if it renews no more.  The times are the
holder's wall clock, for people: standbys judge expiry on their own monotonic clocks (docs/bus.md,
"Leader election").
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from typing import Any

import msgspec

COLUMNS = ("SHARD", "HOLDER", "EPOCH", "RENEWED", "EXPIRES", "REVISION")


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z" \
        if t else "-"


def rows(leases: list[Any]) -> list[dict[str, Any]]:
    return [{"shard": s.shard, "holder": s.record.holder, "epoch": s.record.epoch,
             "renewedAt": s.record.renewed_at, "duration": s.record.duration,
             "expiresAt": s.record.renewed_at + s.record.duration, "revision": s.revision} for s in leases]


def show(items: list[dict[str, Any]], output: str, now: float | None = None) -> str:
    if output in ("json", "yaml"):
        if output == "json":
            return msgspec.json.format(msgspec.json.encode(items)).decode() + "\n"
        return msgspec.yaml.encode(items).decode()
    now = time.time() if now is None else now
    table = [COLUMNS]
    for r in items:
        left = r["expiresAt"] - now
        expires = f"in {left:.1f}s" if left >= 0 else f"{-left:.1f}s ago"
        table.append((r["shard"], r["holder"] or "<none>", str(r["epoch"]), _iso(r["renewedAt"]), expires,
                      str(r["revision"])))
    widths = [max(len(row[i]) for row in table) for i in range(len(COLUMNS))]
    return "".join("   ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() + "\n" for row in table)


async def get(bus: Any, args: argparse.Namespace) -> int:
    items = rows(await bus.read_leases())
    if args.name:  # (one shard asked for: not there is an error, whether or not other shards have leases)
        items = [r for r in items if r["shard"] == args.name]
        if not items:
            print(f"error: no lease for shard {args.name!r}", file=sys.stderr)
            return 1
    if not items and args.output not in ("json", "yaml"):
        print("no scheduler has claimed a lease (none runs with --lease, or none has started)", file=sys.stderr)
        return 0
    sys.stdout.write(show(items, args.output))
    return 0
