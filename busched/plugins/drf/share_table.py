"""drf's table of job shares: the record it keeps per job (`_Attr`) and a first open's table in one loop.

A restart's first open asks drf for the share of every job of the cluster (87,000 of them); `_attrs_of`
builds that table in one pass, sharing one record among untouched jobs that hold the same allocation,
where the reference asks ``ssn.memo`` job by job (`DrfPlugin.bulk_open` picks between them,
tests/framework/test_queue_totals.py compares them).  It sits apart from the plugin so the plugin
module reads as Volcano's drf: its hooks, shares and hierarchy.
"""

from __future__ import annotations

from typing import Any

from busched.api.job import JobInfo
from busched.api.resource import Resource
from busched.api.task import TaskStatus, allocated_status

__all__: list[str] = []


class _Attr:
    __slots__ = ("share", "dominant", "allocated")

    def __init__(self, allocated: Resource | None = None, share: float = 0.0, dominant: str = "") -> None:
        self.allocated = allocated if allocated is not None else Resource()
        self.share = share
        self.dominant = dominant

    def clone(self) -> _Attr:
        return _Attr(self.allocated.clone(), self.share, self.dominant)


_MISSING: Any = object()
_ALLOCATED = frozenset(s for s in TaskStatus if allocated_status(s))


def _attrs_of(jobs: list[JobInfo], key: Any, same: dict[tuple[Any, ...], _Attr],
              attr_of: Any) -> dict[str, _Attr]:
    """``{j.uid: ssn.memo(j, key, <on_session_open's attr_of>) for j in jobs}`` in one loop (a
    restart's first open asks it of 87,000 jobs): each job's kept share, else the attr shared by the
    untouched jobs of one allocated status holding the same allocation, else ``attr_of(job)``;
    kept in the job's ``derived`` map as `busched.fastpath.memo.job_value` keeps it."""
    out: dict[str, _Attr] = {}
    allocated, missing, pending = _ALLOCATED, _MISSING, TaskStatus.Pending
    waiting: _Attr | None = None  # the attr of a job holding nothing, shared by all such jobs
    for j in jobs:
        d = j.derived
        v = d.get(key, missing)
        if v is missing:
            idx = j.status_index
            if len(idx) == 1 and not j.written and next(iter(idx)) in allocated:
                a = j.allocated
                k = (a.cpu, a.memory, *a.scalars.items()) if a.scalars else (a.cpu, a.memory)
                v = same.get(k)
                if v is None:
                    v = same[k] = attr_of(j)
            elif len(idx) == 1 and next(iter(idx)) is pending:
                # only pending tasks (an arriving job): ``attr_of`` sums no task, so its attr is the
                # share of nothing, the same for every such job (shared attrs are copied before they
                # change: `_private`); tests/plugins/test_drf_waiting.py
                if waiting is None:
                    waiting = attr_of(j)
                v = waiting
            else:
                v = attr_of(j)
            d[key] = v
        out[j.uid] = v
    return out
