"""enqueue: admit pending jobs whose queue can hold them.

Algorithm, in session hooks: queues ordered by ``queue_order_fn``; in each,
pending jobs by ``job_order_fn``.  Pop a queue, pop its best pending job; if the
job sets no minResources or ``job_enqueueable`` votes yes, call
``job_enqueued`` and move the podgroup to Inqueue.  Put the queue back and
repeat until every queue is out of pending jobs.
"""

from __future__ import annotations

from busched.actions.util import by_queue
from busched.api.job import JobInfo, PodGroupPhase
from busched.framework.session import Session


class EnqueueAction:
    name = "enqueue"
    reads_arguments = ()

    def execute(self, ssn: Session) -> None:
        # a pending podgroup is unsettled (busched.api.job.unsettled); pending jobs do not change while they
        # wait: compare keys
        queues, pending = by_queue(ssn, ssn.unsettled_jobs, JobInfo.is_pending, key=ssn.job_order_key())
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
