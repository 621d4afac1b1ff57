"""Benchmarks: one module per workload, a shared cluster generator and a timed cycle driver.

Each workload module has a docstring saying what it measures, ``DEFAULTS`` (its
full-scale options: nodes, jobs, ...) and ``run(**options) -> dict`` returning
plain JSON values.  Smaller options give the same workload at test scale.
Timing is wall clock around whole phases only; decisions inside a session never
read a clock.  `busched bench NAME` (busched/cli/bench.py) runs them.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["WORKLOADS", "workload", "NotAvailable"]

WORKLOADS: tuple[str, ...] = ("throughput", "gang", "mixed", "preempt", "idle", "restart", "e2e", "trace", "replay",
                             "failover")


class NotAvailable(RuntimeError):  # noqa: N818 - public (busched.bench, the bench CLI): renaming breaks callers
    """A workload that needs a part of busched this build does not have yet."""


def workload(name: str) -> ModuleType:
    if name not in WORKLOADS:
        raise KeyError(name)
    return importlib.import_module(f"busched.bench.{name}")
