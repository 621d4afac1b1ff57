"""What `busched get` and `describe` say about missing references and failed tasks.

Volcano's scheduler skips a podgroup whose queue does not exist ("queue not found") and a pod whose
podgroup does not exist; so does ours (`busched.cache.cache.Cache.snapshot` leaves such a job out; a
task without its job is in no job of the session).  Nothing is written for them: these conditions
are computed from the specs when asked, so they cost the stream nothing and go away the moment the
queue or job is applied.  Their reasons are `busched explain`'s codes (``QueueMissing``,
``JobMissing``: `busched.scheduler.explain.REASONS`), so an operator sees one name in both.

A job whose tasks failed is not plainly Completed: Volcano's podgroup phase counts a failed task as
completed (`busched.framework.phase`), so the job's row carries how many failed and a ``TasksFailed``
condition naming them with their exit codes and reasons.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["job_conditions", "job_missing", "failure", "TASKS_FAILED", "SHOWN_FAILED"]

TASKS_FAILED = "TasksFailed"
SHOWN_FAILED = 3  # failed tasks named in the condition's message (the rest are counted)


def job_missing(task: Any, jobs: Mapping[str, Any]) -> str:
    """Why ``task`` waits for want of its job ("JobMissing: ..."), or "" when its job exists."""
    if not task.job:
        return "JobMissing: the task names no job; it is not scheduled"
    key = f"{task.namespace}/{task.job}"
    if key in jobs:
        return ""
    return f"JobMissing: job {key} does not exist; the task is not scheduled until it is applied"


def job_conditions(job: Any, queues: Mapping[str, Any], failed: Sequence[str], ntasks: int) -> list[dict[str, Any]]:
    """The conditions a job's row adds to its podgroup's: its queue missing (``Unschedulable``, reason
    ``QueueMissing``), its ``failed`` tasks (``TasksFailed``; each as `failure` tells it)."""
    out = []
    if job.queue not in queues:
        out.append(_condition("Unschedulable", "QueueMissing", f"queue {job.queue!r} does not exist; the job is "
                                                                "not scheduled until it is applied"))
    if failed:
        named = ", ".join(failed[:SHOWN_FAILED])
        more = f" and {len(failed) - SHOWN_FAILED} more" if len(failed) > SHOWN_FAILED else ""
        out.append(_condition(TASKS_FAILED, TASKS_FAILED, f"{len(failed)} of {ntasks} tasks failed: {named}{more}"))
    return out


def failure(key: str, result: Any, reason: str) -> str:
    """``ns/name (exit 3, OOMKilled)``: a failed task with what its agent said when it ended (``result``, the
    binding table's last for it), else why it failed (``reason``: its attempts ran out)."""
    said = []
    if result is not None and result.what == "Failed":
        if result.exit_code is not None:
            said.append(f"exit {result.exit_code}")
        if result.reason:
            said.append(result.reason)
    elif reason:
        said.append(reason)
    return f"{key} ({', '.join(said)})" if said else key


def _condition(type_: str, reason: str, message: str) -> dict[str, Any]:
    return {"type": type_, "status": "True", "reason": reason, "message": message}
