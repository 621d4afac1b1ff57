"""A podgroup's phase from its tasks, as Volcano's jobStatus computes it when a session closes.

`close_phases` (what `busched.framework.session.Session.close` runs) applies it
to every job; a steady job's phase is kept from session to session
(`busched.fastpath.memo`), which `is_steady` tells.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from busched.api.job import JobInfo, PodGroupPhase
from busched.api.outputs import output_changed
from busched.api.task import TaskStatus
from busched.fastpath import memo as reuse

if TYPE_CHECKING:
    from busched.framework.session import Session

__all__ = ["close_phases", "is_steady", "pod_group_phase", "unschedulable"]


def pod_group_phase(job: JobInfo, unschedulable: bool) -> str:
    if job.count(TaskStatus.Running) and unschedulable:
        return PodGroupPhase.Unknown
    scheduled = job.scheduled_task_num() + job.releasing_scheduled_task_num()
    if scheduled >= job.min_available:
        if scheduled == job.completed_task_num():
            return PodGroupPhase.Completed
        return PodGroupPhase.Running
    if job.phase != PodGroupPhase.Inqueue:
        return PodGroupPhase.Pending
    return job.phase


def is_steady(job: JobInfo) -> bool:
    """A lent job whose phase is what its tasks give when it is not unschedulable."""
    return (job.has_podgroup and not job.written
            and reuse.job_value(job, ("phase", job.phase, False), lambda j: pod_group_phase(j, False)) == job.phase)


def unschedulable(conds: list[dict[str, Any]], session_uid: str) -> bool:
    """Whether the session ``session_uid`` marked these podgroup conditions Unschedulable."""
    return any(c.get("type") == "Unschedulable" and c.get("status") == "True"
               and c.get("transitionID") == session_uid for c in conds)


def close_phases(ssn: Session) -> None:
    """Recompute every job's podgroup phase (Volcano's jobStatus at closeSession).

    A *steady* job (lent, its phase what its tasks give when it is not unschedulable, kept from
    session to session: busched.fastpath.memo) keeps its phase unless this session wrote it
    or marked it unschedulable; only those are looked at again."""
    steady, others = reuse.split(ssn, "close.steady", list(ssn.jobs.values()), is_steady)
    log = ssn.jobs_logged()
    seen: Any = None  # many jobs share one conditions list (gang's): look at each list once
    marked = False
    if log is None:  # the reference: every steady job looked at
        for job in steady.values():
            conds = job.conditions
            if conds is not seen:
                seen = conds
                marked = unschedulable(conds, ssn.uid)
            if marked or job.written:
                job.phase = pod_group_phase(job, marked)
    else:
        # a steady job this session neither wrote nor marked (a new conditions list: an output
        # change, so logged) is not in the log (busched.api.outputs): only the logged ones are looked at
        logged: JobInfo
        for logged in dict.fromkeys(log):
            if steady.get(logged.uid) is logged:
                marked = unschedulable(logged.conditions, ssn.uid)
                if marked or logged.written:
                    _set_phase(logged, pod_group_phase(logged, marked))
    if PLAIN_OTHERS:  # the reference: each job's conditions looked at
        for job in others.values():
            if job.has_podgroup:
                _set_phase(job, pod_group_phase(job, unschedulable(job.conditions, ssn.uid)))
        return
    seen = None  # (gang gives every ready job one list: each list looked at once, as above)
    for job in others.values():
        if job.has_podgroup:
            conds = job.conditions
            if conds is not seen:
                seen = conds
                marked = unschedulable(conds, ssn.uid)
            _set_phase(job, pod_group_phase(job, marked))


# True: the reference, `close_phases` asks `unschedulable` of every job that is not steady
# (tests/framework/test_close_phases.py)
PLAIN_OTHERS = False


def _set_phase(job: JobInfo, phase: str) -> None:
    if job.phase != phase:
        job.phase = phase
        output_changed(job)
