"""The recent binds, evicts, releases and stops the scheduler decided, for `busched describe`.

A small bounded ring: the last `PER_TASK` events of each task (a list made the first time the task has
one) and the last `OVERALL` of all (so a node's or a queue's recent events are found without a
per-object index).  One event is a tuple ``(time, cycle, kind, task, node, attempt, reason)``; the
scheduler's wall clock is read once per call.  Cheap on purpose: a cycle binds thousands of tasks,
and `bindings` calls `binds` once per chunk of them.  The per-task lists of deleted tasks are dropped
when the map has grown well past the number of tasks.
"""

from __future__ import annotations

from collections import deque
from typing import Any

__all__ = ["PER_TASK", "OVERALL", "binds", "evicts", "note", "of_task", "recent"]

PER_TASK = 20
OVERALL = 200

Event = tuple[float, int, str, str, str, int, str]


class _Ring:
    __slots__ = ("by_task", "all")

    def __init__(self) -> None:
        self.by_task: dict[str, list[Event]] = {}
        self.all: deque[Event] = deque(maxlen=OVERALL)


def _ring(sched: Any) -> _Ring:
    ring = sched.__dict__.get("_events_ring")
    if ring is None:
        ring = sched._events_ring = _Ring()
    return ring


def _add(sched: Any, events: list[Event]) -> None:
    ring = _ring(sched)
    by_task = ring.by_task
    for ev in events:
        lst = by_task.get(ev[3])
        if lst is None:
            lst = by_task[ev[3]] = []
        lst.append(ev)
        if len(lst) > PER_TASK:
            del lst[0]
    ring.all.extend(events[-OVERALL:])
    tasks = sched.specs["task"]
    if len(by_task) > 2 * len(tasks) + 1000:
        for key in [k for k in by_task if k not in tasks]:
            del by_task[key]


def binds(sched: Any, ready: list[tuple[str, Any]]) -> None:
    """Binds that went out: (task, Binding) pairs."""
    t, c = sched.wall_clock(), sched.cycle
    _add(sched, [(t, c, "bind", key, b.node, b.attempt, "") for key, b in ready])


def evicts(sched: Any, sent: list[tuple[str, Any, str]]) -> None:
    """Evicts that went out: (task, Binding, kind) triples."""
    t, c = sched.wall_clock(), sched.cycle
    _add(sched, [(t, c, "evict", key, b.node, b.attempt, b.evict_reason) for key, b, _ in sent])


def note(sched: Any, kind: str, key: str, b: Any, reason: str) -> None:
    """One event of a task whose attempt ``b`` (a Binding, or None) is released or stopped."""
    _add(sched, [(sched.wall_clock(), sched.cycle, kind, key, b.node if b is not None else "",
                  b.attempt if b is not None else 0, reason)])


def _row(ev: Event) -> dict[str, Any]:
    return {"time": ev[0], "cycle": ev[1], "event": ev[2], "task": ev[3], "node": ev[4], "attempt": ev[5],
            "reason": ev[6]}


def of_task(sched: Any, key: str) -> list[dict[str, Any]]:
    return [_row(ev) for ev in _ring(sched).by_task.get(key, ())]


def recent(sched: Any, match: Any) -> list[dict[str, Any]]:
    """The recent events (of the last `OVERALL`) for which ``match(event_row)`` holds."""
    return [r for r in map(_row, _ring(sched).all) if match(r)]
