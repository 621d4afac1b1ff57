"""priority: order jobs and tasks by priority; lower-priority work is preemptable."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from busched.api.job import JobInfo
from busched.api.task import TaskInfo
from busched.framework import points
from busched.framework.arguments import Arguments
from busched.framework.session import Session

PERMIT = 1


def _desc(l: int, r: int) -> int:
    return -1 if l > r else (1 if l < r else 0)


class PriorityPlugin:
    name = "priority"
    reads_arguments = ()  # every argument it reads (busched.framework.arguments)
    reads_clock = False

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        self.arguments = Arguments.of(arguments)

    def on_session_open(self, ssn: Session) -> None:
        ssn.add_fn(points.TASK_ORDER, self.name, lambda l, r: _desc(l.priority, r.priority),
                   twin=lambda t: -t.priority)
        ssn.add_fn(points.JOB_ORDER, self.name, lambda l, r: _desc(l.priority, r.priority),
                   twin=lambda j: -j.priority)
        ssn.add_fn(points.SUB_JOB_ORDER, self.name, lambda l, r: _desc(l.priority, r.priority))

        def preemptable(preemptor: TaskInfo, preemptees: list[TaskInfo]) -> tuple[list[TaskInfo], int]:
            pj = ssn.jobs.get(preemptor.job)
            if pj is None:
                return [], PERMIT
            victims = []
            for t in preemptees:
                tj = ssn.jobs.get(t.job)
                if tj is None:
                    continue
                if tj.uid != pj.uid:
                    # between jobs of a queue: job priority decides
                    if tj.priority < pj.priority:
                        victims.append(t)
                elif t.priority < preemptor.priority:
                    # within a job: task priority decides
                    victims.append(t)
            return victims, PERMIT

        ssn.add_fn(points.PREEMPTABLE, self.name, preemptable)

        def unified_evictable(ctx: points.EvictionContext, candidates: list[TaskInfo]) -> tuple[list[TaskInfo], int]:
            # reclaim is about fairness between queues: priority does not gate it
            if ctx.kind == points.EVICT_GANG_RECLAIM:
                return candidates, PERMIT
            victims = []
            for t in candidates:
                tj = ssn.jobs.get(t.job)
                if tj is not None and tj.priority < ctx.job.priority:
                    victims.append(t)
            return victims, PERMIT

        ssn.add_fn(points.UNIFIED_EVICTABLE, self.name, unified_evictable)

        def starving(job: JobInfo) -> bool:
            return job.ready_task_num() + job.waiting_task_num() < len(job.tasks)

        ssn.add_fn(points.JOB_STARVING, self.name, starving)
