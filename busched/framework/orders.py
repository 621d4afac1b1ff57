"""Orders built from the session's order points: Volcano's CompareTask fallback and the victims queue.

The session's order dispatchers (``job_order_fn``, ``task_order_fn`` ...) ask the
plugins; what they fall back on when every plugin abstains, and the eviction
order preempt and reclaim walk (BuildVictimsPriorityQueue), live here so the
session keeps to dispatching.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import TYPE_CHECKING

from busched.api.job import JobInfo
from busched.api.task import TaskInfo, pod_index
from busched.framework.pqueue import PriorityQueue

if TYPE_CHECKING:
    from busched.framework.session import Session

__all__ = ["compare_task_index", "sort_tasks", "victims_queue"]


def compare_task_index(l: TaskInfo, r: TaskInfo) -> bool:
    """Volcano's CompareTask: pod index from the name, then creation order, then uid."""
    li, ri = pod_index(l.name), pod_index(r.name)
    if li is None or ri is None or li == ri:
        if l.created != r.created:
            return l.created < r.created
        return l.uid < r.uid
    return li < ri


def sort_tasks(ssn: Session, tasks: Iterable[TaskInfo]) -> list[TaskInfo]:
    """``tasks`` in the session's task order."""
    less = ssn.task_order_fn

    def compare(a: TaskInfo, b: TaskInfo) -> int:
        return -1 if less(a, b) else (1 if less(b, a) else 0)

    return sorted(tasks, key=functools.cmp_to_key(compare))


def victims_queue(ssn: Session, victims: list[TaskInfo], preemptor: TaskInfo) -> PriorityQueue[TaskInfo]:
    """Victims in eviction order: queue, job and task order reversed (BuildVictimsPriorityQueue)."""

    def job_then_task(lj: JobInfo, rj: JobInfo, l: TaskInfo, r: TaskInfo) -> bool:
        c = ssn.job_order_compare(lj, rj)
        if c:
            return c > 0
        return not ssn.task_order_fn(l, r)

    def less(l: TaskInfo, r: TaskInfo) -> bool:
        if l.job == r.job:
            return not ssn.task_order_fn(l, r)
        lj, rj = ssn.jobs.get(l.job), ssn.jobs.get(r.job)
        pj = ssn.jobs.get(preemptor.job)
        if lj is None or rj is None:
            if lj is None and rj is None:
                return not ssn.task_order_fn(l, r)
            return lj is None
        if pj is None:
            return job_then_task(lj, rj, l, r)
        if lj.queue != rj.queue:
            return ssn.victim_queue_order_fn(ssn.queues[lj.queue], ssn.queues[rj.queue], ssn.queues[pj.queue])
        return job_then_task(lj, rj, l, r)

    return PriorityQueue(less, victims)
