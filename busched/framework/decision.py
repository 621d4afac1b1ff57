"""What a session hands back: its decisions (binds, evictions) and the fit errors plugins raise.

Kept apart from `busched.framework.session` so that the statement, the plugins and
the session's readers can name a decision or build a fit error without the
session's dispatchers; the session re-exports both.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from busched.api.fit import Code, FitError, Status
from busched.api.node import NodeInfo
from busched.api.task import TaskInfo

__all__ = ["Decision", "fit_error"]


@dataclass
class Decision:
    kind: str  # bind | evict
    task: str  # "namespace/name"
    node: str
    reason: str = ""
    annotations: dict[str, str] = field(default_factory=dict)  # a bind's: added to the task's (its devices)


def fit_error(task: TaskInfo, node: NodeInfo, reason: str, plugin: str = "",
              code: Code = Code.Unschedulable) -> FitError:
    """A FitError for ``task`` on ``node`` with one status (what a predicate plugin raises)."""
    return FitError(task.key, node.name, [Status(code, reason, plugin)])
