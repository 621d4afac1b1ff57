"""enqueue: admit pending jobs whose queue can hold them.

Algorithm, in session hooks: queues ordered by ``queue_order_fn``; in each,
pending jobs by ``job_order_fn``.  Pop a queue, pop its best pending job; if the
job sets no minResources or ``job_enqueueable`` votes yes, call
``job_enqueued`` and move the podgroup to Inqueue.  Put the queue back and
repeat until every queue is out of pending jobs.
"""

from __future__ import annotations

from busched.api.job import JobInfo, PodGroupPhase
from busched.api.queue import QueueInfo
from busched.framework.pqueue import PriorityQueue
from busched.framework.session import Session


class EnqueueAction:
    name = "enqueue"
    reads_arguments = ()

    def execute(self, ssn: Session) -> None:
        queues: PriorityQueue[QueueInfo] = PriorityQueue(ssn.queue_order_fn)
        seen: set[str] = set()
        pending: dict[str, PriorityQueue[JobInfo]] = {}
        job_key = ssn.job_order_key()  # pending jobs do not change while they wait: compare keys
        for job in ssn.unsettled_jobs:  # a pending podgroup is unsettled (busched.api.job.unsettled)
            queue = ssn.queues.get(job.queue)
            if queue is None:
                continue
            if queue.uid not in seen:
                seen.add(queue.uid)
                queues.push(queue)
            if job.is_pending():
                if job.queue not in pending:
                    pending[job.queue] = PriorityQueue(ssn.job_order_fn, key=job_key)
                pending[job.queue].push(job)
        while not queues.empty():
            queue = queues.pop()
            jobs = pending.get(queue.uid)
            if jobs is None or jobs.empty():
                continue
            job = jobs.pop()
            if job.min_resources is None or ssn.job_enqueueable(job):
                ssn.job_enqueued(job)
                job.phase = PodGroupPhase.Inqueue
            queues.push(queue)
