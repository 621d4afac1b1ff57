"""Sort keys for the job order, so heaps compare tuples instead of calling plugins.

Replaces calling ``Session.job_order_fn`` (every job-order plugin in tier
order, the first non-zero answer, then creation time, then uid) at each heap
comparison: when every job-order callback has a key twin (registered with the callback, `Session.add_fn`),
the tuple of their keys followed by (created, uid) compares exactly as the
callbacks do.  Only for heaps whose jobs do not change while they wait
(allocate's and enqueue's: a job changes only in its own turn).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from busched.api.task import pod_index

__all__ = ["job_order_key", "task_order_key"]


def _keys(ssn: Any, twins: list[tuple[str, Any, Any]]) -> list[Callable[[Any], Any]] | None:
    """The sort key of every order callback, or None when the fast path is off or one has none."""
    if ssn.fast is None or any(k is None for _, _, k in twins):
        return None
    return [k for _, _, k in twins]


def job_order_key(ssn: Any) -> Callable[[Any], tuple] | None:
    keys = _keys(ssn, ssn.job_order_twins())
    if keys is None:
        return None
    if len(keys) == 3:  # the default configuration's (priority, gang, drf): the same tuple, no list built
        k0, k1, k2 = keys

        def key3(job: Any) -> tuple:
            return (k0(job), k1(job), k2(job), job.created, job.uid)

        return key3

    def key(job: Any) -> tuple:
        return (*[k(job) for k in keys], job.created, job.uid)

    return key


def task_order_key(ssn: Any, tasks: list[Any]) -> Callable[[Any], tuple] | None:
    """A sort key equal to ``Session.task_order_fn`` over ``tasks``, or None.

    ``task_order_fn`` asks the task-order plugins, then Volcano's CompareTask: the pod indexes
    from the names, else creation time, then uid.  When every task-order callback carries a key
    and every task has a pod index, the tuple (plugin keys, index, created, uid) compares exactly
    so; when none has one, (plugin keys, created, uid) does; a mix has no key.  Only for heaps
    whose tasks do not change while they wait (allocate's pending tasks of one job).
    """
    keys = _keys(ssn, ssn.task_order_twins())
    if keys is None:
        return None
    index: dict[str, int] = {}
    for t in tasks:
        i = pod_index(t.name)
        if i is not None:
            index[t.uid] = i
    if not index:
        def plain(task: Any) -> tuple:
            return (*[k(task) for k in keys], task.created, task.uid)

        return plain
    if len(index) < len(tasks):
        return None

    def key(task: Any) -> tuple:
        return (*[k(task) for k in keys], index[task.uid], task.created, task.uid)

    return key
