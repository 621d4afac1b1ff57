"""What a twin declares to answer row by row, and when two tasks are one template for it.

A predicate or node-order twin that can answer a run of like tasks from one kept vector says so with
`declare`: its `Local` names the change logs its values follow and how to compute one node's value.
`same_template` is the test `busched.fastpath.batch` (and runchoice, streamchoice) use to decide that
a task may be answered from another's declarations: every field a declared twin reads is equal.
This is the contract between the plugins' twins and the batch choice; it lives apart from the choice
itself (`busched.fastpath.batch`) so the plugins and kernels that declare depend on this small module.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any, NamedTuple

from busched.api.task import TaskInfo
from busched.fastpath.fit import NodeArrays

__all__ = ["Local", "Declaration", "declare", "same_template"]


class Local(NamedTuple):
    """A twin's answer for one template, as a vector that changes only on logged rows."""

    logs: tuple[list[int], ...]  # the change logs (rows, in order) its values follow
    one: Callable[[int], Any] | None  # one row's value, as the twin's vector holds it (None: rows never change)
    still: Callable[[], bool] | None = None  # False once the declaration no longer holds (None: always)


Declaration = Callable[[TaskInfo, NodeArrays], "Local | None"]


def declare(twin: Any, declaration: Declaration) -> Any:
    """Mark ``twin`` (a function) as answering row by row: ``declaration(task, arrays)`` gives its
    `Local` for the task's template, or None when its answer for the task is not row-local."""
    twin.row_local = declaration
    return twin


# the task fields a declared twin may read (its template); requests compare by value
_FIELDS = ("namespace", "labels", "annotations", "node_selector", "affinity", "tolerations",
           "topology_spread_constraints", "host_ports", "images", "extra", "best_effort", "qos")


_fields = attrgetter(*_FIELDS)


def same_template(a: TaskInfo, b: TaskInfo) -> bool:
    """Whether every field of ``a`` a declared twin reads equals ``b``'s."""
    for ra, rb in ((a.resreq, b.resreq), (a.init_resreq, b.init_resreq)):
        if ra is not rb and (ra.cpu != rb.cpu or ra.memory != rb.memory or ra.scalars != rb.scalars):
            return False
    return bool(_fields(a) == _fields(b))  # (tuples compare item by item, the same objects first)
