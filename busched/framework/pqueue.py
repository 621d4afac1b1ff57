"""A priority queue ordered by a session's ``less(l, r)`` function (Volcano's util.PriorityQueue)."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

__all__ = ["PriorityQueue", "KeyedQueue"]


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


class KeyedQueue(Generic[T]):
    """`PriorityQueue` with a ``key`` (the same contract: keys order items exactly as ``less`` and do
    not change while an item waits) for a queue filled before it is first popped: the items pushed
    before the first pop are sorted once, those pushed after wait in a heap, and a pop takes the
    smaller head.  When no two items' keys are equal (allocate's job keys end with the job's uid) the
    pops come out in the very order the heap's would, a sort of n items costing less than n pushes
    and pops of a heap of n.  Keys that tie fall back to the heap (equal keys would compare items);
    a later item tying with a sorted one is told apart as the heap tells them (the whole pairs).
    Keys must be totally ordered (no NaN, nothing incomparable), as the built-in job keys are: the
    sort and the heap would otherwise order them differently."""

    __slots__ = ("_less", "_key", "_sorted", "_h", "_sealed")

    def __init__(self, less: Callable[[T, T], bool], key: Callable[[T], Any]) -> None:
        self._less = less
        self._key = key
        self._sorted: list[tuple[Any, T]] = []  # in push order until sealed, then largest first
        self._h: list[tuple[Any, T]] = []
        self._sealed = False

    def push(self, v: T) -> None:
        if self._sealed:
            heapq.heappush(self._h, (self._key(v), v))
        else:
            self._sorted.append((self._key(v), v))

    def _seal(self) -> None:
        self._sealed = True
        pushed = self._sorted
        s = self._sorted = sorted(pushed, key=_first, reverse=True)
        if any(s[i][0] == s[i + 1][0] for i in range(len(s) - 1)):
            # equal keys: which of them pops first is the heap's own doing; make its very moves
            for e in pushed:
                heapq.heappush(self._h, e)
            s.clear()

    def pop(self) -> T:
        if not self._sealed:
            self._seal()
        s, h = self._sorted, self._h
        if h and (not s or h[0] < s[-1]):  # the whole pairs, as the heap compares them (equal keys: the items)
            return heapq.heappop(h)[1]
        return s.pop()[1]

    def peek(self) -> T:
        """The item `pop` would return next, left in the queue."""
        if not self._sealed:
            self._seal()
        s, h = self._sorted, self._h
        if h and (not s or h[0] < s[-1]):
            return h[0][1]
        return s[-1][1]

    def empty(self) -> bool:
        return not self._sorted and not self._h

    def __len__(self) -> int:
        return len(self._sorted) + len(self._h)

    def items(self) -> list[T]:
        """The items waiting, in no particular order (the queue is left as it is)."""
        return [e[1] for e in self._sorted] + [e[1] for e in self._h]

    def clone(self) -> KeyedQueue[T]:
        q: KeyedQueue[T] = KeyedQueue(self._less, self._key)
        q._sorted, q._h, q._sealed = list(self._sorted), list(self._h), self._sealed
        return q


def _first(e: tuple[Any, Any]) -> Any:
    return e[0]
