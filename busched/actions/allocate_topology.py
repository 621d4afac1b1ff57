"""allocate, for jobs with a hard network topology or sub-groups: place whole (sub-)gangs inside hypernodes.

`AllocateAction` hands a job here when ``job.contains_hard_topology() or
job.contains_sub_job_policy()`` (soft topologies were turned into hard ones,
up to the cluster's top tier, when the session opened).  Algorithm, in
session hooks:

1. The job's worksheet: its sub-jobs with pending tasks, those needed to
   reach each policy's ``minSubGroups`` first, then ``sub_job_order_fn``;
   each sub-job's pending, non-BestEffort, ungated tasks in ``task_order_fn``
   order.
2. ``hyper_node_gradient_for_job_fn`` (from the cluster top) gives hypernodes
   by gradient, lowest tier first.  In one gradient, every hypernode gets a
   dry run: sub-jobs are placed one after another inside it (step 3) until
   the job is ready, the result is kept when the job is ready or pipelined,
   then undone.  The hypernode whose sub-jobs scored highest wins, its
   operations are replayed in a fresh statement and the worksheet continues
   from what it left.  No solution in a gradient: the next one.
3. A sub-job inside a hypernode: ``hyper_node_gradient_for_sub_job_fn`` gives
   the hypernodes it may use; each gets a dry run of the plain per-task loop
   (predicates, node scoring in idle / future-idle gradients, allocate or
   pipeline) over the hypernode's nodes, until ``sub_job_ready``; kept when
   the sub-job is ready or ``sub_job_pipelined``.  The best by
   ``hyper_node_order_map_fn`` wins; the sub-job's allocated hypernode becomes
   the common ancestor of the old one and the winner.
4. A job that is ready commits; the hypernodes chosen are recorded on the
   job and its sub-jobs (their lowest common ancestor with what they held),
   which narrows later searches.  A job with tasks left goes back in its
   queue.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import Any, Protocol

from busched.actions.util import SKIP, sub_job_order
from busched.api import subjob as sjm
from busched.api.job import JobInfo
from busched.api.node import NodeAccountingError, NodeInfo
from busched.api.queue import QueueInfo
from busched.api.subjob import JOB_ALLOCATED_HYPERNODE, SubJobInfo
from busched.api.task import TaskInfo, TaskStatus
from busched.framework.hypernodes import CLUSTER_TOP, HyperNodeInfo
from busched.framework.nodeselect import PredicateHelper
from busched.framework.pqueue import KeyedQueue, PriorityQueue
from busched.framework.session import Session
from busched.framework.statement import Statement


class TaskPlacer(Protocol):
    """What topology allocation borrows from the allocate action's per-task loop (the action hands
    itself over, so the two share one way of finding, scoring and placing a task's nodes)."""

    ssn: Session
    error_cache: bool

    def candidates_for(self, job: JobInfo, task: TaskInfo, nodes: list[NodeInfo], node_names: Container[str],
                       helper: PredicateHelper, *, role_failed: bool, keep_going: Callable[[], bool],
                       hypernode: str = "") -> list[NodeInfo] | str: ...

    def best_node(self, task: TaskInfo, nodes: list[NodeInfo]) -> NodeInfo | None: ...

    def place(self, stmt: Statement, task: TaskInfo, node: NodeInfo) -> None: ...

__all__ = ["TopologyAllocator", "TaskPlacer", "JobWorksheet", "SubJobWorksheet", "Recorder", "routes"]

Saved = list[tuple[str, TaskInfo, str, str, bool]]  # Statement.save() output


def routes(job: JobInfo) -> bool:
    """Does this job take the topology path?  (``job.contains_hard_topology() or
    job.contains_sub_job_policy()``; for a job with neither a network topology nor sub-group policies,
    most jobs, asked of every job allocate pops, the first is its sub-jobs' and the second False.)"""
    if job.network_topology is None and not job.subgroup_policy:
        hard = sjm.hard_topology
        for sj in job.sub_jobs.values():  # noqa: SIM110 - a generator's frame costs more than the job's one sub-job
            if sj.network_topology is not None and hard(sj.network_topology)[0]:
                return True
        return False
    return job.contains_hard_topology() or job.contains_sub_job_policy()


class SubJobWorksheet:
    def __init__(self, tasks: PriorityQueue[TaskInfo]) -> None:
        self.tasks = tasks

    def empty(self) -> bool:
        return self.tasks.empty()

    def clone(self) -> SubJobWorksheet:
        return SubJobWorksheet(self.tasks.clone())


class JobWorksheet:
    def __init__(self, sub_jobs: PriorityQueue[SubJobInfo], worksheets: dict[str, SubJobWorksheet]) -> None:
        self.sub_jobs = sub_jobs
        self.worksheets = worksheets

    def empty(self) -> bool:
        return self.sub_jobs.empty()

    def clone(self) -> JobWorksheet:
        return JobWorksheet(self.sub_jobs.clone(), {k: w.clone() for k, w in self.worksheets.items()})

    def take(self, other: JobWorksheet) -> None:
        self.sub_jobs, self.worksheets = other.sub_jobs, other.worksheets


