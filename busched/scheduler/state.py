"""The state the state feed, the binding table and the queries still share, declared in one place.

`events` and `effective` (the state feed in, and the effective objects in the cache) are still parts
of one `Scheduler` object; the binding table, liveness, the podgroup statuses, the trigger and the
queries are classes of their own, built with what they need.  Until the feed owns its state too,
this class says what those two read and write on ``self``, with its type, and which of their methods
the other calls: each inherits it, so a typo or a wrong type is an error for the type checker instead of a surprise at run
time.  Nothing here runs: `Scheduler.__init__` sets the attributes, the parts define the methods
(they come first in the method resolution order; the bodies below are never called).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from busched.api import objects as o
from busched.bus import messages as m
from busched.bus.client import Bus, StateWatch
from busched.cache.cache import Cache
from busched.metrics import SchedulerMetrics
from busched.scheduler.agents import Liveness
from busched.scheduler.bindings import BindingTable
from busched.scheduler.records import Binding, NodeLive, Result, SchedulerSettings


class SchedulerState:
    # collaborators and settings
    bus: Bus
    settings: SchedulerSettings
    metrics: SchedulerMetrics
    cache: Cache
    clock: Callable[[], float]
    boot: str
    liveness: Liveness
    watch: StateWatch | None
    ready: bool
    _lock: asyncio.Lock
    _new_work: Callable[[], None]
    _next_version: Callable[[], int]
    # what we know, beside the cache
    specs: dict[str, dict[str, Any]]
    seqs: dict[tuple[str, str], int]
    refused: dict[tuple[str, str], str]
    pg_status: dict[str, m.PodGroupStatus]
    live: dict[str, NodeLive]
    # the binding table (`busched.scheduler.bindings`) and its dicts, as the scheduler shows them
    table: BindingTable
    bindings: dict[str, Binding]
    results: dict[str, Result]
    backoff_until: dict[str, float]
    failures: dict[str, int]
    excluded: dict[str, dict[str, float]]
    reasons: dict[str, str]
    _outbox: dict[str, tuple[m.Msg, str | None]]
    _purges: list[tuple[str, int | None]]
    # the state feed's
    _rejected_at_catchup: dict[str, int]
    _quiet: bool
    _last_refusal: str
    _counts: dict[tuple[str, str], int]
    _dirty_tasks: set[str]
    _dirty_jobs: set[str]
    _refused: dict[str, frozenset[str]]

    # -- methods one part defines and another calls ---------------------------------------------------------------------
    def _refresh(self, kind: str, key: str) -> None:
        raise NotImplementedError

    def _refresh_task(self, key: str, strict: bool = False) -> None:
        raise NotImplementedError

    def _refresh_job(self, key: str, strict: bool = False, *, now: bool = False) -> None:
        raise NotImplementedError

    def snapshot(self) -> Any:
        raise NotImplementedError

    def effective_task(self, key: str, spec: o.TaskSpec) -> o.TaskSpec:
        raise NotImplementedError

    def task_status(self, key: str) -> str:
        raise NotImplementedError





    def _reject(self, reason: str, kind: str, text: str) -> str:
        raise NotImplementedError

    def _purge_object(self, kind: str, key: str) -> None:
        raise NotImplementedError




