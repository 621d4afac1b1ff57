"""The entry points and properties `Scheduler` has always shown, each handing over to the part that owns it.

The replayer, the CLI, the agent checks and the tests call `handle_state`, `snapshot`, `view`,
`task_status`... and read or set ``boot``, ``backoff_until``, ``excluded`` on the scheduler; since
its parts were split out (the state feed, the effective objects, the binding table, the queries)
these only forward.  They stand apart from `busched.scheduler.loop` because they are a stable
surface, not the lifecycle: one place to see what the scheduler answers and who answers it.  A
mixin of `Scheduler`: the methods and properties stay its own.
"""

from __future__ import annotations

from typing import Any

from busched.cache.cache import Cache
from busched.scheduler.bindings import BindingTable
from busched.scheduler.effective import EffectiveObjects
from busched.scheduler.events import StateFeed
from busched.scheduler.queries import Queries

__all__ = ["EntryPoints"]


class EntryPoints:
    """The forwarding entry points and properties of `Scheduler` (see the module's docstring)."""

    # the scheduler's parts these hand over to (busched.scheduler.loop.Scheduler sets them)
    cache: Cache
    feed: StateFeed
    effective: EffectiveObjects
    table: BindingTable
    queries: Queries
    _refused: dict[str, frozenset[str]]

    # the state feed's and the effective objects' entry points, as the scheduler always had them
    def handle_state(self, subject: str, data: bytes, seq: int = 0) -> str:
        """Apply one state-stream message (`busched.scheduler.events`)."""
        return self.feed.handle_state(subject, data, seq)

    def handle_state_batch(self, items: list[tuple[str, bytes, int]]) -> None:
        self.feed.handle_state_batch(items)

    def sync_cache(self) -> None:
        self.effective.sync_cache()

    def snapshot(self, memo: bool | None = None) -> Any:
        """The cache's snapshot, with the nodes each task is kept off (as of the last `_update_refusals`).
        A query's snapshot is a private copy (``memo=False``): lending the objects again between the cycle's
        snapshot and its session (which runs in a thread) superseded the cycle's, and that cycle failed."""
        self.effective.sync_cache()
        snap = self.cache.snapshot(memo=memo)
        snap.refused = self._refused
        return snap

    def effective_task(self, key: str, spec: Any) -> Any:
        return self.effective.effective_task(key, spec)

    def task_status(self, key: str) -> str:
        """Volcano's task status name as `busched get tasks` shows it."""
        return self.effective.task_status(key)

    def view(self, kind: str) -> list[dict[str, Any]]:
        """What `busched get` shows (`busched.scheduler.queries`)."""
        return self.queries.view(kind)

    def lookup(self, kind: str, name: str, *, describe: bool = False) -> dict[str, Any]:
        """One object's `view` row; with ``describe`` also its spec and its recent events."""
        return self.queries.lookup(kind, name, describe=describe)

    # the binding table's, as the scheduler always showed them (the replayer sets some)
    @property
    def boot(self) -> str:
        """This scheduler's incarnation: the writer of its binding records."""
        return self.table.boot

    @boot.setter
    def boot(self, value: str) -> None:
        self.table.boot = value

    @property
    def backoff_until(self) -> dict[str, float]:
        return self.table.backoff_until

    @backoff_until.setter
    def backoff_until(self, value: dict[str, float]) -> None:
        self.table.backoff_until = value

    @property
    def excluded(self) -> dict[str, dict[str, float]]:
        return self.table.excluded

    @excluded.setter
    def excluded(self, value: dict[str, dict[str, float]]) -> None:
        self.table.excluded = value

    @property
    def _caught_up(self) -> bool:
        return self.table.caught_up

    @_caught_up.setter
    def _caught_up(self, value: bool) -> None:
        self.table.caught_up = value
