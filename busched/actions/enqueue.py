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
from busched.framework.pqueue import KeyedQueue, PriorityQueue
from busched.framework.session import Session


class EnqueueAction:
    name = "enqueue"
    reads_arguments = ()
    # one queue with pending jobs: its jobs in order, the queues' heap left alone (`_one_queue`); False:
    # the reference, the round over the queues for every job
    one_queue = True

    def execute(self, ssn: Session) -> None:
        # a pending podgroup is unsettled (busched.api.job.unsettled); pending jobs do not change while they
        # wait: compare keys
        queues, pending = by_queue(ssn, ssn.unsettled_jobs, JobInfo.is_pending, key=ssn.job_order_key())
        if self.one_queue and len(pending) == 1:
            _one_queue(ssn, next(iter(pending.values())))
            return
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


def _one_queue(ssn: Session, jobs: PriorityQueue[JobInfo] | KeyedQueue[JobInfo]) -> None:
    """The loop above when one queue holds every pending job: the other queues are popped once each
    and dropped, having none, and the one is popped, gives its best job and is put back until it
    has none: its jobs in its order, each admitted as there (a queue's order decides only which
    queue goes next).  tests/actions/test_enqueue_one_queue.py compares with the loop."""
    inqueue = PodGroupPhase.Inqueue
    while not jobs.empty():
        job = jobs.pop()
        if job.min_resources is None or ssn.job_enqueueable(job):
            ssn.job_enqueued(job)
            job.phase = inqueue
