"""The dry run of the gang eviction actions: evict a set of victims, place the job, keep it or not.

`nomination_plan` answers "if these victims went, would the starving job be
pipelined inside this domain?".  In statements on the live session it evicts
the victims, then places the job sub-job by sub-job (its worksheet: the
sub-jobs needed for each policy's minSubGroups first, then the sub-job order;
each sub-job's pending, ungated, non-BestEffort tasks in task order).  A
sub-job of a job with a hard network topology tries the hypernodes
``hyper_node_gradient_for_sub_job_fn`` gives within the domain, in order, the
first that takes it winning; any other sub-job tries the domain itself.  A
trial places each task as allocate would (queue allocatable, predicates for
preemption on nodes whose future idle holds the task, allocate's idle /
future-idle gradients and node order) by pipelining it, and must leave the
sub-job ready or pipelined.  Placing stops once the job is pipelined (or,
for a job that was ready already, after one sub-job).  The operations are
saved as a plan, every trial is undone -- the session is as it was -- and the
caller replays the plan in its own statement.  Volcano:
pkg/scheduler/actions/utils/simulate.go and util.go.
"""

from __future__ import annotations

from busched.actions.util import drain, session_task, sub_job_order
from busched.api.job import JobInfo
from busched.api.node import NodeInfo
from busched.api.queue import QueueInfo
from busched.api.resource import ZERO
from busched.api.subjob import SubJobInfo
from busched.api.task import PREEMPTABLE_KEY, TaskInfo, TaskStatus
from busched.framework.hypernodes import CLUSTER_TOP, HyperNodeInfo
from busched.framework.nodeselect import PredicateHelper, best_node, unresolvable_filtered_nodes
from busched.framework.pqueue import PriorityQueue
from busched.framework.session import Session
from busched.framework.statement import Statement

__all__ = ["PURPOSE_EVICT", "Plan", "Worksheet", "candidate_domains", "pending_for_eviction", "nomination_plan",
           "job_preemptable_for_gang", "apply_nominations"]

PURPOSE_EVICT = "evict"

Plan = list[tuple[str, TaskInfo, str, str, bool]]  # Statement.save()


def job_preemptable_for_gang(job: JobInfo) -> bool:
    """A job whose podgroup does not say ``volcano.sh/preemptable`` may give victims to the gang
    actions; one that says it follows what it says."""
    if not job.has_podgroup:
        return True
    if PREEMPTABLE_KEY in job.annotations or PREEMPTABLE_KEY in job.labels:
        return job.preemptable
    return True


def candidate_domains(ssn: Session, job: JobInfo, max_domains: int) -> list[str]:
    """The hypernodes to look for victims in, widest first as the gradient plugin gives them for
    eviction (no duplicates, at most ``max_domains``); the cluster's top when none and the job has
    no hard topology."""
    topo = ssn.topology
    root = topo.hypernodes.get(CLUSTER_TOP)
    rows = ssn.hyper_node_gradient_for_job_fn(job, root, PURPOSE_EVICT)
    out: list[str] = []
    for row in rows:
        for hn in row:
            if hn is None or hn.name in out:
                continue
            out.append(hn.name)
            if 0 < max_domains <= len(out):
                return out
    if not out and root is not None and not job.contains_hard_topology():
        out.append(root.name)
    return out


def apply_nominations(job: JobInfo, nominations: dict[str, str]) -> None:
    """Record on each sub-job the hypernode its tasks were pipelined in (after the commit)."""
    for uid, hn in nominations.items():
        sj = job.sub_jobs.get(uid)
        if sj is not None and hn:
            sj.nominated_hypernode = hn


class Worksheet:
    """A job's sub-jobs with work to place, in placing order, each with its tasks in task order."""

    def __init__(self, ssn: Session, job: JobInfo) -> None:
        self.sub_jobs: PriorityQueue[SubJobInfo] = PriorityQueue(sub_job_order(ssn, job))
        self.tasks: dict[str, PriorityQueue[TaskInfo]] = {}
        for uid, sj in job.sub_jobs.items():
            tasks = [t for t in sj.status_index.get(TaskStatus.Pending, {}).values()
                     if not t.sch_gated and not t.resreq.is_empty()]
            if tasks:
                self.sub_jobs.push(sj)
                self.tasks[uid] = PriorityQueue(ssn.task_order_fn, tasks)

    def empty(self) -> bool:
        return self.sub_jobs.empty()


