"""A plugin that raises on one task fails that task, not the cycle.

The session calls each predicate and node-order callback inside a ``try`` (free in Python 3.11
until something raises); an unexpected exception becomes a `PluginFailed` -- a `FitError` with
code Error naming the plugin, ``plugin <name> failed: <ExceptionType>: <message>`` -- which the
node selection records as the task's fit error (`busched.framework.nodeselect`), and the other
tasks go on.  Each (plugin, task) failure is logged once per process and counted once per
session in `COUNTS`, which `busched.metrics` exports as ``busched_plugin_errors_total{plugin}``.
"""

from __future__ import annotations

import logging
import weakref
from collections import Counter
from typing import Any

from busched.api.fit import Code, FitError, Status

__all__ = ["PluginFailed", "COUNTS", "failed", "kernel_failed"]

log = logging.getLogger("busched.framework")

# failures by plugin, since the process started (a counter: it only grows)
COUNTS: Counter[str] = Counter()
_LOGGED: set[tuple[str, str]] = set()
_COUNTED: dict[tuple[str, str], weakref.ref[object]] = {}
_MAX_REMEMBERED = 10_000


class PluginFailed(FitError):  # noqa: N818 - public, and a FitError (a task's fit result), not the caller's error
    """A plugin callback raised something other than a `FitError` for a task."""

    def __init__(self, task: str, node: str, plugin: str, reason: str) -> None:
        super().__init__(task, node, [Status(Code.Error, reason, plugin)])
        self.plugin = plugin


def failed(plugin: str, task: Any, node: str, exc: BaseException, session: object) -> PluginFailed:
    """The fit error for ``task`` (on ``node``, "" for the task as a whole); logs and counts it."""
    reason = f"plugin {plugin} failed: {type(exc).__name__}: {exc}"
    key = (plugin, task.key)
    # a weak reference, not the session (it must be freed when it closes) nor its id (a freed session's
    # address is soon another session's, and that session's failure would go uncounted)
    seen = _COUNTED.get(key)
    if seen is None or seen() is not session:
        if len(_COUNTED) >= _MAX_REMEMBERED:
            _COUNTED.clear()
        _COUNTED[key] = weakref.ref(session)
        COUNTS[plugin] += 1
    if key not in _LOGGED:
        if len(_LOGGED) >= _MAX_REMEMBERED:
            _LOGGED.clear()
        _LOGGED.add(key)
        log.error("task %s: %s", task.key, reason, exc_info=exc)
    return PluginFailed(task.key, node, plugin, reason)


def kernel_failed(what: str, task: Any, exc: BaseException) -> None:
    """A fast path raised for a task: the caller takes the plain path (whose callbacks name the
    plugin if one of them fails); logged once per task."""
    key = (f"kernel {what}", task.key)
    if key not in _LOGGED:
        if len(_LOGGED) >= _MAX_REMEMBERED:
            _LOGGED.clear()
        _LOGGED.add(key)
        log.error("task %s: %s kernel failed, taking the plain path: %s: %s", task.key, what,
                  type(exc).__name__, exc, exc_info=exc)
