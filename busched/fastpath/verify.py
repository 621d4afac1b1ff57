"""Verifying a lending: did a session change a lent object without saying so?

With ``FastPathSettings(verify=True)`` (busched.fastpath) every lent object that is not
volatile is fingerprinted as it is lent (`busched.fastpath.lending`); when its lease comes
back, `check` raises `SharedStateMutated` naming any object whose fields changed while its
``written`` flag stayed down.  Slow on purpose: it is for tests and for hunting a bug.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from busched.api import shared
from busched.api.job import JobInfo
from busched.api.node import NodeInfo
from busched.api.task import TaskInfo

if TYPE_CHECKING:
    from busched.fastpath.lease import Lease

__all__ = ["SharedStateMutated", "fingerprint_job", "fingerprint_node", "check", "check_logged"]


class SharedStateMutated(AssertionError):  # noqa: N818 - public (lending re-exports it, docs and tests name it)
    """A session changed a lent object without flagging it ``written``."""


_JOB_SKIP = frozenset({"written", "phase", "conditions", "derived"})
_NODE_SKIP = frozenset({"written", "listeners", "derived"})
_TASK_FIELDS: tuple[str, ...] = TaskInfo.__slots__  # (slotted: no instance dict)
_JOB_FIELDS = tuple(k for k in JobInfo.__slots__ if k not in _JOB_SKIP)


def _task_print(t: TaskInfo) -> tuple:
    return (id(t),) + tuple((k, _value(getattr(t, k))) for k in _TASK_FIELDS)


def _value(v: Any) -> Any:
    if hasattr(v, "to_dict") and hasattr(v, "scalars"):
        return ("Resource", repr(sorted(v.to_dict().items())))
    if isinstance(v, dict):
        return tuple((k, _value(x)) for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return tuple(_value(x) for x in v)
    if isinstance(v, TaskInfo):
        return _task_print(v)
    if hasattr(v, "__dict__") and not isinstance(v, type):
        return (type(v).__name__, id(v), tuple((k, _value(x)) for k, x in v.__dict__.items()
                                               if k not in ("job",)))
    if hasattr(v, "__slots__"):
        return (type(v).__name__, id(v), tuple((s, _value(getattr(v, s, None))) for s in v.__slots__))
    return repr(v)


def fingerprint_job(job: JobInfo) -> dict[str, Any]:
    """Every field of a job (its tasks' fields and identities included) but those a session may set."""
    return {k: _value(getattr(job, k)) for k in _JOB_FIELDS}


def fingerprint_node(node: NodeInfo) -> dict[str, Any]:
    return {k: _value(v) for k, v in node.__dict__.items() if k not in _NODE_SKIP}


def check(lease: Lease) -> None:
    """Raise `SharedStateMutated` if a session changed a lent object it did not flag ``written``,
    or filled one of the empty containers converted tasks share (busched.api.shared)."""
    if not shared.empties_intact():
        raise SharedStateMutated("a session changed the empty labels or list converted tasks share")
    for kind, obj, before in lease.prints or ():
        if obj.written:
            continue
        after = fingerprint_job(obj) if kind == "job" else fingerprint_node(obj)
        if after != before:
            fields = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
            name = obj.uid if kind == "job" else obj.name
            raise SharedStateMutated(f"{kind} {name}: a session changed {', '.join(fields)} "
                                     f"without flagging it written")


def check_logged(outputs: Iterable[tuple[Any, str, Any]], heard: list[Any]) -> None:
    """Raise `SharedStateMutated` if a lent job (``outputs``: job, phase as lent, conditions as lent) was
    written, or given another phase, without the session logging it (busched.api.outputs): the next
    lending and close would not look at it again."""
    logged = set(map(id, heard))
    for job, phase, _ in outputs:
        if id(job) not in logged and (job.written or job.phase != phase):
            what = "written" if job.written else f"given phase {job.phase!r}"
            raise SharedStateMutated(f"job {job.uid} was {what} in a session without being logged "
                                     "(busched.api.outputs)")
