"""allocate's turns for a stream of single-task jobs in the one queue left: the same turns, less around them.

A cluster filling with single-task jobs (a deployment's pods, a batch of one-pod jobs) gives allocate
thousands of turns of one task each.  Allocate's loop pays, for every one of them, what is the same
turn after turn: the queue pushed back and popped again, a statement, a handler run opened and
flushed (drf told of one task and computing that job's share, proportion computing the queue's share
again), a commit that asks which way to dispatch, and two calls' frames around the one task.

Here those turns are taken one after another in one call, for as long as execute would take them
the same way:

- **Only this queue is live** (the queue heap empty once it was popped): execute would push it back
  and pop it again at once, asking no queue order.  Nothing pushes another queue while the stream
  runs, so the queue popped next is this one until the stream ends.
- **The next job is known without the ordering run again**: the job queue is a `KeyedQueue` (keys
  computed once, at the push), and a turn of a job with one task waiting leaves it none, so execute
  would not push it back: the job execute would pop next is the one `peek` shows.  A job with more
  than one task waiting, or that takes the topology path (``routes``), ends the stream *before*
  anything of its turn is asked: execute takes it from the very state it would have reached.
- **Per turn, in execute's order**: ``overused`` (an overused queue is dropped, as there), the pop,
  the unfit memo, and the turn as `AllocateAction.allocate_tasks` makes it: the helper renewed when
  the last turn cached an error, the turn itself (allocate's own `AllocateAction._turn`, whatever
  it asks and however it chooses), ``job_ready`` again when the turn ended without it,
  ``job_pipelined`` when not ready, a discard, the memo remembered or forgotten, and the commit: the
  job's one bind dispatched at once, as ``Statement.commit`` does.
- **One choice held across the stream's turns** (`_choice`): where allocate's turn would open a
  `busched.fastpath.runchoice.RunChoice` (the kernels on, the whole node list, no shard), the stream
  opens one for all its turns, and on a sampled search (a cluster of more than 100 nodes) a
  `busched.fastpath.streamchoice.StreamChoice`, which keeps the template and the walk's windows
  between turns; each turn passes it to allocate's `_turn` (``held``), which forgets its template
  whenever the per-task path ran, as within a job's turn.
- **The handlers with a run form hear once per stream** (drf and proportion's shares,
  busched.framework.runs): one `HandlerRun` for the whole stream, flushed before any other
  statement operation (a pipeline, a discard flush it themselves), at the stream's end and on an
  exception.  Those handlers keep shares that only job and queue *orderings* read; the stream asks
  none (every waiting job's key was computed at its push, before the stream; the queue is alone).
  What the eager handlers keep (proportion's queue allocated for ``allocatable`` and ``overused``,
  the pod view for the predicates and the kept vectors) they hear at each placement, as before.

The per-job path (`AllocateAction.allocate_tasks` from execute's loop) is the reference:
tests/actions/test_allocate_stream.py runs whole cycles both ways on random clusters and job streams
(templates, queues, priorities, infeasible tasks, ties) and compares every decision and the session's
state after the cycle.
"""

from __future__ import annotations

from typing import Any

from busched.actions import allocate_topology
from busched.api.job import JobInfo
from busched.api.queue import QueueInfo
from busched.api.task import TaskInfo, TaskStatus
from busched.fastpath import unfit
from busched.fastpath.runchoice import RunChoice
from busched.fastpath.streamchoice import StreamChoice
from busched.framework import nodeselect, runs
from busched.framework.decision import Decision
from busched.framework.nodeselect import PredicateHelper
from busched.framework.pqueue import KeyedQueue, PriorityQueue
from busched.framework.session import Session
from busched.framework.statement import ALLOCATE, Statement

__all__ = ["takes", "stream"]


def takes(action: Any, queues: Any, jobs: Any, tasks: Any) -> bool:
    """Whether the job just popped (its waiting ``tasks``) starts a stream: kernels on (the handler
    runs, `runs.wanted`), its queue the only one live, its jobs keyed, one task waiting.  (``action``
    is the `busched.actions.allocate.AllocateAction` running: not imported, it imports this.)"""
    return (action.stream_turns and len(tasks) == 1 and queues.empty() and type(jobs) is KeyedQueue
            and runs.wanted(action.ssn))