class Recorder:
    """The hypernodes chosen during one job's search, applied to the job only when it commits."""

    def __init__(self) -> None:
        self.job_decisions: dict[str, str] = {}
        self.sub_job_decisions: dict[str, dict[str, dict[str, str]]] = {}
        self.snapshots: dict[str, dict[str, str]] = {}

    def save_job_decision(self, job: str, hypernode: str) -> None:
        self.job_decisions[job] = hypernode

    def save_sub_job_decision(self, job: str, job_hypernode: str, sub_job: str, hypernode: str) -> None:
        self.sub_job_decisions.setdefault(job, {}).setdefault(job_hypernode, {})[sub_job] = hypernode

    def update_decision_to_job(self, job: JobInfo, topo: Any) -> None:
        chosen = self.job_decisions.get(job.uid, "")
        if not chosen:
            return
        job.allocated_hypernode = topo.lca(job.allocated_hypernode, chosen)
        for uid, hn in self.sub_job_decisions.get(job.uid, {}).get(chosen, {}).items():
            sj = job.sub_jobs.get(uid)
            if sj is None:
                continue
            sj.allocated_hypernode = topo.lca(sj.allocated_hypernode, hn)
            sj.nominated_hypernode = ""

    def snapshot(self, job: JobInfo, ws: JobWorksheet) -> None:
        self.snapshots[job.uid] = {uid: job.sub_jobs[uid].allocated_hypernode
                                   for uid in ws.worksheets if uid in job.sub_jobs}

    def restore(self, job: JobInfo) -> None:
        for uid, hn in self.snapshots.get(job.uid, {}).items():
            sj = job.sub_jobs.get(uid)
            if sj is not None:
                sj.allocated_hypernode = hn


