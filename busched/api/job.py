"""Jobs (Volcano PodGroups) with their task index.

`JobInfo` is Volcano's job_info.go: the podgroup's fields, the task index (tasks by uid and by
status, with the running sums) and its changes.  The gang arithmetic that reads the index
(ready, waiting, pipelined, starving, valid; per-role minimums; fit errors) is `GangCounts`
(busched.api.gang_counts), a base of `JobInfo`: its methods are the job's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from busched.api import move_sums, outputs, subjob
from busched.api.fit import FitErrors
from busched.api.gang_counts import GangCounts
from busched.api.resource import PODS, Resource, exceeded_part
from busched.api.task import TaskInfo, TaskStatus, allocated_status, parse_bool

__all__ = ["JobInfo", "PodGroupPhase", "unsettled"]


QUEUE_ALLOCATION_GATE = "scheduling.volcano.sh/queue-allocation-gate"


class PodGroupPhase:
    Pending = "Pending"
    Inqueue = "Inqueue"
    Running = "Running"
    Unknown = "Unknown"
    Completed = "Completed"


_PENDING = TaskStatus.Pending  # (an enum member read from its class costs a metaclass lookup)
_ALLOCATED = frozenset(s for s in TaskStatus if allocated_status(s))  # `allocated_status`, without the call
# task statuses an allocating action may change (place, pipeline, dispatch)
# (also read by busched.fastpath.lending_cold's settled jobs)
_PLACEABLE = frozenset({TaskStatus.Pending, TaskStatus.Pipelined, TaskStatus.Allocated})


@dataclass(eq=False, slots=True)
class JobInfo(GangCounts):
    """One podgroup and its tasks.  Slotted: with its 31 fields an instance dict took 1.6 kB a job."""

    uid: str  # "namespace/name"
    name: str
    namespace: str
    queue: str = ""
    min_available: int = 0
    task_min_available: dict[str, int] = field(default_factory=dict)
    min_resources: Resource | None = None
    min_resources_list: dict[str, Any] | None = None  # as given, for exact quota comparisons
    phase: str = PodGroupPhase.Pending  # podgroup status phase; "" means never set
    priority_class_name: str = ""
    priority: int = 0
    preemptable: bool = False
    annotations: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    network_topology: dict[str, Any] | None = None
    subgroup_policy: list[dict[str, Any]] = field(default_factory=list)
    conditions: list[dict[str, Any]] = field(default_factory=list)
    has_podgroup: bool = True
    created: float = 0.0  # creation time (seconds); ties fall back on uid
    tasks: dict[str, TaskInfo] = field(default_factory=dict)
    status_index: dict[TaskStatus, dict[str, TaskInfo]] = field(default_factory=dict)
    allocated: Resource = field(default_factory=Resource)
    total_request: Resource = field(default_factory=Resource)
    nodes_fit_errors: dict[str, FitErrors] = field(default_factory=dict)
    job_fit_errors: str = ""
    # pending BestEffort tasks, counted as tasks enter and leave the index (job order asks often)
    pending_best_effort: int = 0
    # sub-jobs (busched.api.subjob) and the hypernode the job's allocated tasks sit under
    sub_jobs: dict[str, subjob.SubJobInfo] = field(default_factory=dict)
    task_to_sub_job: dict[str, str] = field(default_factory=dict)
    min_sub_jobs: dict[str, int] = field(default_factory=dict)  # policy group -> minSubGroups
    allocated_hypernode: str = ""
    # set by every change to the task index: a job lent to a session (busched.fastpath.lending) that
    # comes back written is assembled afresh
    written: bool = field(default=False, repr=False)
    # values derived from the task index and the spec, kept while neither changes (busched.fastpath.memo)
    derived: dict[Any, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        subjob.init_job(self)

    # -- podgroup derived ------------------------------------------------------
    @staticmethod
    def read_preemptable(annotations: dict[str, str], labels: dict[str, str]) -> bool:
        for src in (annotations, labels):
            if "volcano.sh/preemptable" in src:
                return bool(parse_bool(src["volcano.sh/preemptable"]))
        return False

    def is_pending(self) -> bool:
        return not self.has_podgroup or self.phase in (PodGroupPhase.Pending, "")

    def get_min_resources(self) -> Resource:
        return self.min_resources.clone() if self.min_resources is not None else Resource()

    def get_elastic_resources(self) -> Resource:
        return exceeded_part(self.allocated, self.get_min_resources())

    def sch_gated_resources(self) -> Resource:
        """What the job's scheduling-gated tasks request (Volcano's own queue-allocation gate aside)."""
        res = Resource()
        for t in self.tasks.values():
            gates = t.scheduling_gates
            if gates and not (len(gates) == 1 and gates[0] == QUEUE_ALLOCATION_GATE):
                res.add(t.resreq)
        return res

    def deduct_sch_gated(self, res: Resource) -> Resource:
        """``res`` less what the gated tasks request, floored at zero per dimension."""
        gated = self.sch_gated_resources()
        if gated.is_empty():
            return res
        out = res.clone()
        out.cpu = max(out.cpu - gated.cpu, 0.0)
        out.memory = max(out.memory - gated.memory, 0.0)
        for name, v in res.scalars.items():
            if name in gated.scalars:
                out.scalars[name] = max(v - gated.scalars[name], 0.0)
        return out

    def inqueue_resource(self, allocated: Resource) -> Resource:
        """What minResources still reserves beyond ``allocated`` (Volcano's GetInqueueResource)."""
        mr = self.get_min_resources()
        out = Resource()
        if mr.cpu - allocated.cpu > 0:
            out.cpu = mr.cpu - allocated.cpu
        if mr.memory - allocated.memory > 0:
            out.memory = mr.memory - allocated.memory
        for name, q in mr.scalars.items():
            if name == PODS:
                left = q - allocated.scalars.get(PODS, 0.0)
                if left > 0:
                    out.scalars[PODS] = left
            elif name not in allocated.scalars:
                out.scalars[name] = q
            elif q - allocated.scalars[name] > 0:
                out.scalars[name] = q - allocated.scalars[name]
        return out

    # -- task index --------------------------------------------------------------
    def add_task(self, t: TaskInfo) -> None:
        # (each field read once, no setdefault's throwaway dict: a cold snapshot adds every task)
        self.written = True
        if self.derived:
            outputs.emptied(self, self.derived)  # (a lent job's first write: logged)
            self.derived = {}
        uid, status, req = t.uid, t.status, t.resreq
        self.tasks[uid] = t
        idx = self.status_index.get(status)
        if idx is None:
            self.status_index[status] = {uid: t}
        else:
            idx[uid] = t
        self.total_request.add(req)
        if allocated_status(status):
            self.allocated.add(req)
        elif t.best_effort and status == TaskStatus.Pending:
            self.pending_best_effort += 1
        subjob.add_task_to_sub_job(self, t)

    def delete_task(self, t: TaskInfo) -> None:
        old = self.tasks.pop(t.uid, None)
        if old is None:
            return
        self.written = True
        if self.derived:
            outputs.emptied(self, self.derived)  # (a lent job's first write: logged)
            self.derived = {}
        self.total_request.sub(old.resreq)
        if allocated_status(old.status):
            self.allocated.sub(old.resreq)
        idx = self.status_index.get(old.status)
        if idx is not None:
            if idx.pop(old.uid, None) is not None and old.best_effort and old.status == TaskStatus.Pending:
                self.pending_best_effort -= 1
            if not idx:
                del self.status_index[old.status]
        subjob.delete_task_from_sub_job(self, old)

    def update_task_status(self, t: TaskInfo, status: TaskStatus) -> None:
        tasks = self.tasks
        if not self.subgroup_policy and tasks.get(t.uid) is t:
            if len(tasks) == 1:
                self._move_sole(t, status)
            else:
                self._move(t, status)
            return
        if t.uid in self.tasks:
            self.delete_task(t)
        t.status = status
        self.add_task(t)

    def _move(self, t: TaskInfo, status: TaskStatus) -> None:
        """`delete_task` then `add_task` with the new status, for a task indexed as itself: the same
        changes in the same order (the task goes to the end of the maps, as there), in one call.
        Every task allocate places moves twice (placed, then dispatched).  Only for a job without
        sub-group policies, whose tasks all sit in its default sub-job."""
        uid = t.uid
        prev = t.status
        r = t.resreq
        self.written = True
        if self.derived:
            outputs.emptied(self, self.derived)  # (a lent job's first write: logged)
            self.derived = {}
        tasks, index = self.tasks, self.status_index
        del tasks[uid]
        total, allocated = self.total_request, self.allocated
        move_sums.take_request(total, allocated, r, prev in _ALLOCATED)
        idx = index.get(prev)
        if idx is not None:
            if idx.pop(uid, None) is not None and t.best_effort and prev == _PENDING:
                self.pending_best_effort -= 1
            if not idx:
                del index[prev]
        # delete_task_from_sub_job, then add_task_to_sub_job, which without policies is the default sub-job
        to_sub = self.task_to_sub_job
        sj = self.sub_jobs.get(to_sub.pop(uid, ""))
        if sj is not None:
            sj.delete_task(t)
        t.status = status
        tasks[uid] = t
        idx = index.get(status)
        if idx is None:
            index[status] = {uid: t}
        else:
            idx[uid] = t
        now = status in _ALLOCATED
        move_sums.put_request(total, allocated, r, now)
        if not now and t.best_effort and status == _PENDING:
            self.pending_best_effort += 1
        sj = subjob.default_sub_job(self)
        sj.add_task(t)
        to_sub[uid] = sj.uid

    def _move_sole(self, t: TaskInfo, status: TaskStatus) -> None:
        """`_move` for a job whose one task is ``t`` (a single-task job: every task allocate places in a
        stream of them moves twice, Pending -> Allocated -> Binding), with its index, its default
        sub-job's and the task -> sub-job map each holding that task alone (else `_move`).  Taking the
        one task out and putting it back leaves a one-entry map as it was, so only what changes is
        written: the status keys (the old status's map emptied, as `_move` leaves it, a new one for the
        new status), the sums (the same subtraction then addition, in the same order: the floats come
        out bit for bit as there), the BestEffort count and the sub-job's priority.  `_move` is the
        reference (tests/api/test_move_sole.py compares the two on random jobs)."""
        uid = t.uid
        prev = t.status
        index = self.status_index
        idx = index.get(prev)
        juid = self.uid
        to_sub = self.task_to_sub_job
        sj = self.sub_jobs.get(juid)
        if (idx is None or len(index) != 1 or len(idx) != 1 or uid not in idx or sj is None
                or len(to_sub) != 1 or to_sub.get(uid) != juid):
            self._move(t, status)
            return
        stasks, sindex = sj.tasks, sj.status_index
        sidx = sindex.get(prev)
        if len(stasks) != 1 or uid not in stasks or sidx is None or len(sindex) != 1 or len(sidx) != 1 \
                or uid not in sidx:
            self._move(t, status)
            return
        self.written = True
        if self.derived:
            outputs.emptied(self, self.derived)  # (a lent job's first write: logged)
            self.derived = {}
        move_sums.sole_sums(self.total_request, self.allocated, t.resreq, prev in _ALLOCATED, status in _ALLOCATED)
        del idx[uid]
        del index[prev]
        if t.best_effort and prev == _PENDING:
            self.pending_best_effort -= 1
        del sidx[uid]
        del sindex[prev]
        t.status = status
        # (the job's and the sub-job's task maps, and the task -> sub-job map: one entry, the same after)
        stasks[uid] = t
        index[status] = {uid: t}
        if t.best_effort and status == _PENDING:
            self.pending_best_effort += 1
        sindex[status] = {uid: t}
        if t.priority > sj.priority:
            sj.priority = t.priority

    # -- sub-jobs and network topology (busched.api.subjob) ----------------------------
    def contains_sub_job_policy(self) -> bool:
        return subjob.contains_sub_job_policy(self)

    def contains_hard_topology(self) -> bool:
        return subjob.contains_hard_topology(self)

    def contains_network_topology(self) -> bool:
        return subjob.contains_network_topology(self)

    def is_hard_topology_mode(self) -> tuple[bool, int]:
        return subjob.hard_topology(self.network_topology)

    def check_sub_job_valid(self) -> bool:
        return subjob.check_sub_job_valid(self)

    def check_sub_job_ready(self) -> bool:
        return subjob.check_sub_job_ready(self)

    def check_sub_job_pipelined(self) -> bool:
        return subjob.check_sub_job_pipelined(self)

    def reset_fit_errors(self) -> None:
        self.job_fit_errors = ""
        self.nodes_fit_errors = {}

    def clone(self) -> JobInfo:
        j = JobInfo(uid=self.uid, name=self.name, namespace=self.namespace, queue=self.queue,
                    min_available=self.min_available, task_min_available=dict(self.task_min_available),
                    min_resources=self.min_resources.clone() if self.min_resources else None,
                    min_resources_list=self.min_resources_list,
                    phase=self.phase, priority_class_name=self.priority_class_name, priority=self.priority,
                    preemptable=self.preemptable, annotations=dict(self.annotations), labels=dict(self.labels),
                    network_topology=self.network_topology, subgroup_policy=self.subgroup_policy,
                    conditions=[dict(c) for c in self.conditions], has_podgroup=self.has_podgroup,
                    created=self.created)
        for t in self.tasks.values():
            j.add_task(t.clone())
        subjob.clone_sub_job_status(self, j)
        return j

    def __repr__(self) -> str:
        return f"Job({self.uid} queue={self.queue} min={self.min_available} phase={self.phase})"


def unsettled(job: JobInfo) -> bool:
    """Whether enqueue, allocate or backfill may have work in this job: a pending podgroup, a task
    they may place, or sub-groups or network topology (whose bookkeeping a session redoes).  A
    settled job (all its tasks placed and bound, running or done) changes in a session only by
    an eviction; the actions that place tasks skip it."""
    if job.phase in (PodGroupPhase.Pending, "") or not job.has_podgroup:
        return True
    if job.subgroup_policy or job.network_topology is not None:
        return True
    return not _PLACEABLE.isdisjoint(job.status_index)
