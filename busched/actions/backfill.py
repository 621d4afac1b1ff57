"""backfill: place BestEffort tasks (no resource request) wherever predicates allow.

Algorithm, in session hooks: collect pending BestEffort tasks of non-pending,
valid jobs (un-pipelining pipelined BestEffort tasks so they are placed for
real), ordered queue > job > task by ``queue_order_fn``, ``job_order_fn``,
``task_order_fn``.  For each: ``pre_predicate_fn``, filter all nodes with
``predicate_for_allocate``, score (in-shard nodes first under soft sharding),
and ``ssn.allocate`` directly, without a statement.
"""

from __future__ import annotations

from busched.actions.util import PREDICATE_ERROR_CACHE_KEY, predicate_error_cache
from busched.api.fit import FitError, FitErrors
from busched.api.job import JobInfo
from busched.api.node import NodeAccountingError, NodeInfo
from busched.api.queue import QueueInfo
from busched.api.task import TaskInfo, TaskStatus
from busched.framework.nodeselect import PredicateHelper, choose_node
from busched.framework.pqueue import PriorityQueue
from busched.framework.session import Session
from busched.framework.statement import Statement


class BackfillAction:
    name = "backfill"
    reads_arguments = (PREDICATE_ERROR_CACHE_KEY,)

    def execute(self, ssn: Session) -> None:
        cache = predicate_error_cache(ssn.config, self)
        for task in self.pending_tasks(ssn):
            job = ssn.jobs[task.job]
            helper = PredicateHelper(ssn, cache)
            try:
                ssn.pre_predicate_fn(task)
            except FitError as e:
                fe = FitErrors()
                for n in ssn.node_list:
                    fe.set_node_error(n.name, e)
                job.nodes_fit_errors[task.uid] = fe
                continue
            nodes, fit_errors = helper.predicate_nodes(task, ssn.node_list, ssn.predicate_for_allocate)
            if not nodes:
                job.nodes_fit_errors[task.uid] = fit_errors
                continue
            node = nodes[0] if len(nodes) == 1 else self.best_node(ssn, task, nodes)
            if node is None:
                continue
            try:
                ssn.allocate(task, node)
            except NodeAccountingError as e:
                fe = FitErrors()
                fe.set_node_error(node.name, e)
                job.nodes_fit_errors[task.uid] = fe

    @staticmethod
    def best_node(ssn: Session, task: TaskInfo, nodes: list[NodeInfo]) -> NodeInfo | None:
        soft = ssn.shard.mode == "soft"
        groups = [[n for n in nodes if not soft or n.name in ssn.nodes_in_shard],
                  [n for n in nodes if soft and n.name not in ssn.nodes_in_shard]]
        for group in groups:
            if not group:
                continue
            node = choose_node(ssn, task, group)
            if node is not None:
                return node
        return None

    @staticmethod
    def pending_tasks(ssn: Session) -> list[TaskInfo]:
        queues: PriorityQueue[QueueInfo] = PriorityQueue(ssn.queue_order_fn)
        jobs: dict[str, PriorityQueue[JobInfo]] = {}
        tasks: dict[str, PriorityQueue[TaskInfo]] = {}
        for job in ssn.unsettled_jobs:  # the others have no task to place (busched.api.job.unsettled)
            if job.is_pending():
                continue
            if not job.pending_best_effort_task_num() and not job.count(TaskStatus.Pipelined):
                continue  # no BestEffort task waiting (most jobs): nothing for backfill, no validity check
            vr = ssn.job_valid(job)
            if vr is not None and not vr.passed:
                continue
            queue = ssn.queues.get(job.queue)
            if queue is None:
                continue
            for t in job.tasks_in(TaskStatus.Pending):
                if t.best_effort and not t.sch_gated:
                    tasks.setdefault(job.uid, PriorityQueue(ssn.task_order_fn)).push(t)
            for t in job.tasks_in(TaskStatus.Pipelined):
                if t.best_effort:
                    Statement(ssn).unpipeline(t)
                    tasks.setdefault(job.uid, PriorityQueue(ssn.task_order_fn)).push(t)
            if job.uid not in tasks:
                continue
            if queue.uid not in jobs:
                queues.push(queue)
                jobs[queue.uid] = PriorityQueue(ssn.job_order_fn)
            jobs[queue.uid].push(job)
        out: list[TaskInfo] = []
        while not queues.empty():
            queue = queues.pop()
            jq = jobs[queue.uid]
            while not jq.empty():
                job = jq.pop()
                tq = tasks[job.uid]
                while not tq.empty():
                    out.append(tq.pop())
        return out