class TopologyAllocator:
    def __init__(self, action: TaskPlacer) -> None:
        self.action = action
        self.ssn = action.ssn
        self.recorder = Recorder()
        self.worksheets: dict[str, JobWorksheet] = {}

    # -- one job's turn, from the queue loop ---------------------------------------------------
    def allocate_job(self, job: JobInfo, jobs: PriorityQueue[JobInfo] | KeyedQueue[JobInfo]) -> None:
        ssn = self.ssn
        ws = self.worksheets.get(job.uid)
        if ws is None:
            ws = self.worksheets[job.uid] = self.organize(job)
        stmt = self.allocate_for_job(job, ws, ssn.topology.top)
        if stmt is not None and ssn.job_ready(job):  # a pipelined job keeps its statement uncommitted
            stmt.commit()
            ssn.dirty_jobs.add(job.uid)
            self.recorder.update_decision_to_job(job, ssn.topology)
            if not ws.empty():
                jobs.push(job)

    def organize(self, job: JobInfo) -> JobWorksheet:
        ssn = self.ssn
        sub_jobs: PriorityQueue[SubJobInfo] = PriorityQueue(sub_job_order(ssn, job))
        worksheets: dict[str, SubJobWorksheet] = {}
        for uid, sj in job.sub_jobs.items():
            tasks: PriorityQueue[TaskInfo] = PriorityQueue(ssn.task_order_fn)
            for t in sj.status_index.get(TaskStatus.Pending, {}).values():
                if t.sch_gated or t.resreq.is_empty():
                    continue  # gated tasks wait; BestEffort tasks are backfill's
                tasks.push(t)
            if not tasks.empty():
                sub_jobs.push(sj)
                worksheets[uid] = SubJobWorksheet(tasks)
        return JobWorksheet(sub_jobs, worksheets)

    # -- the job over hypernodes ------------------------------------------------------------------
    def allocate_for_job(self, job: JobInfo, ws: JobWorksheet, within: HyperNodeInfo) -> Statement | None:
        ssn = self.ssn
        if ws.empty():
            return None
        self.recorder.snapshot(job, ws)
        for gradient in ssn.hyper_node_gradient_for_job_fn(job, within, "allocate") or []:
            solutions: dict[str, tuple[Saved, JobWorksheet, float]] = {}
            for hn in gradient:
                job.reset_fit_errors()
                trial = ws.clone()
                stmts: list[Statement] = []
                score = 0.0
                while not trial.empty():
                    sj = trial.sub_jobs.pop()
                    sjws = trial.worksheets[sj.uid]
                    stmt, s = self.allocate_for_sub_job(sj, sjws, hn)
                    if stmt is not None and stmt.operations:
                        stmts.append(stmt)
                        score += s
                        if not sjws.empty():
                            trial.sub_jobs.push(sj)
                        if ssn.job_ready(job):
                            break
                self.recorder.restore(job)
                saved = [op for st in stmts for op in st.save()]
                if not saved:
                    continue
                if ssn.job_ready(job) or ssn.job_pipelined(job):
                    solutions[hn.name] = (saved, trial, score)
                for st in stmts:  # a dry run: every hypernode starts from the same state
                    st.discard()
            if not solutions:
                continue
            best = _best(solutions, lambda v: v[2])
            saved, trial, _ = solutions[best]
            final: Statement = Statement(ssn)
            final.recover(saved)
            ws.take(trial)
            self.recorder.save_job_decision(job.uid, best)
            return final
        return None

    def allocate_for_sub_job(self, sj: SubJobInfo, ws: SubJobWorksheet,
                             job_hn: HyperNodeInfo) -> tuple[Statement | None, float]:
        ssn = self.ssn
        job = ssn.jobs[sj.job]
        if ws.empty():
            return None, 0.0
        topo = ssn.topology
        for gradient in ssn.hyper_node_gradient_for_sub_job_fn(sj, job_hn, "allocate") or []:
            solutions: dict[str, tuple[Saved, SubJobWorksheet]] = {}
            for hn in gradient:
                sjm.reset_sub_job_fit_errors(job, sj.uid)
                trial = ws.clone()
                stmt = self.allocate_tasks(sj, trial.tasks, hn.name)
                if stmt is not None and stmt.operations:
                    solutions[hn.name] = (stmt.save(), trial)
                    stmt.discard()
            if not solutions:
                continue
            best, score = self.select_best_hypernode_for_sub_job(solutions, sj)
            if not best:
                return None, 0.0
            saved, trial = solutions[best]
            final: Statement = Statement(ssn)
            final.recover(saved)
            sj.allocated_hypernode = topo.lca(sj.allocated_hypernode, best)
            ws.tasks = trial.tasks
            self.recorder.save_sub_job_decision(job.uid, job_hn.name, sj.uid, sj.allocated_hypernode)
            return final, score
        return None, 0.0

    def select_best_hypernode_for_sub_job(self, solutions: dict[str, Any], sj: SubJobInfo) -> tuple[str, float]:
        ssn = self.ssn
        candidates = {hn: ssn.topology.real_nodes_list.get(hn, []) for hn in solutions}
        totals = {hn: 0.0 for hn in candidates}
        for scores in ssn.hyper_node_order_map_fn(sj, candidates).values():
            for hn, s in scores.items():
                if hn in totals:
                    totals[hn] += s
        best = _best(totals, lambda v: v)
        return best, totals.get(best, 0.0)

    # -- tasks of one sub-job inside one hypernode ----------------------------------------------------
    def allocate_tasks(self, sj: SubJobInfo, tasks: PriorityQueue[TaskInfo], hypernode: str) -> Statement | None:
        ssn = self.ssn
        job = ssn.jobs[sj.job]
        queue: QueueInfo = ssn.queues[job.queue]
        nodes: list[NodeInfo] = ssn.topology.real_nodes_list.get(hypernode, [])
        if not nodes:
            return None
        node_names = ssn.topology.real_nodes_set.get(hypernode, frozenset())
        stmt: Statement = Statement(ssn)
        helper = PredicateHelper(ssn, self.action.error_cache)
        allocated_hn = sj.allocated_hypernode
        while not tasks.empty():
            task = tasks.pop()
            if not ssn.allocatable(queue, task):
                continue
            if task.sch_gated:
                continue
            found = self.action.candidates_for(
                job, task, nodes, node_names, helper, role_failed=sjm.task_has_fit_errors(job, sj.uid, task),
                keep_going=lambda: sjm.need_continue_allocating(job, sj.uid),
                hypernode="" if hypernode == CLUSTER_TOP else hypernode)
            if found is SKIP:
                continue
            if not isinstance(found, list):
                break
            candidates = found
            if sj.with_network_topology():
                # (replaced, never changed in place: a converted task's empty one is shared, busched.api.shared)
                task.extra = {**task.extra, JOB_ALLOCATED_HYPERNODE: allocated_hn}
            best = self.action.best_node(task, candidates)
            if best is None:
                continue
            try:
                self.action.place(stmt, task, best)
            except NodeAccountingError:
                continue
            if sj.with_network_topology():
                allocated_hn = self._widen(best.name, allocated_hn)
            if ssn.sub_job_ready(job, sj):
                break
        if ssn.sub_job_ready(job, sj):
            if sj.is_soft_topology_mode():
                sj.allocated_hypernode = allocated_hn
            return stmt
        if ssn.sub_job_pipelined(job, sj):
            return stmt
        stmt.discard()
        return None

    def _widen(self, node: str, allocated: str) -> str:
        """The sub-job's hypernode once a task landed on ``node``."""
        topo = self.ssn.topology
        hn = topo.lowest_tier_hypernode(node)
        if not hn:
            return allocated
        return topo.lca(hn, allocated) if allocated else hn


def _best(candidates: dict[str, Any], score: Any) -> str:
    """The highest score; ties go to the first tried."""
    best, best_score = "", float("-inf")
    for name, v in candidates.items():
        s = score(v)
        if s > best_score:
            best, best_score = name, s
    return best

