"""Per-node vectors kept across tasks, refreshed only where nodes changed.

Many tasks of a cycle share a *shape* (a gang's tasks, a deployment's
replicas): same request, same affinity.  A kernel's answer for a shape over
all nodes changes only on the nodes that changed since it was computed.
`cached` keeps such a vector in the session's `NodeArrays.cache` together
with positions in the change logs it depends on (rows appended each time a
node's accounting or pod list changes); on the next use it recomputes only
the rows logged since, with the plain per-node function (the reference the
kernel replaces), or the whole vector again when many rows changed.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

__all__ = ["cached", "logged_since", "MAX_ENTRIES"]

MAX_ENTRIES = 512  # vectors kept per session; the oldest goes first
_VECTORS = "rowcache"


def cached(store: dict[Any, Any], key: Hashable, logs: Sequence[list[int]], size: int,
           full: Callable[[], np.ndarray], one: Callable[[int], Any]) -> np.ndarray:
    """The vector for ``key``: ``full()`` the first time, then refreshed row by row with ``one(row)``.

    ``store`` is a session's kernel cache; the vectors live in their own part of it, oldest
    dropped first beyond `MAX_ENTRIES`.
    """
    vectors = store.get(_VECTORS)
    if vectors is None:
        vectors = store[_VECTORS] = {}
    entry = vectors.get(key)
    if entry is None:
        vec = full()
        if len(vectors) >= MAX_ENTRIES:
            vectors.pop(next(iter(vectors)))
        vectors[key] = (vec, [len(log) for log in logs])
        return vec
    vec, pos = entry
    if len(logs) == 1:
        # one log (every caller so far), and most often one row logged since (a task placed):
        # the same as the general walk below without building a set
        log = logs[0]
        n, p = len(log), pos[0]
        if n == p:
            return vec
        pos[0] = n
        if n - p == 1 and size >= 8:
            r = log[p]
            vec[r] = one(r)
            return vec
        dirty = set(log[p:])
    else:
        dirty = logged_since(logs, pos)
    if dirty:
        if len(dirty) * 8 > size:
            vec[:] = full()
        else:
            for r in dirty:
                vec[r] = one(r)
    return vec


def logged_since(logs: Sequence[list[int]], pos: list[int]) -> set[int]:
    """The rows appended to ``logs`` since positions ``pos`` (one per log), which move to the logs' ends."""
    dirty: set[int] = set()
    for i, log in enumerate(logs):
        n = len(log)
        if n != pos[i]:
            dirty.update(log[pos[i]:])
            pos[i] = n
    return dirty
