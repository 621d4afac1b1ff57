"""Victim bundles for the gang eviction actions (gangpreempt, gangreclaim).

The victims a gang action may take from one job on a candidate domain come as
at most two bundles:

- a *safe* bundle: tasks the job can lose and stay gang-ready -- its ready tasks
  stay at or above minAvailable, each role with a minTaskMember keeps it, and
  each sub-group policy keeps its minSubGroups ready sub-jobs.  A job already
  below minAvailable puts every candidate in its safe bundle (nothing more can
  break);
- a *whole* bundle: the rest.  Evicting any of them breaks the gang, so the
  whole job is counted as its cost, and it is offered only with
  ``allowWholeBundle``; the unified-evictable vote takes all of it or none.

Bundles are sorted safe first, then by the victim's job (preempt: the job
order reversed, the least important job first; reclaim: the victim queue
order), then by return on investment -- how much of the need the bundle frees
locally over how much of the need the whole job holds -- then by job and task
uid, so the order is deterministic.  Volcano: pkg/scheduler/actions/utils/bundle.go.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

from busched.api.job import JobInfo
from busched.api.queue import QueueInfo
from busched.api.resource import Resource, total
from busched.api.subjob import SubJobInfo
from busched.api.task import TaskInfo

__all__ = ["SAFE", "WHOLE", "Bundle", "job_bundles", "flatten", "keep_allowed", "sort_for_preempt",
           "sort_for_reclaim"]

SAFE, WHOLE = 0, 1


@dataclass
class Bundle:
    kind: int  # SAFE or WHOLE
    job: JobInfo
    tasks: list[TaskInfo]
    local: Resource  # what the bundle's tasks hold on the domain
    whole: Resource  # what evicting it costs beyond them: the whole job (empty for a safe bundle)


def job_bundles(job: JobInfo, candidates: list[TaskInfo]) -> list[Bundle]:
    """Split one job's candidate tasks into its safe and whole bundles (lowest priority first)."""
    if not candidates:
        return []
    tasks = sorted(candidates, key=lambda t: (t.priority, t.uid))
    job_surplus = job.ready_task_num() - job.min_available
    if job_surplus < 0:  # not gang-ready already: evicting more breaks nothing further
        return [Bundle(SAFE, job, tasks, total(t.resreq for t in tasks), Resource())]

    # roles: how many tasks each role with a minimum can lose (skipped, as the gang check does,
    # when minAvailable is below the roles' minimums together)
    enforce_roles = job.min_available >= job.task_min_available_total
    role_surplus: dict[str, int] = {}
    if enforce_roles:
        ready = job.allocated_roles()
        role_surplus = {role: ready.get(role, 0) - m for role, m in job.task_min_available.items()}

    # sub-group policies: how many ready sub-jobs each group can lose; a sub-job missing a pod is broken
    enforce_sub_jobs = bool(job.min_sub_jobs)
    broken: set[str] = set()
    group_surplus: dict[str, int] = {}
    if enforce_sub_jobs:
        for each in job.sub_jobs.values():
            if each.is_ready():
                group_surplus[each.gid] = group_surplus.get(each.gid, 0) + 1
            else:
                broken.add(each.uid)
        for gid, m in job.min_sub_jobs.items():
            group_surplus[gid] = group_surplus.get(gid, 0) - m

    safe: list[TaskInfo] = []
    whole: list[TaskInfo] = []
    for t in tasks:
        has_role_min = enforce_roles and t.role in job.task_min_available
        role_safe = not has_role_min or role_surplus[t.role] > 0
        sj: SubJobInfo | None = None
        group_safe = True
        if enforce_sub_jobs:
            sj = job.sub_jobs.get(job.task_to_sub_job.get(t.uid, ""))
            group_safe = sj is not None and (sj.uid in broken or group_surplus.get(sj.gid, 0) > 0)
        if job_surplus > 0 and role_safe and group_safe:
            safe.append(t)
            job_surplus -= 1
            if has_role_min:
                role_surplus[t.role] -= 1
            if sj is not None and sj.uid not in broken:  # the first eviction breaks the sub-job
                broken.add(sj.uid)
                group_surplus[sj.gid] = group_surplus.get(sj.gid, 0) - 1
        else:
            whole.append(t)

    out = []
    if safe:
        out.append(Bundle(SAFE, job, safe, total(t.resreq for t in safe), Resource()))
    if whole:
        out.append(Bundle(WHOLE, job, whole, total(t.resreq for t in whole), job.total_request.clone()))
    return out


