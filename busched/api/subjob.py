"""Sub-jobs: the gangs inside a job (Volcano's SubJobInfo and the podgroup's subGroupPolicy).

A podgroup may split its tasks into sub-groups: each ``subGroupPolicy`` entry
names label keys (``matchLabelKeys``) whose values, read from a task's labels,
pick the sub-job the task joins (one sub-job per distinct value tuple), a
``subGroupSize`` (the sub-job's own gang minimum), ``minSubGroups`` (how many
sub-jobs of that policy must be ready for the job to be), and an optional
``networkTopology`` of its own.  A task no policy claims joins the job's
*default* sub-job, whose id is the job's id; for a job without any policy
every task is there and its gang minimum is the job's ``minMember``.

The job keeps the index (``sub_jobs``, ``task_to_sub_job``, ``min_sub_jobs``)
current through `add_task_to_sub_job` / `delete_task_from_sub_job`, called
from `JobInfo.add_task` / `delete_task`.  A network topology is a plain dict
``{mode, highestTierAllowed, highestTierName}``; each job and sub-job owns its
copy because the session rewrites it when it opens (tier names to tiers, soft
to hard).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from busched.api.resource import Resource
from busched.api.task import TaskInfo, TaskStatus, allocated_status

if TYPE_CHECKING:  # (job.py imports this module: the job type is for the checker only)
    from busched.api.job import JobInfo

__all__ = ["SubJobInfo", "HARD", "SOFT", "JOB_ALLOCATED_HYPERNODE", "hard_topology", "sub_job_gid", "sub_job_id",
           "match_values", "init_job", "default_sub_job", "add_task_to_sub_job", "delete_task_from_sub_job",
           "contains_sub_job_policy",
           "contains_hard_topology", "contains_network_topology", "check_sub_job_valid",
           "check_sub_job_ready", "check_sub_job_pipelined", "clone_sub_job_status", "fit_failed_roles",
           "task_has_fit_errors", "need_continue_allocating", "reset_sub_job_fit_errors"]

HARD = "hard"
SOFT = "soft"
# task.extra key: the hypernode the task's sub-job occupied when allocate placed the task (node scoring reads it)
JOB_ALLOCATED_HYPERNODE = "job_allocated_hypernode"
# the statuses a ready sub-job counts (Volcano's ReadyTaskNum)
_READY = (TaskStatus.Bound, TaskStatus.Binding, TaskStatus.Running, TaskStatus.Allocated, TaskStatus.Succeeded)


def hard_topology(nt: Mapping[str, Any] | None) -> tuple[bool, int]:
    """(hard mode?, highest tier allowed); a spec without a tier number is never hard."""
    if nt is None or nt.get("highestTierAllowed") is None:
        return False, 0
    return nt.get("mode") == HARD, int(nt["highestTierAllowed"])


@dataclass(eq=False)
class SubJobInfo:
    gid: str  # the policy's group: "job/policy" (the job's id for the default sub-job)
    uid: str  # "job/policy-v1-v2" (the job's id for the default sub-job)
    job: str
    min_available: int = 1
    priority: int = 0  # the highest priority any of its tasks ever had
    match_index: int = 0  # the first match value, when it is a number
    network_topology: dict[str, Any] | None = None
    tasks: dict[str, TaskInfo] = field(default_factory=dict)
    status_index: dict[TaskStatus, dict[str, TaskInfo]] = field(default_factory=dict)
    allocated_hypernode: str = ""
    nominated_hypernode: str = ""

    # -- topology -------------------------------------------------------------------
    def is_hard_topology_mode(self) -> tuple[bool, int]:
        return hard_topology(self.network_topology)

    def is_soft_topology_mode(self) -> bool:
        return self.network_topology is not None and self.network_topology.get("mode") == SOFT

    def with_network_topology(self) -> bool:
        return self.network_topology is not None

    def convert_to_hard_topology(self, max_tier: int) -> None:
        """Soft mode becomes hard mode up to ``max_tier`` (the soft preference is then the gradient order)."""
        nt = self.network_topology
        if nt is None or nt.get("mode") != SOFT:
            return
        nt["mode"] = HARD
        nt["highestTierAllowed"] = max_tier
        nt["highestTierName"] = ""

    # -- task index -------------------------------------------------------------------
    def add_task(self, t: TaskInfo) -> None:
        uid = t.uid
        self.tasks[uid] = t
        idx = self.status_index.get(t.status)
        if idx is None:
            self.status_index[t.status] = {uid: t}
        else:
            idx[uid] = t
        if t.priority > self.priority:
            self.priority = t.priority

    def delete_task(self, t: TaskInfo) -> None:
        self.tasks.pop(t.uid, None)
        idx = self.status_index.get(t.status)
        if idx is not None:
            idx.pop(t.uid, None)
            if not idx:
                del self.status_index[t.status]

    def count(self, status: TaskStatus) -> int:
        return len(self.status_index.get(status, ()))

    # -- gang arithmetic --------------------------------------------------------------
    def ready_task_num(self) -> int:
        return sum(self.count(s) for s in _READY)

    def pending_best_effort_task_num(self) -> int:
        return sum(1 for t in self.status_index.get(TaskStatus.Pending, {}).values() if t.best_effort)

    def waiting_task_num(self) -> int:
        return self.count(TaskStatus.Pipelined)

    def allocated_task_num(self) -> int:
        return sum(len(ts) for s, ts in self.status_index.items() if allocated_status(s))

    def is_ready(self) -> bool:
        return self.ready_task_num() + self.pending_best_effort_task_num() >= self.min_available

    def is_pipelined(self) -> bool:
        return (self.waiting_task_num() + self.ready_task_num() + self.pending_best_effort_task_num()
                >= self.min_available)

    def get_min_resources(self) -> Resource:
        """A sub-job runs whole: what its pending tasks ask for."""
        r = Resource()
        for t in self.status_index.get(TaskStatus.Pending, {}).values():
            r.add(t.init_resreq)
        return r

    def __repr__(self) -> str:
        return f"SubJob({self.uid} min={self.min_available} tasks={len(self.tasks)} hn={self.allocated_hypernode!r})"


# -- ids and matching -----------------------------------------------------------------------
_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"


def _fnv32a(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def sub_job_gid(job: str, policy: str) -> str:
    return f"{job}/{policy}"


def sub_job_id(job: str, policy: str, values: list[str]) -> str:
    ident = "-".join(values)
    if len(ident) > 128:  # long tuples are hashed, as Volcano does (fnv32a, then k8s SafeEncodeString)
        ident = "".join(_ALPHANUMS[ord(c) % len(_ALPHANUMS)] for c in str(_fnv32a(ident.encode())))
    return f"{job}/{policy}-{ident}"


def _selector_matches(sel: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A Kubernetes LabelSelector (matchLabels, matchExpressions) against a label set."""
    for k, v in (sel.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in sel.get("matchExpressions") or []:
        key, op, values = e.get("key", ""), e.get("operator", ""), e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def match_values(policy: Mapping[str, Any], task: TaskInfo) -> list[str] | None:
    """The values of the policy's label keys on the task; None when the task is not the policy's.

    A policy without label keys claims no task (its empty tuple means "the default sub-job")."""
    sel = policy.get("labelSelector")
    if sel and not _selector_matches(sel, task.labels):
        return None
    keys = policy.get("matchLabelKeys") or []
    out: list[str] = []
    for k in keys:
        v = task.labels.get(k, "")
        if not v:
            return None
        out.append(v)
    return out


_new = object.__new__


def _new_sub_job(gid: str, uid: str, job: str, size: int | None, nt: Mapping[str, Any] | None,
                 values: list[str] | None) -> SubJobInfo:
    # SubJobInfo(gid=gid, uid=uid, job=job) field by field, in its field order (a cold snapshot
    # makes one per job; the dataclass's constructor with its default factories was most of it)
    sj = _new(SubJobInfo)
    sj.gid, sj.uid, sj.job = gid, uid, job
    sj.min_available = 1 if size is None else int(size)
    sj.priority = 0
    sj.match_index = 0
    sj.network_topology = None if nt is None else copy.deepcopy(dict(nt))
    sj.tasks = {}
    sj.status_index = {}
    sj.allocated_hypernode = ""
    sj.nominated_hypernode = ""
    if values:
        try:
            sj.match_index = int(values[0])
        except ValueError:
            pass
    return sj


# -- the job's index -------------------------------------------------------------------------
def init_job(job: JobInfo) -> None:
    """A new job: its own copy of the topology spec and each policy's minSubGroups."""
    if job.network_topology is not None:
        job.network_topology = copy.deepcopy(dict(job.network_topology))
    for p in job.subgroup_policy:
        job.min_sub_jobs[sub_job_gid(job.uid, p.get("name", ""))] = int(p.get("minSubGroups") or 0)


def contains_sub_job_policy(job: JobInfo) -> bool:
    return job.has_podgroup and bool(job.subgroup_policy)


def default_sub_job(job: JobInfo) -> SubJobInfo:
    sj = job.sub_jobs.get(job.uid)
    if sj is None:
        sj = job.sub_jobs[job.uid] = new_default_sub_job(job)
    return sj


def new_default_sub_job(job: JobInfo) -> SubJobInfo:
    """The default sub-job `default_sub_job` makes for ``job``, not yet in its map."""
    size = None if contains_sub_job_policy(job) else job.min_available
    return _new_sub_job(job.uid, job.uid, job.uid, size, job.network_topology, None)


def _sub_job_for(job: JobInfo, t: TaskInfo) -> SubJobInfo:
    if job.has_podgroup:
        for p in job.subgroup_policy:
            values = match_values(p, t)
            if values:
                name = p.get("name", "")
                uid = sub_job_id(job.uid, name, values)
                sj = job.sub_jobs.get(uid)
                if sj is None:
                    sj = job.sub_jobs[uid] = _new_sub_job(sub_job_gid(job.uid, name), uid, job.uid,
                                                          p.get("subGroupSize"), p.get("networkTopology"),
                                                          values)
                return sj
    return default_sub_job(job)


def add_task_to_sub_job(job: JobInfo, t: TaskInfo) -> None:
    # no policy to match (most jobs): the default sub-job, as `_sub_job_for` gives
    sj = _sub_job_for(job, t) if job.subgroup_policy and job.has_podgroup else default_sub_job(job)
    sj.add_task(t)
    job.task_to_sub_job[t.uid] = sj.uid


def delete_task_from_sub_job(job: JobInfo, t: TaskInfo) -> None:
    sj = job.sub_jobs.get(job.task_to_sub_job.pop(t.uid, ""))
    if sj is not None:
        sj.delete_task(t)


def contains_hard_topology(job: JobInfo) -> bool:
    return hard_topology(job.network_topology)[0] or any(
        sj.is_hard_topology_mode()[0] for sj in job.sub_jobs.values())


def contains_network_topology(job: JobInfo) -> bool:
    return job.network_topology is not None or any(sj.with_network_topology() for sj in job.sub_jobs.values())


def _per_group(job: JobInfo, cond: Callable[[SubJobInfo], bool]) -> dict[str, int]:
    n: dict[str, int] = {}
    for sj in job.sub_jobs.values():
        n.setdefault(sj.gid, 0)
        if cond(sj):
            n[sj.gid] += 1
    return n


def check_sub_job_valid(job: JobInfo) -> bool:
    """Enough sub-jobs exist for every policy's minSubGroups."""
    if not job.min_sub_jobs:
        return True  # no group asks for a minimum: nothing to count
    n = _per_group(job, lambda _: True)
    return all(n.get(gid, 0) >= m for gid, m in job.min_sub_jobs.items())


def check_sub_job_ready(job: JobInfo) -> bool:
    if not job.min_sub_jobs:
        return True  # no group asks for a minimum: nothing to count
    n = _per_group(job, SubJobInfo.is_ready)
    return all(m == 0 or n.get(gid, 0) >= m for gid, m in job.min_sub_jobs.items())


def check_sub_job_pipelined(job: JobInfo) -> bool:
    if not job.min_sub_jobs:
        return True
    n = _per_group(job, SubJobInfo.is_pipelined)
    return all(m == 0 or n.get(gid, 0) >= m for gid, m in job.min_sub_jobs.items())


def clone_sub_job_status(src: JobInfo, dst: JobInfo) -> None:
    """After a job clone rebuilt its sub-jobs from its tasks: carry the hypernode bookkeeping over."""
    dst.allocated_hypernode = src.allocated_hypernode
    for uid, sj in src.sub_jobs.items():
        d = dst.sub_jobs.get(uid)
        if d is not None:
            d.allocated_hypernode = sj.allocated_hypernode
            d.nominated_hypernode = sj.nominated_hypernode


# -- fit errors, per sub-job ------------------------------------------------------------------
def fit_failed_roles(job: JobInfo, sub_job: str) -> set[str]:
    return {job.tasks[uid].role for uid in job.nodes_fit_errors
            if uid in job.tasks and job.task_to_sub_job.get(uid) == sub_job}


def task_has_fit_errors(job: JobInfo, sub_job: str, t: TaskInfo) -> bool:
    return bool(t.role) and t.role in fit_failed_roles(job, sub_job)


def need_continue_allocating(job: JobInfo, sub_job: str) -> bool:
    """After a task of the sub-job failed predicates: still worth trying its other tasks?"""
    if job.min_available == len(job.tasks):
        return False
    sj = job.sub_jobs.get(sub_job)
    if sj is not None and sj.min_available >= len(sj.tasks):
        return False
    if contains_sub_job_policy(job):
        return True
    return job.need_continue_allocating()


def reset_sub_job_fit_errors(job: JobInfo, sub_job: str) -> None:
    for uid in [u for u in job.nodes_fit_errors if job.task_to_sub_job.get(u) == sub_job]:
        del job.nodes_fit_errors[uid]