def stream(action: Any, queue: QueueInfo, jobs: PriorityQueue[JobInfo] | KeyedQueue[JobInfo],
           job: JobInfo | None,
           tasks_by_job: dict[str, Any], memo: unfit.UnfitMemo | None) -> bool:
    """Take ``job``'s turn (popped by execute, overused, routes and the memo asked) and the turns of
    the single-task jobs that follow it in ``queue``.  Returns False when the queue was found
    overused (execute drops it), True when execute is to push it back (its next job is not one of
    the stream's, or it has none left)."""
    assert isinstance(jobs, KeyedQueue)  # (`takes`)
    ssn = action.ssn
    nodes = ssn.node_list
    run = runs.open_run(ssn)
    stmt = Statement(ssn)  # one for the stream: each turn starts it empty
    stmt.run = run
    overused = ssn.overused
    held = _choice(action, nodes)
    try:
        while True:
            if job is not None:
                _turn(action, job, queue, tasks_by_job[job.uid], nodes, stmt, memo, held)
            # execute's next round: the queue (alone) pushed back and popped, overused, the job, routes, memo
            if jobs.empty():
                return True
            nxt = jobs.peek()
            if len(tasks_by_job[nxt.uid]) != 1 or allocate_topology.routes(nxt):
                return True  # execute takes it from here
            if overused(queue):
                return False
            job = jobs.pop()
            if memo is not None:
                known = memo.still_unfit(job.uid)
                if known is not None:
                    job.nodes_fit_errors.update(known.fit_errors)
                    memo.skipped += 1
                    job = None
    finally:
        stmt.run = None
        if run is not None:
            run.flush()


def _choice(action: Any, nodes: list[Any]) -> RunChoice | None:
    """The stream's choice, held across its turns, where allocate's turn would open a `RunChoice`
    (the session's whole node list, no shard): that `RunChoice` when every node is searched, a
    `StreamChoice` (busched.fastpath.streamchoice) when the searches are sampled; None: each task
    takes the per-task path."""
    ssn = action.ssn
    if not action.stream_choice or ssn.shard.mode in ("hard", "soft"):
        return None
    to_find = nodeselect.num_feasible_nodes_to_find(len(nodes), action.helper.opts)
    kind = StreamChoice if to_find < len(nodes) else RunChoice
    return kind.open(ssn, nodes, ssn.predicate_for_allocate, to_find)


def _turn(action: Any, job: JobInfo, queue: QueueInfo, tasks: Any, nodes: list[Any],
          stmt: Statement, memo: unfit.UnfitMemo | None, held: RunChoice | None) -> None:
    """`AllocateAction.allocate_tasks` and execute's end of a turn, for a job with one task waiting (its
    ``tasks`` hold one: the turn pops it and leaves them empty, so execute would not push the job back)."""
    ssn = action.ssn
    stmt.operations = []
    if action.helper.cache or not action.reuse_helper:
        action.helper = PredicateHelper(ssn, action.error_cache)
    action.turn_unfit = False
    # the turn itself is allocate's own (`AllocateAction._turn`: the task's checks, its choice, its placing)
    ready: bool | None = action._turn(job, queue, tasks, nodes, ssn.nodes, stmt, True, held)
    if ready is None:
        ready = ssn.job_ready(job)
    action.turn_ready = ready
    kept = ready or ssn.job_pipelined(job)
    if not kept:
        stmt.discard()
    if memo is not None:
        if not kept and action.turn_unfit:
            memo.remember(job.uid, job.nodes_fit_errors)
        else:
            memo.forget(job.uid)
    if kept and ready:
        # `Statement.commit` with the kernels on: each allocation dispatched (one job's, one by one as
        # `runs.dispatch_run` does for a run of one); a pipelined task stays as it is
        for op in stmt.operations:
            op.task.last_status = None
            if op.name == ALLOCATE:
                _dispatch(ssn, job, op.task)
    stmt.operations = []


_BINDING = TaskStatus.Binding  # (an enum member read from its class costs a metaclass lookup)


def _dispatch(ssn: Session, job: JobInfo, task: TaskInfo) -> None:
    """`Session.dispatch` for a task of ``job`` (its session's job of that uid): the bind decision
    (built positionally, as `runs.dispatch_run` builds it), the move to Binding, the node copy's status."""
    ssn.decisions.append(Decision("bind", task.key, task.node_name, "", task.bind_annotations))
    job.update_task_status(task, _BINDING)
    node = ssn.nodes.get(task.node_name)
    if node is not None:
        held = node.tasks.get(task.uid)
        if held is not None:
            held.status = _BINDING
