"""The batch protocol: a per-node callback that carries its vectorised twin.

A plugin registers its usual per-node callback (``predicate``, ``node_order``,
``node_map`` or ``node_reduce``) wrapped with `with_batch`; node selection
then calls the twin once for many nodes instead of the callback once per node.
The twins' shapes, by extension point:

* predicate: ``batch(task, arrays, rows) -> bool array | None``: True where the
  per-node callback would raise no `FitError`.
* node_order, node_map: ``batch(task, arrays, rows) -> float array``: the
  per-node scores, bit for bit.
* batch_node_order: ``batch(task, arrays, rows, nodes) -> float array | None``:
  the callback's ``{node: score}`` as an array in node order (0.0 where the
  map has no entry).
* node_reduce: ``batch(task, scores) -> float array``: the reduced scores of
  a float array of (already floored) map scores, in node order.

``arrays`` is the session's `NodeArrays`, ``rows`` the rows of the nodes asked
about.  A twin returns None when it cannot answer for this task (say, a task
with an affinity it does not vectorise); the caller then uses the per-node
callback for every plugin of that point.  A twin must give exactly what the
per-node callback gives: the tests in tests/test_kernels_*.py hold them to it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Batched", "with_batch", "batch_of", "Keyed", "with_key", "key_of"]


class Batched:
    """A callable that is the per-node callback, with ``batch`` as its vectorised twin."""

    __slots__ = ("fn", "batch")

    def __init__(self, fn: Callable[..., Any], batch: Callable[..., Any]) -> None:
        self.fn = fn
        self.batch = batch

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)

    def __repr__(self) -> str:
        return f"Batched({self.fn!r})"


def with_batch(fn: Callable[..., Any], batch: Callable[..., Any]) -> Batched:
    return Batched(fn, batch)


def batch_of(fn: Any) -> Callable[..., Any] | None:
    return getattr(fn, "batch", None)


class Keyed:
    """An order callback ``(l, r) -> int`` with ``key(x)``: ``fn(l, r)`` has the sign of comparing
    ``key(l)`` with ``key(r)``, and the key changes only when ``x`` itself does."""

    __slots__ = ("fn", "key")

    def __init__(self, fn: Callable[..., Any], key: Callable[[Any], Any]) -> None:
        self.fn = fn
        self.key = key

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)


def with_key(fn: Callable[..., Any], key: Callable[[Any], Any]) -> Keyed:
    return Keyed(fn, key)


def key_of(fn: Any) -> Callable[[Any], Any] | None:
    return getattr(fn, "key", None)
