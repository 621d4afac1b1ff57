"""gang: a job runs only when at least minMember of its tasks (and minTaskMember per role) can.

Jobs with too few valid tasks are invalid; a job is ready once enough tasks are
allocated; not-ready jobs go first; only tasks above a job's minimum are
preemptable or reclaimable.  On close, each job gets a condition saying why it
is (un)schedulable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from busched.api.job import JobInfo
from busched.api.outputs import output_changed
from busched.api.task import TaskInfo, TaskStatus, allocated_status
from busched.framework import points
from busched.framework.arguments import Arguments
from busched.framework.session import Session, ValidateResult

NOT_ENOUGH_PODS_OF_TASK = "NotEnoughPodsOfTask"
NOT_ENOUGH_PODS = "NotEnoughTasks"
NOT_ENOUGH_RESOURCES = "NotEnoughResources"


class GangPlugin:
    name = "gang"
    reads_arguments = ()  # every argument it reads (busched.framework.arguments)
    reads_clock = False
    # a ready job whose conditions were none but (maybe) Scheduled gets the list every quiet job gets, at
    # close (`_close_job`); False: the reference, `set_condition` builds each its own
    shared_scheduled = True

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        self.arguments = Arguments.of(arguments)

    def on_session_open(self, ssn: Session) -> None:
        def valid(job: JobInfo) -> ValidateResult | None:
            if not job.check_task_valid():
                return ValidateResult(False, NOT_ENOUGH_PODS_OF_TASK,
                                      "Not enough valid pods of each task for gang-scheduling")
            if not job.check_sub_job_valid():
                return ValidateResult(False, NOT_ENOUGH_PODS_OF_TASK,
                                      "Not enough valid subGroups of each task for gang-scheduling")
            vtn = job.valid_task_num()
            if vtn < job.min_available:
                return ValidateResult(False, NOT_ENOUGH_PODS,
                                      f"Not enough valid tasks for gang-scheduling, valid: {vtn}, "
                                      f"min: {job.min_available}")
            return None

        ssn.add_fn(points.JOB_VALID, self.name, valid)

        def evictable(_: TaskInfo, preemptees: list[TaskInfo]) -> tuple[list[TaskInfo], int]:
            occupied: dict[str, int] = {}
            victims = []
            for t in preemptees:
                job = ssn.jobs.get(t.job)
                if job is None:
                    continue
                if job.uid not in occupied:
                    occupied[job.uid] = job.ready_task_num()
                if occupied[job.uid] > job.min_available:
                    occupied[job.uid] -= 1
                    victims.append(t)
            return victims, 1

        ssn.add_fn(points.PREEMPTABLE, self.name, evictable)
        ssn.add_fn(points.RECLAIMABLE, self.name, evictable)
        # the gang actions keep minAvailable themselves (safe and whole bundles): every candidate passes
        ssn.add_fn(points.UNIFIED_EVICTABLE, self.name, lambda _ctx, cands: (cands, 1))

        def job_order(l: JobInfo, r: JobInfo) -> int:
            lr, rr = l.is_ready(), r.is_ready()
            if lr == rr:
                return 0
            return 1 if lr else -1

        ssn.add_fn(points.JOB_ORDER, self.name, job_order, twin=lambda j: 1 if j.is_ready() else 0)
        ssn.add_fn(points.JOB_READY, self.name,
                   lambda j: j.check_task_ready() and j.check_sub_job_ready() and j.is_ready())
        ssn.add_fn(points.JOB_PIPELINED, self.name,
                   lambda j: 1 if j.check_task_pipelined() and j.check_sub_job_pipelined() and j.is_pipelined()
                   else -1)
        # sub-jobs (busched.api.subjob): the same gang rules, one sub-job at a time
        ssn.add_fn(points.SUB_JOB_ORDER, self.name, lambda l, r: job_order(l, r))
        ssn.add_fn(points.SUB_JOB_READY, self.name, lambda sj: sj.is_ready())
        ssn.add_fn(points.SUB_JOB_PIPELINED, self.name, lambda sj: 1 if sj.is_pipelined() else -1)
        ssn.add_fn(points.JOB_STARVING, self.name, lambda j: j.is_starving())

    def on_session_close(self, ssn: Session) -> None:
        # one dict, and one list, for every ready job: conditions are replaced, never changed in place
        scheduled = {"type": "Scheduled", "status": "True", "transitionID": ssn.uid,
                     "reason": "tasks in gang are ready to be scheduled", "message": ""}
        only_scheduled = [scheduled]
        only = only_scheduled if self.shared_scheduled else None  # (for the jobs `_close_job` finds ready)
        # quiet: lent, ready, and with no condition but (maybe) Scheduled as lent; kept while the
        # jobs are the same (busched.fastpath.memo), so such a job just gets the new list
        quiet, others = ssn.split("gang.quiet", list(ssn.jobs.values()), _is_quiet)
        log = ssn.jobs_logged()
        if log is None:  # the reference: every quiet job asked whether this session wrote it
            for job in quiet.values():
                if job.written:
                    self._close_job(ssn, job, scheduled)
                else:
                    job.conditions = only_scheduled
        else:
            # the quiet jobs this session wrote are those logged (busched.api.outputs): every quiet
            # job gets the list, no question asked, then those get their own, from their conditions as lent
            written = [(j, j.conditions) for j in dict.fromkeys(log) if j.written and quiet.get(j.uid) is j]
            for job in quiet.values():
                job.conditions = only_scheduled
            for job, conds in written:
                job.conditions = conds
                self._close_job(ssn, job, scheduled, only)
        for job in others.values():
            self._close_job(ssn, job, scheduled, only)

    @staticmethod
    def _close_job(ssn: Session, job: JobInfo, scheduled: dict[str, Any],
                   only_scheduled: list[dict[str, Any]] | None = None) -> None:
        """``only_scheduled``: the list ``[scheduled]``, which a ready job with no condition but (maybe)
        Scheduled gets as it is (what `set_condition` would build anew: the condition replaced or
        appended); None: the reference, a list of its own."""
        if not job.tasks:
            return
        if not job.is_ready():
            if _skip_for_releasing(job):
                return
            schedulable = job.ready_task_num() + sum(
                1 for t in job.status_index.get(TaskStatus.Pending, {}).values()
                if t.last_status is not None and allocated_status(t.last_status))
            msg = (f"{job.min_available - schedulable}/{len(job.tasks)} tasks in gang unschedulable: "
                   f"{fit_error_message(job)}")
            set_condition(job, {"type": "Unschedulable", "status": "True", "transitionID": ssn.uid,
                                "reason": NOT_ENOUGH_RESOURCES, "message": msg})
        elif only_scheduled is not None and (not job.conditions or (
                len(job.conditions) == 1 and job.conditions[0].get("type") == "Scheduled")):
            job.conditions = only_scheduled
            output_changed(job)
        else:
            set_condition(job, scheduled)


def _is_quiet(job: JobInfo) -> bool:
    conds = job.conditions
    return (not job.written and bool(job.tasks) and job.is_ready()
            and (not conds or (len(conds) == 1 and conds[0].get("type") == "Scheduled")))


def _skip_for_releasing(job: JobInfo) -> bool:
    releasing = job.releasing_scheduled_task_num()
    if releasing == 0:
        return False
    if job.count(TaskStatus.Pending) or job.count(TaskStatus.Pipelined):
        return False
    return job.scheduled_task_num() + releasing >= job.min_available


def set_condition(job: JobInfo, cond: dict[str, Any]) -> None:
    """A new list, never the job's changed in place: a lent job's list is its spec's
    (busched.fastpath.lending)."""
    conds = list(job.conditions)
    for i, c in enumerate(conds):
        if c.get("type") == cond["type"]:
            conds[i] = cond
            break
    else:
        conds.append(cond)
    job.conditions = conds
    output_changed(job)


def fit_error_message(job: JobInfo) -> str:
    """Volcano's JobInfo.FitError: a histogram of task statuses, then the first task's fit error."""
    hist = {s.name: len(ts) for s, ts in job.status_index.items()}
    hist["minAvailable"] = job.min_available
    state = "PodGroupReady" if job.is_ready() else "PodGroupNotReady"
    msg = f"{state}, " + ", ".join(sorted(f"{v} {k}" for k, v in hist.items()))
    if job.job_fit_errors:
        return msg + ". Origin reason is: " + job.job_fit_errors
    for uid in sorted(job.tasks):
        fe = job.nodes_fit_errors.get(uid)
        if fe is not None:
            return msg + f". Origin reason is {job.tasks[uid].name}: {fe}"
    return msg