def pending_for_eviction(ssn: Session, job: JobInfo) -> list[TaskInfo]:
    """What the job needs placed: for a ready job, the first sub-job's pending tasks; for a job
    starting up, every pending task of its worksheet (in worksheet order)."""
    ws = Worksheet(ssn, job)
    out: list[TaskInfo] = []
    only_first = ssn.job_ready(job)
    for sj in drain(ws.sub_jobs.clone()):
        tasks = ws.tasks.get(sj.uid)
        if tasks is None or tasks.empty():
            continue
        out.extend(drain(tasks.clone()))
        if only_first:
            break
    return out


def nomination_plan(ssn: Session, queue: QueueInfo | None, job: JobInfo, domain: HyperNodeInfo,
                    victims: list[TaskInfo], reason: str,
                    error_cache: bool) -> tuple[Plan, dict[str, str]] | None:
    """The operations (victims evicted, tasks pipelined) that make ``job`` pipelined inside
    ``domain``, and the hypernode each placed sub-job went to; None when it cannot be done.
    The session is left as it was either way."""
    topo = ssn.topology
    if not topo.real_nodes_list.get(domain.name):
        return None
    ws = Worksheet(ssn, job)
    if ws.empty():
        return None
    was_ready = ssn.job_ready(job)
    chain: list[Statement] = []
    try:
        if victims:
            evictions = Statement(ssn)
            for v in victims:
                evictions.evict(session_task(ssn, v), reason)
            chain.append(evictions)
        nominations: dict[str, str] = {}
        pipelined = False
        while not ws.sub_jobs.empty():
            sj = ws.sub_jobs.pop()
            tasks = ws.tasks.get(sj.uid)
            if tasks is None or tasks.empty():
                continue
            if job.contains_hard_topology():
                places = [hn.name for row in ssn.hyper_node_gradient_for_sub_job_fn(sj, domain, PURPOSE_EVICT)
                          for hn in row if hn is not None]
            else:
                places = [domain.name]
            won = None
            for hn in places:
                trial = _trial(ssn, queue, job, sj, tasks, hn, bool(victims), error_cache)
                if trial is not None:
                    won = (trial, hn)
                    break
            if won is None:
                return None
            chain.append(won[0])
            nominations[sj.uid] = won[1]
            pipelined = ssn.job_pipelined(job)
            if was_ready or pipelined:
                break
        if not pipelined:
            return None
        plan: Plan = [op for stmt in chain for op in stmt.save()]
        return plan, nominations
    finally:
        for stmt in reversed(chain):
            stmt.discard()


def _trial(ssn: Session, queue: QueueInfo | None, job: JobInfo, sj: SubJobInfo, tasks: PriorityQueue[TaskInfo],
           hypernode: str, victims_present: bool, error_cache: bool) -> Statement | None:
    """Pipeline the sub-job's tasks inside ``hypernode``: the statement (still applied) when the
    sub-job ends ready or pipelined, else None with nothing left applied."""
    candidate = ssn.topology.real_nodes_list.get(hypernode) or []
    if not candidate:
        return None
    trial = Statement(ssn)
    helper = PredicateHelper(ssn, error_cache)
    ok = False
    try:
        for task in drain(tasks.clone()):
            if queue is not None and not ssn.allocatable(queue, task):
                return None
            nodes = _usable(ssn, task, candidate)
            if not nodes:
                return None
            try:
                ssn.pre_predicate_fn(task)
            except Exception:  # noqa: BLE001 - a failing pre-predicate: the task goes nowhere
                return None
            found, _ = helper.predicate_nodes(task, nodes, ssn.predicate_for_preempt, resource_fit=task.init_resreq)
            best = best_node(ssn, task, found)
            if best is None or not task.init_resreq.less_equal(best.future_idle(), ZERO):
                return None
            try:
                trial.pipeline(task, best.name, victims_present)
            except Exception:  # noqa: BLE001 - a pipeline that fails ends the trial
                return None
        if not trial.operations:
            return None
        if not ssn.sub_job_ready(job, sj) and not ssn.sub_job_pipelined(job, sj):
            return None
        ok = True
        return trial
    finally:
        if not ok:
            trial.discard()


def _usable(ssn: Session, task: TaskInfo, candidate: list[NodeInfo]) -> list[NodeInfo]:
    """The domain's nodes less those the task was last found unresolvable on; as Volcano's
    intersectNodesByName, an empty filter (every node unresolvable) restricts nothing."""
    schedulable = unresolvable_filtered_nodes(ssn, task)
    if schedulable is ssn.node_list or not schedulable:
        return candidate
    allowed = {n.name for n in schedulable}
    return [n for n in candidate if n.name in allowed]
