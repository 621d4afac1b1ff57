"""A session's registered callbacks: per point, by plugin, and resolved into tier lists once.

The session owns one `Hooks` (not a base class): plugins register through
``Session.add_fn``, `open_session` freezes the lists once every plugin is open,
and the session's dispatchers, explain and the fast paths read them.  The
configuration decides which plugins' callbacks a point keeps (the plugin's
switch for the point) and in which order (tiers, then plugins as configured).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from busched.api.task import TaskInfo
from busched.framework import points
from busched.framework import tiers as tw
from busched.framework.config import Tier
from busched.framework.points import Point

__all__ = ["EventHandler", "Hooks", "UnknownPoint"]

F = TypeVar("F")
W = TypeVar("W")
_KNOWN: frozenset[Point[Any, Any]] = frozenset(points.POINTS)


@dataclass
class EventHandler:
    """Plugins that keep running totals (drf, proportion, capacity) follow allocations with these."""

    allocate: Callable[[TaskInfo], None] | None = None
    deallocate: Callable[[TaskInfo], None] | None = None
    # told allocate's placements in one call, in order, leaving the state ``allocate`` per task would; only
    # for state nothing allocate's turn reads (busched.framework.runs)
    allocate_run: Callable[[list[TaskInfo]], None] | None = None


class UnknownPoint(ValueError):  # noqa: N818 - public (in __all__; plugin authors and tests catch it)
    """A callback registered on something not in the points table (a string, say)."""


class _Resolved(dict[Point[Any, Any], tw.Tiers]):
    """Each point's callbacks by tier; a point not resolved yet (asked before `Hooks.freeze`, as a
    session used without `open_session` does) resolves on first use."""

    def __init__(self, tiers: Sequence[Tier], fns: dict[Point[Any, Any], dict[str, Any]]) -> None:
        super().__init__()
        self._config_tiers = tiers
        self._fns = fns

    def __missing__(self, point: Point[Any, Any]) -> tw.Tiers:
        r = self[point] = tw.resolve(self._config_tiers, self._fns[point], point.switch, point.any_of)
        return r


class Hooks:
    def __init__(self, tiers: Sequence[Tier]) -> None:
        self.tiers = tiers
        self.fns: dict[Point[Any, Any], dict[str, Any]] = {p: {} for p in points.POINTS}
        self.twins: dict[Point[Any, Any], dict[str, Any]] = {p: {} for p in points.POINTS}
        self.lists = _Resolved(tiers, self.fns)  # point -> (plugin, callback) by tier
        self._twinned: dict[Point[Any, Any], list[tuple[str, Any, Any]]] = {}

    def add(self, point: Point[F, W], plugin: str, fn: F, twin: W | None = None) -> None:
        if point not in _KNOWN:
            raise UnknownPoint(f"unknown extension point {point!r}")
        self.fns[point][plugin] = fn
        if twin is None:
            self.twins[point].pop(plugin, None)
        else:
            self.twins[point][plugin] = twin
        self.lists.pop(point, None)
        self._twinned.pop(point, None)

    def freeze(self) -> None:
        """Resolve every point's lists now (every plugin has registered)."""
        for point in points.POINTS:
            self.lists[point] = tw.resolve(self.tiers, self.fns[point], point.switch, point.any_of)
        self._twinned.clear()

    def callbacks(self, point: Point[F, W]) -> list[list[tuple[str, F]]]:
        return self.lists[point]

    def with_twins(self, point: Point[F, W]) -> list[tuple[str, F, W | None]]:
        got = self._twinned.get(point)
        if got is None:
            twins = self.twins[point]
            got = self._twinned[point] = [(name, fn, twins.get(name)) for row in self.lists[point]
                                          for name, fn in row]
        return got

    def switch_on(self, plugin: str, switch: str) -> bool:
        for tier in self.tiers:
            for p in tier.plugins:
                if p.name == plugin:
                    return p.enabled(switch)
        return False
