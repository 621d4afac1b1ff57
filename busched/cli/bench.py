"""`busched bench NAME [--json] [--nodes N] [--jobs N] ...`: run one benchmark workload.

Each workload (busched/bench/<name>.py) has full-scale defaults; the scale
options shrink it (tests run tiny versions).  Without ``--json`` the figures
are printed one per line; with it, one JSON object.  A workload that needs a
part of busched this build lacks exits 2 with a "not available" message.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["register"]

SCALE_OPTIONS = ("nodes", "jobs", "tasks", "cycles", "agents", "seed", "shards", "lease", "stages", "publisher")


def register(sub: argparse._SubParsersAction) -> None:
    from busched.bench import WORKLOADS

    p = sub.add_parser("bench", help="run a benchmark workload and print its figures",
                       description="Workloads: " + ", ".join(WORKLOADS) + ". See docs/benchmarks.md.")
    p.add_argument("name", choices=WORKLOADS)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--nodes", type=int, help="number of nodes (default: the workload's)")
    p.add_argument("--jobs", type=int, help="number of jobs (waves for replay)")
    p.add_argument("--tasks", type=int, help="number of tasks (per job for gang; in all for mixed, trace, replay)")
    p.add_argument("--cycles", type=int, help="number of cycles to time (idle)")
    p.add_argument("--agents", type=int, help="agent processes (e2e, failover)")
    p.add_argument("--shards", type=int, help="e2e: 0 one unsharded scheduler; N>0 N sharded schedulers (`busched run "
                                              "--shard`), each owning the nodes of N-th of the agents (hard mode)")
    p.add_argument("--stages", action="store_const", const=1,
                   help="e2e: also report where the time went (the scheduler's stages, each process's CPU)")
    p.add_argument("--publisher", choices=("encoded", "objects"),
                   help="e2e: the publisher's messages encoded before the clock starts (default) or as they are "
                        "published (the harness before issue 17's CPU budget pass)")
    p.add_argument("--lease", type=float, metavar="SECONDS",
                   help="failover: the schedulers' `busched run --lease` (default 2)")
    p.add_argument("--seed", type=int, help="seed for tie-breaks (default 0)")
    p.add_argument("--config", metavar="FILE",
                   help="scheduler configuration to use instead of the default (e.g. nodeSearch: "
                        "{percentageNodesToFind: 100} for exhaustive node search)")
    p.add_argument("--reference", action="store_true",
                   help="run the plain per-node loops instead of the array kernels (for comparison)")
    p.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    import dataclasses

    from busched import fastpath
    from busched.bench import NotAvailable, workload

    mod = workload(args.name)
    opts: dict[str, Any] = dict(mod.DEFAULTS)
    for k in SCALE_OPTIONS:
        v = getattr(args, k, None)
        if v is not None:
            if k not in opts:
                print(f"error: {args.name} takes no --{k} (options: "
                      f"{', '.join('--' + o for o in opts)})", file=sys.stderr)
                return 2
            opts[k] = v
    if getattr(args, "config", None):
        import inspect

        from busched.framework.config import ConfigError, load_config

        if "config" not in inspect.signature(mod.run).parameters:
            print(f"error: {args.name} takes no --config", file=sys.stderr)
            return 2
        try:
            with open(args.config, encoding="utf-8") as f:
                text = f.read()
            load_config(text, where=args.config)
        except (OSError, ConfigError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        opts["config"] = text
    settings = fastpath.default_settings()
    if args.reference:
        settings = dataclasses.replace(settings, kernels=False)
    was = fastpath.use_by_default(settings)  # every cache the workload makes takes it
    try:
        result = mod.run(**opts)
        result.setdefault("kernels", settings.kernels)
    except NotAvailable as e:
        if args.json:
            print(json.dumps({"workload": args.name, "available": False, "reason": str(e)}))
        print(f"{args.name}: not available: {e}", file=sys.stderr)
        return 2
    finally:
        fastpath.use_by_default(was)
    if args.json:
        print(json.dumps(result))
    else:
        for line in human(result):
            print(line)
    return 0


def human(result: dict[str, Any], indent: str = "") -> list[str]:
    out = []
    for k, v in result.items():
        if isinstance(v, dict):
            if not v:
                continue
            out.append(f"{indent}{k}:")
            out.extend(human(v, indent + "  "))
        elif isinstance(v, list):
            if v:
                out.append(f"{indent}{k}: {', '.join(str(x) for x in v)}")
        elif isinstance(v, float):
            out.append(f"{indent}{k}: {v:,.1f}")
        elif isinstance(v, int) and not isinstance(v, bool):
            out.append(f"{indent}{k}: {v:,}")
        else:
            out.append(f"{indent}{k}: {v}")
    return out
