"""Gang arithmetic: the counts a job's task index gives (ready, waiting, pipelined, starving,
valid), the per-role minimums, and whether a job whose task failed predicates is worth going on.

Volcano keeps these in job_info.go beside the index; here they are a base class of `JobInfo`
(busched.api.job), apart from the index's changes, so that each count reads as what it asks
of the index.  Their methods are the job's (no extra call: actions and plugins ask them of
every job); slotless, so a job stays slotted.
"""

from __future__ import annotations

from busched.api.fit import FitErrors
from busched.api.task import TaskInfo, TaskStatus, allocated_status, completed_status, scheduled_status

__all__ = ["GangCounts"]

_READY = (TaskStatus.Bound, TaskStatus.Binding, TaskStatus.Running, TaskStatus.Allocated, TaskStatus.Succeeded)
_READY_SET = frozenset(_READY)
# the statuses `valid_task_num` counts: the allocated ones, Succeeded, Pipelined, Pending
_VALID = frozenset(s for s in TaskStatus if allocated_status(s)) | {TaskStatus.Succeeded, TaskStatus.Pipelined,
                                                                    TaskStatus.Pending}


class GangCounts:
    """The counts of `JobInfo` (busched.api.job), whose fields they read."""

    __slots__ = ()

    # the job's fields these read (JobInfo's)
    min_available: int
    task_min_available: dict[str, int]
    tasks: dict[str, TaskInfo]
    status_index: dict[TaskStatus, dict[str, TaskInfo]]
    pending_best_effort: int
    nodes_fit_errors: dict[str, FitErrors]

    @property
    def task_min_available_total(self) -> int:
        return sum(self.task_min_available.values())

    def tasks_in(self, status: TaskStatus) -> list[TaskInfo]:
        return list(self.status_index.get(status, {}).values())

    def count(self, status: TaskStatus) -> int:
        return len(self.status_index.get(status, ()))

    # -- gang arithmetic -----------------------------------------------------------
    def ready_task_num(self) -> int:
        # the index's own entries walked (a job's index holds a status or two, `_READY` five): the
        # same count as `ready_task_num_plain`, the reference (tests/api/test_gang_counts_ready.py)
        n = 0
        for s, ts in self.status_index.items():
            if s in _READY_SET:
                n += len(ts)
        return n

    def ready_task_num_plain(self) -> int:
        """`ready_task_num` as Volcano's ReadyTaskNum reads: each ready status asked of the index."""
        n = 0
        idx = self.status_index
        for s in _READY:
            ts = idx.get(s)
            if ts:
                n += len(ts)
        return n

    def waiting_task_num(self) -> int:
        return self.count(TaskStatus.Pipelined)

    def pending_best_effort_task_num(self) -> int:
        return self.pending_best_effort

    def allocated_task_num(self) -> int:
        return sum(len(ts) for s, ts in self.status_index.items() if allocated_status(s))

    def valid_task_num(self) -> int:
        # (a loop over the index with one set: gang's job_valid asks it of every job allocate sets up;
        # `valid_task_num_plain` is the reference, tests/api/test_gang_counts_ready.py)
        n = 0
        for s, ts in self.status_index.items():
            if s in _VALID:
                n += len(ts)
        return n

    def valid_task_num_plain(self) -> int:
        return sum(len(ts) for s, ts in self.status_index.items()
                   if allocated_status(s) or s in (TaskStatus.Succeeded, TaskStatus.Pipelined, TaskStatus.Pending))

    # (loops rather than sums over generators: a session's close asks these of every job)
    def scheduled_task_num(self) -> int:
        n = 0
        for s, ts in self.status_index.items():
            if scheduled_status(s):
                n += len(ts)
        return n

    def completed_task_num(self) -> int:
        n = 0
        for s, ts in self.status_index.items():
            if completed_status(s):
                n += len(ts)
        return n

    def releasing_scheduled_task_num(self) -> int:
        ts = self.status_index.get(TaskStatus.Releasing)
        if not ts:
            return 0
        return sum(1 for t in ts.values() if t.node_name)

    def is_ready(self) -> bool:
        return self.ready_task_num() + self.pending_best_effort_task_num() >= self.min_available

    def is_pipelined(self) -> bool:
        return (self.waiting_task_num() + self.ready_task_num() + self.pending_best_effort_task_num()
                >= self.min_available)

    def is_starving(self) -> bool:
        return self.waiting_task_num() + self.ready_task_num() < self.min_available

    def _roles(self, statuses: set[TaskStatus] | None, pending_best_effort: bool) -> dict[str, int]:
        out: dict[str, int] = {}
        for s, ts in self.status_index.items():
            if statuses is not None and (allocated_status(s) or s in statuses):
                for t in ts.values():
                    out[t.role] = out.get(t.role, 0) + 1
            elif s == TaskStatus.Pending and pending_best_effort:
                for t in ts.values():
                    if t.init_resreq.is_empty():
                        out[t.role] = out.get(t.role, 0) + 1
        return out

    def allocated_roles(self) -> dict[str, int]:
        return self._roles({TaskStatus.Succeeded}, True)

    def check_task_valid(self) -> bool:
        if not self.task_min_available:
            return True  # no per-role minimum: nothing to count (the counts below would say so)
        if self.min_available < self.task_min_available_total:
            return True
        actual = self._roles({TaskStatus.Succeeded, TaskStatus.Pipelined, TaskStatus.Pending}, False)
        return all(m == 0 or actual.get(role, 0) >= m for role, m in self.task_min_available.items())

    def check_task_ready(self) -> bool:
        if not self.task_min_available:
            return True  # no per-role minimum: nothing to count (the counts below would say so)
        if self.min_available < self.task_min_available_total:
            return True
        occ = self.allocated_roles()
        return all(occ.get(role, 0) >= m for role, m in self.task_min_available.items())

    def check_task_pipelined(self) -> bool:
        if not self.task_min_available:
            return True  # no per-role minimum: nothing to count (the counts below would say so)
        if self.min_available < self.task_min_available_total:
            return True
        occ = self._roles({TaskStatus.Succeeded, TaskStatus.Pipelined}, True)
        return all(occ.get(role, 0) >= m for role, m in self.task_min_available.items())

    def check_task_starving(self) -> bool:
        if not self.task_min_available:
            return False  # no per-role minimum: nothing to count (the counts below would say so)
        if self.min_available < self.task_min_available_total:
            return True
        occ = self._roles({TaskStatus.Succeeded, TaskStatus.Pipelined}, False)
        return any(occ.get(role, 0) < m for role, m in self.task_min_available.items())

    # -- fit errors ------------------------------------------------------------------
    def fit_failed_roles(self) -> set[str]:
        return {self.tasks[uid].role for uid in self.nodes_fit_errors if uid in self.tasks}

    def task_has_fit_errors(self, t: TaskInfo) -> bool:
        return bool(t.role) and t.role in self.fit_failed_roles()

    def need_continue_allocating(self) -> bool:
        """After a task failed predicates, is it still worth trying the job's other tasks?"""
        if self.min_available == len(self.tasks):
            return False
        failed = self.fit_failed_roles()
        pending: dict[str, int] = {}
        for t in self.status_index.get(TaskStatus.Pending, {}).values():
            pending[t.role] = pending.get(t.role, 0) + 1
        if self.min_available < self.task_min_available_total:
            left = sum(c for role, c in pending.items() if role not in failed)
            return self.ready_task_num() + left >= self.min_available
        allocated = self.allocated_roles()
        for role in failed:
            m = self.task_min_available.get(role, 0)
            if m and allocated.get(role, 0) < m:
                return False
        return True
