"""Which lent jobs a session wrote, or whose outputs it changed: a log, so close need not ask every job.

A lent job (busched.fastpath.lending) keeps its identity from session to session; what a session
writes on it is either its task index (the job is then *written*, and assembled afresh next time)
or its outputs, ``phase`` and ``conditions``, which close computes.  Asking every job whether it
was written, or looking at every steady job's phase, costs a pass over the cluster each cycle
whatever changed.  So the lending puts one list, the log, in every job it assembles, under `LOGGED`
in the job's ``derived`` map (busched.fastpath.memo): a job's first write empties that map
(`JobInfo.add_task` and the other task-index changes) and appends the job to the log as it does
(`emptied`), and whoever changes a lent job's outputs says so with `output_changed`.  A session
reads the log as ``ssn.jobs_logged()``; the next lending reads it too.

The log rides in ``derived`` rather than in a field of its own: a lent job's fields must stay what
a fresh conversion of its spec gives (tests/fastpath/test_kernels_snapshot.py compares them), and
``derived`` is a cache that is not part of the job's value.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LOGGED", "emptied", "output_changed", "log_of"]


class _LogKey:
    __slots__ = ()

    def __repr__(self) -> str:
        return "LOGGED"


LOGGED: Any = _LogKey()  # the key of the log in a lent job's ``derived`` map


def emptied(job: Any, derived: dict[Any, Any]) -> None:
    """``job``'s ``derived`` map (non-empty) is dropped as it is written: a lent job logs its first write."""
    log = derived.get(LOGGED)
    if log is not None:
        log.append(job)


def output_changed(job: Any) -> None:
    """``job``'s phase or conditions were changed by this session (a written job is logged already)."""
    log = job.derived.get(LOGGED)
    if log is not None:
        log.append(job)


def log_of(job: Any) -> list[Any] | None:
    """The log ``job`` reports to (None: not lent with one, or written since)."""
    log: list[Any] | None = job.derived.get(LOGGED)
    return log