def flatten(bundles: list[Bundle]) -> list[TaskInfo]:
    return [t for b in bundles for t in b.tasks]


def keep_allowed(bundles: list[Bundle], allowed: set[str]) -> list[Bundle]:
    """The bundles left once only ``allowed`` task uids may go: a safe bundle keeps its allowed
    tasks, a whole bundle is kept only when every one of its tasks is allowed."""
    out = []
    for b in bundles:
        ok = [t for t in b.tasks if t.uid in allowed]
        if b.kind == WHOLE:
            if ok and len(ok) == len(b.tasks):
                out.append(b)
        elif ok:
            out.append(Bundle(b.kind, b.job, ok, total(t.resreq for t in ok), b.whole))
    return out


def _score(res: Resource, need: Resource, cap: bool) -> float:
    score = 0.0
    for name in need.names():
        n = need.get(name)
        if n <= 0:
            continue
        v = res.get(name)
        if cap and v > n:
            v = n
        score += v / n
    return score


def _roi(b: Bundle, need: Resource) -> float:
    cost = _score(b.whole, need, False)
    if cost == 0:
        return math.inf
    return _score(b.local, need, True) / cost


def _tie_break(l: Bundle, r: Bundle) -> int:
    lk = (l.job.uid, l.tasks[0].uid if l.tasks else "", len(l.tasks))
    rk = (r.job.uid, r.tasks[0].uid if r.tasks else "", len(r.tasks))
    return -1 if lk < rk else (1 if lk > rk else 0)


def _sort(bundles: list[Bundle], need: Resource, before: Callable[[Bundle, Bundle], bool | None]) -> None:
    roi = {id(b): _roi(b, need) for b in bundles}

    def cmp(l: Bundle, r: Bundle) -> int:
        if l.kind != r.kind:
            return -1 if l.kind < r.kind else 1
        first = before(l, r)
        if first is not None:
            return -1 if first else 1
        if roi[id(l)] != roi[id(r)]:
            return -1 if roi[id(l)] > roi[id(r)] else 1
        return _tie_break(l, r)

    bundles.sort(key=functools.cmp_to_key(cmp))


def sort_for_preempt(bundles: list[Bundle], need: Resource, job_order: Callable[[JobInfo, JobInfo], bool]) -> None:
    """Safe first; then the victim jobs in reversed job order (the one scheduled last goes first)."""

    def before(l: Bundle, r: Bundle) -> bool | None:
        if l.job.uid == r.job.uid:
            return None
        lr, rl = not job_order(l.job, r.job), not job_order(r.job, l.job)
        return lr if lr != rl else None

    _sort(bundles, need, before)


def sort_for_reclaim(bundles: list[Bundle], need: Resource, queues: dict[str, QueueInfo],
                     queue_less: Callable[[QueueInfo, QueueInfo], bool]) -> None:
    """Safe first; then the victims' queues in ``queue_less`` order (the victim queue order)."""

    def before(l: Bundle, r: Bundle) -> bool | None:
        lq, rq = queues.get(l.job.queue), queues.get(r.job.queue)
        if lq is None or rq is None or lq.uid == rq.uid:
            return None
        lr, rl = queue_less(lq, rq), queue_less(rq, lq)
        return lr if lr != rl else None

    _sort(bundles, need, before)
