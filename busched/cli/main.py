"""`busched` command line: each subcommand module registers its own parsers.

A module in `COMMANDS` has ``register(subparsers)``; each parser it adds sets
``func(args) -> int`` as its default.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from busched import fastpath

__all__ = ["main", "COMMANDS"]

COMMANDS = (
    "busched.cli.scenario",
    "busched.cli.bench",
    "busched.cli.run",
    "busched.cli.agent",
    "busched.cli.agent_check",
    "busched.cli.apply",
    "busched.cli.queue",
    "busched.cli.job",
    "busched.cli.node",
    "busched.cli.get",
    "busched.cli.describe",
    "busched.cli.explain",
    "busched.cli.up",
    "busched.cli.schema",
    "busched.cli.auth",
    "busched.cli.replay",
    "busched.cli.record",
    "busched.cli.events",
    "busched.cli.logs",
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="busched", description="A Volcano-compatible batch scheduler over NATS.")
    sub = p.add_subparsers(dest="command", required=True)
    for mod in COMMANDS:
        importlib.import_module(mod).register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # the fast path's switches are read here, at the edge, and nowhere below
    fastpath.use_by_default(fastpath.FastPathSettings.from_env(os.environ))
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
