"""A priority queue ordered by a session's ``less(l, r)`` function (Volcano's util.PriorityQueue)."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

__all__ = ["PriorityQueue"]


class _Item:
    __slots__ = ("v", "less")

    def __init__(self, v: Any, less: Callable[[Any, Any], bool]) -> None:
        self.v = v
        self.less = less

    def __lt__(self, other: _Item) -> bool:
        return self.less(self.v, other.v)


class PriorityQueue(Generic[T]):
    """``key``, when given, must order items exactly as ``less`` does and must not change while an
    item waits in the queue: the heap then compares keys, computed once per push, and makes the
    very same moves it would make calling ``less``."""

    def __init__(self, less: Callable[[T, T], bool], items: Iterable[T] = (),
                 key: Callable[[T], Any] | None = None) -> None:
        self._less = less
        self._key = key
        self._h: list[Any] = [_Item(v, less) for v in items] if key is None else [(key(v), v) for v in items]
        heapq.heapify(self._h)

    def push(self, v: T) -> None:
        heapq.heappush(self._h, _Item(v, self._less) if self._key is None else (self._key(v), v))

    def pop(self) -> T:
        v: T = heapq.heappop(self._h)[1] if self._key is not None else heapq.heappop(self._h).v
        return v

    def empty(self) -> bool:
        return not self._h

    def __len__(self) -> int:
        return len(self._h)

    def items(self) -> list[T]:
        """The items waiting, in no particular order (the queue is left as it is)."""
        return [e[1] if self._key is not None else e.v for e in self._h]

    def clone(self) -> PriorityQueue[T]:
        q: PriorityQueue[T] = PriorityQueue(self._less, key=self._key)
        q._h = list(self._h)
        return q
