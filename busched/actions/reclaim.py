"""reclaim: starving jobs of queues within their share take resources back from other queues.

Algorithm, in session hooks:

1. Every job that is not Pending, passes ``ssn.job_valid`` and whose queue exists
   puts its queue in a queue heap (``ssn.queue_order_fn``).  A job for which
   ``ssn.job_starving`` holds is a reclaimer: per queue, a job heap
   (``ssn.job_order_fn``); per job, a heap of its Pending, ungated tasks
   (``ssn.task_order_fn``).
2. Pop queues in order.  An ``ssn.overused`` queue reclaims nothing.  Otherwise
   pop its reclaimer jobs one by one; for each, in a fresh statement and while
   ``ssn.job_starving(job)``, pop its tasks and for each task:
   - skip it when its preemptionPolicy is Never, when ``ssn.preemptive(queue,
     task)`` refuses (the queue may not take more), or when
     ``ssn.pre_predicate_fn`` fails;
   - predicate nodes with ``ssn.predicate_for_preempt`` (minus the nodes the task
     was found UnschedulableAndUnresolvable on), in-shard nodes first in soft
     sharding mode, and walk them: the reclaimees on a node are its Running,
     preemptable tasks of *other* queues that are reclaimable;
     ``ssn.reclaimable(task, reclaimees)`` keeps the victims; the node's future
     idle plus the victims must cover the task;
   - in a statement for that node alone, while the task does not fit the node's
     future idle (plus what was already reclaimed), evict the next victim of
     ``ssn.build_victims_queue`` -- nothing is evicted when the task already
     fits; if it fits in the end, pipeline the task there and merge the node's
     statement into the job's, else discard the node's evictions and try the
     next node.  The first node that works ends the task's search.
   Commit the job's statement when ``ssn.job_pipelined(job)``, else discard it.
"""

from __future__ import annotations

from busched.actions.util import (
    PREDICATE_ERROR_CACHE_KEY,
    PREEMPT_NEVER,
    candidate_node_groups,
    predicate_error_cache,
    session_task,
    starving_by_queue,
    victims_cover,
)
from busched.api.job import JobInfo
from busched.api.resource import ZERO, Resource
from busched.api.task import TaskInfo, TaskStatus
from busched.framework.nodeselect import PredicateHelper, unresolvable_filtered_nodes
from busched.framework.pqueue import PriorityQueue
from busched.framework.session import Session
from busched.framework.statement import Statement

__all__ = ["ReclaimAction"]


class ReclaimAction:
    name = "reclaim"
    reads_arguments = (PREDICATE_ERROR_CACHE_KEY,)

    def __init__(self) -> None:
        self.enable_predicate_error_cache = True

    def _parse_arguments(self, ssn: Session) -> None:
        self.enable_predicate_error_cache = predicate_error_cache(ssn.config, self)

    def execute(self, ssn: Session) -> None:
        self._parse_arguments(ssn)
        queues, reclaimers = starving_by_queue(ssn)
        reclaimer_tasks: dict[str, PriorityQueue[TaskInfo]] = {
            job.uid: PriorityQueue(ssn.task_order_fn, [t for t in job.tasks_in(TaskStatus.Pending) if not t.sch_gated])
            for jobs in reclaimers.values() for job in jobs.items()}

        while not queues.empty():
            queue = queues.pop()
            if ssn.overused(queue):
                continue
            jobs_q = reclaimers.get(queue.uid)
            while jobs_q is not None and not jobs_q.empty():
                job = jobs_q.pop()
                stmt: Statement = Statement(ssn)
                tasks_q = reclaimer_tasks.get(job.uid)
                while ssn.job_starving(job):
                    if tasks_q is None or tasks_q.empty():
                        break
                    task = tasks_q.pop()
                    if task.preemption_policy == PREEMPT_NEVER:
                        continue
                    if not ssn.preemptive(queue, task):
                        continue
                    try:
                        ssn.pre_predicate_fn(task)
                    except Exception:  # noqa: BLE001 - a failing pre-predicate skips the task
                        continue
                    self._reclaim_for_task(ssn, stmt, task, job)
                if ssn.job_pipelined(job):
                    stmt.commit()
                else:
                    stmt.discard()
                if not jobs_q.empty():
                    # Volcano re-queues the queue while it still has reclaimers; the inner loop
                    # drains them anyway, so the later pop finds none (kept for identical order).
                    queues.push(queue)

    def _reclaim_for_task(self, ssn: Session, stmt: Statement, task: TaskInfo, job: JobInfo) -> bool:
        helper = PredicateHelper(ssn, self.enable_predicate_error_cache)
        nodes, _ = helper.predicate_nodes(task, unresolvable_filtered_nodes(ssn, task), ssn.predicate_for_preempt)
        for node in (n for group in candidate_node_groups(ssn, nodes) for n in group):
            reclaimees = []
            for t in node.tasks.values():
                if t.status != TaskStatus.Running or not t.preemptable:
                    continue
                owner = ssn.jobs.get(t.job)
                if owner is None or owner.queue == job.queue:
                    continue
                q = ssn.queues.get(owner.queue)
                if q is None or not q.reclaimable:
                    continue
                reclaimees.append(t.clone())
            if not reclaimees:
                continue
            victims = ssn.reclaimable(task, reclaimees)
            if not victims_cover(task, node, victims):
                continue
            victims_q = ssn.build_victims_queue([session_task(ssn, v) for v in victims], task)
            need = task.init_resreq.clone()
            available = node.future_idle()
            reclaimed = Resource()
            node_stmt: Statement = Statement(ssn)
            eviction_occurred = False
            while not victims_q.empty():
                if need.less_equal(available, ZERO):
                    break
                victim = victims_q.pop()
                node_stmt.evict(victim, "reclaim")
                reclaimed.add(victim.resreq)
                available.add(victim.resreq)
                eviction_occurred = True
            if not need.less_equal(available, ZERO):
                node_stmt.discard()
                continue
            try:
                node_stmt.pipeline(task, node.name, eviction_occurred)
            except Exception:  # noqa: BLE001 - a pipeline that fails rolls back this node's evictions
                node_stmt.discard()
                continue
            stmt.merge(node_stmt)
            return True
        return False
