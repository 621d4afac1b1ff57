"""Shared bits of the bus commands: logging and running a coroutine until Ctrl-C / SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["setup_logging", "run_until_signal", "add_log_argument", "add_replicas_argument", "namespaced"]


def namespaced(text: str) -> str:
    """A job's or task's key from the command line: ``ns/name`` as given, a bare ``name`` in namespace default."""
    return text if "/" in text else f"default/{text}"


def add_log_argument(p: Any) -> None:
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="log level (default %(default)s)")


def _replicas(text: str) -> int:
    import argparse

    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 5:
        raise argparse.ArgumentTypeError(f"--replicas: 1 to 5, not {text!r}")
    return n


def add_replicas_argument(p: Any) -> None:
    """``--replicas N`` of the commands that create busched's streams when they are missing (run, agent)."""
    p.add_argument("--replicas", type=_replicas, default=1, metavar="N",
                   help="copies of each stream busched creates, on a NATS cluster (JetStream num_replicas, 1-5; 3 "
                        "keeps working when one server is lost); an existing stream with fewer is raised to N, "
                        "never lowered (default %(default)s)")


def setup_logging(level: str = "info") -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("nats").setLevel(logging.WARNING)


async def run_until_signal(main: Callable[[asyncio.Event], Awaitable[int]]) -> int:
    """Run ``main(stop_event)``; SIGINT/SIGTERM set the event so ``main`` can shut down cleanly."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):
            pass
    try:
        return await main(stop)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
