"""allocate: place pending tasks on nodes, a job at a time, all-or-nothing per gang.

Algorithm, in session hooks:
1. Jobs that are pending (when enqueue is configured), in an unknown queue,
   with no task to place, or invalid (``job_valid``) are skipped; the rest are
   grouped by queue.  Each
   job's pending, non-BestEffort, ungated tasks wait in ``task_order_fn`` order.
2. Pop the best queue (``queue_order_fn``); skip it if ``overused``.  Pop its
   best job (``job_order_fn``) and open a statement.
3. For each task: skip unless ``allocatable(queue, task)``; skip a role that
   already failed predicates (error cache by job and role); run
   ``pre_predicate_fn``; filter nodes (resource fit on future idle, then
   ``predicate_for_allocate``), trying the nominated node first.  A failure
   ends the job's turn unless ``need_continue_allocating``.  Score the
   survivors in gradients (idle in shard, idle elsewhere, future idle in shard,
   future idle elsewhere) with the node-order hooks and ``best_node_fn``;
   allocate on idle or pipeline on future idle.  Stop once ``job_ready``.
4. Keep the statement when the job is ready (commit: binds) or pipelined
   (kept, not committed: the tasks wait for released resources); else
   discard.  A ready job with tasks left goes back in its queue, and the queue
   goes back so its share is re-evaluated.
"""

from __future__ import annotations

from collections.abc import Callable, Container

from busched.actions import allocate_stream, allocate_topology
from busched.actions.util import NO_FIT, PREDICATE_ERROR_CACHE_KEY, SKIP, STOP, predicate_error_cache
from busched.api.fit import FitError, FitErrors
from busched.api.job import JobInfo, PodGroupPhase
from busched.api.node import NodeAccountingError, NodeInfo
from busched.api.queue import QueueInfo
from busched.api.task import TaskInfo, TaskStatus
from busched.fastpath import unfit
from busched.fastpath.runchoice import RunChoice
from busched.framework import nodeselect, runs
from busched.framework.nodeselect import PredicateHelper
from busched.framework.pqueue import KeyedQueue, PriorityQueue
from busched.framework.session import Session
from busched.framework.statement import Statement


class AllocateAction:
    name = "allocate"
    reads_arguments = (PREDICATE_ERROR_CACHE_KEY,)
    reuse_helper = True  # the last turn's predicate helper when it cached nothing (tests compare without)
    stream_turns = True  # single-task jobs' turns one after another (allocate_stream; tests compare without)
    stream_choice = True  # a stream's choices from a template held across its turns (streamchoice; ditto)

    def execute(self, ssn: Session) -> None:
        self.ssn = ssn
        self.error_cache = predicate_error_cache(ssn.config, self)
        topology = allocate_topology.TopologyAllocator(self)  # hard topology / sub-group jobs
        queues: PriorityQueue[QueueInfo] = PriorityQueue(ssn.queue_order_fn)
        job_key = ssn.job_order_key()  # jobs change only in their own turn: heaps may compare keys
        # jobs that could not fit last cycle and cannot now (busched.fastpath.unfit): their turn is
        # known in advance, the fit errors it would give are put back instead
        memo = unfit.memo_of(ssn)
        self.pipelined_any = False
        self.turn_ready = False
        self.helper = PredicateHelper(ssn, self.error_cache)
        jobs_by_queue: dict[str, JobQueue] = {}
        tasks_by_job: dict[str, TaskQueue] = {}
        pending, session_queues, job_valid = TaskStatus.Pending, ssn.queues, ssn.job_valid  # (read once: one job each)
        for job in ssn.unsettled_jobs:  # the others have no task to place (busched.api.job.unsettled)
            if job.is_pending():
                if ssn.enqueue_enabled:
                    continue
                job.phase = PodGroupPhase.Inqueue
            if job.queue not in session_queues:
                continue
            waiting = [t for t in job.tasks_in(pending)
                       if not (t.sch_gated or t.resreq.is_empty())]  # gated tasks wait; BestEffort: backfill's
            if not waiting:
                continue  # nothing to place (most jobs of a busy cluster): no validity check needed
            vr = job_valid(job)
            if vr is not None and not vr.passed:
                continue
            if not ssn.topology.ready and job.contains_network_topology():
                continue  # the hypernode tree is broken: topology-bound jobs wait
            tasks: TaskQueue
            if len(waiting) == 1:
                tasks = OneTask(waiting[0])  # a job's only task is never compared: no heap needed
            else:
                # pending tasks do not change while they wait: the queue may compare keys (kernels.order),
                # and with keys they are sorted once rather than heaped (the keys end with the task's
                # uid: no two tie, so the pops are the heap's, `KeyedQueue`)
                task_key = ssn.task_order_key(waiting)
                tasks = (PriorityQueue(ssn.task_order_fn) if task_key is None
                         else KeyedQueue(ssn.task_order_fn, task_key))
                for t in waiting:
                    tasks.push(t)
            if job.queue not in jobs_by_queue:
                # with keys (kernels on), sorted once rather than heaped (the same pops: `KeyedQueue`)
                jobs_by_queue[job.queue] = (PriorityQueue(ssn.job_order_fn) if job_key is None
                                            else KeyedQueue(ssn.job_order_fn, job_key))
                queues.push(ssn.queues[job.queue])
            jobs_by_queue[job.queue].push(job)
            tasks_by_job[job.uid] = tasks

        while not queues.empty():
            queue = queues.pop()
            if ssn.overused(queue):
                continue
            jobs = jobs_by_queue.get(queue.uid)
            if jobs is None or jobs.empty():
                continue
            job = jobs.pop()
            if allocate_topology.routes(job):
                self.pipelined_any = True  # not followed there: no job is remembered as unfit after this
                topology.allocate_job(job, jobs)
                queues.push(queue)
                continue
            if memo is not None:
                known = memo.still_unfit(job.uid)
                if known is not None:
                    job.nodes_fit_errors.update(known.fit_errors)
                    memo.skipped += 1
                    queues.push(queue)
                    continue
            tasks = tasks_by_job[job.uid]
            if allocate_stream.takes(self, queues, jobs, tasks):
                # this job's turn and its single-task successors' in this queue (busched.actions.allocate_stream)
                if allocate_stream.stream(self, queue, jobs, job, tasks_by_job, memo):
                    queues.push(queue)
                continue
            stmt = self.allocate_tasks(job, queue, tasks, ssn.node_list)
            if memo is not None:
                if stmt is None and self.turn_unfit:
                    memo.remember(job.uid, job.nodes_fit_errors)
                else:
                    memo.forget(job.uid)
            if stmt is not None and self.turn_ready:  # job_ready, as the turn last asked it
                stmt.commit()
                if len(tasks):
                    jobs.push(job)
            queues.push(queue)

    # -- one job's turn -------------------------------------------------------------------
    def allocate_tasks(self, job: JobInfo, queue: QueueInfo, tasks: TaskQueue,
                       nodes: list[NodeInfo]) -> Statement | None:
        ssn = self.ssn
        stmt: Statement = Statement(ssn)
        # A fresh error cache for each job turn, as Volcano: a job put back gets a clean slate (the last
        # turn's helper when it cached nothing: the same as a fresh one, without building it)
        if self.helper.cache or not self.reuse_helper:
            self.helper = PredicateHelper(ssn, self.error_cache)
        node_names = ssn.nodes if nodes is ssn.node_list else {n.name for n in nodes}
        self.turn_unfit = False  # the turn ended at its first task, which fits nowhere (kernels.unfit)
        # job_ready's answer once the turn is over (execute commits on it): asked after each placement,
        # and again only when the turn ended otherwise (the job does not change in between)
        ready: bool | None = None
        # with the kernels on, handlers with a run form hear of the turn's placements once
        # (busched.framework.runs; the one-by-one telling is the reference)
        stmt.run = runs.open_run(ssn) if runs.wanted(ssn) else None
        try:
            ready = self._turn(job, queue, tasks, nodes, node_names, stmt)
        finally:
            stmt.flush()
            stmt.run = None
        if ready is None:
            ready = ssn.job_ready(job)
        self.turn_ready = ready
        if ready or ssn.job_pipelined(job):
            return stmt
        stmt.discard()
        return None

    def _turn(self, job: JobInfo, queue: QueueInfo, tasks: TaskQueue, nodes: list[NodeInfo],
              node_names: Container[str], stmt: Statement, streamed: bool = False,
              held: RunChoice | None = None) -> bool | None:
        """Place the job's tasks until it is ready (True) or its tasks or nodes run out (None).
        ``streamed``: a turn of a stream (`allocate_stream`), whose choice is ``held`` across its turns
        (a `RunChoice`, or a `busched.fastpath.streamchoice.StreamChoice` for sampled searches; None:
        the stream has none, every task takes the per-task path)."""
        ssn = self.ssn
        attempted = 0
        # the turn's choices from kept templates without the per-task layers (kernels on, every node
        # searched: busched.fastpath.runchoice); opened at the first task that reaches a choice
        run: RunChoice | None = held  # (a stream opened it with the checks below)
        if streamed:
            wanted = run is not None
        else:
            wanted = (ssn.fast is not None and nodes is ssn.node_list and runs.wanted(ssn)
                      and ssn.shard.mode not in ("hard", "soft"))
        found: list[NodeInfo] | str
        while not tasks.empty():
            task = tasks.pop()
            attempted += 1
            if not ssn.allocatable(queue, task):
                continue
            role_failed = job.task_has_fit_errors(task)
            best: NodeInfo | None = None  # the run's choice, or the per-task path's below
            if (wanted and not role_failed and not task.nominated_node_name
                    and not (self.helper.enable_error_cache and task.role)):
                # candidates_for's steps up to the choice, the choice from the run
                try:
                    ssn.pre_predicate_fn(task)
                except FitError as e:
                    found = self.pre_predicates_failed(job, task, nodes, e, job.need_continue_allocating)
                else:
                    if run is None:
                        run = RunChoice.open(ssn, nodes, ssn.predicate_for_allocate,
                                             nodeselect.num_feasible_nodes_to_find(len(nodes), self.helper.opts))
                        wanted = run is not None
                    best = run.choose(task) if run is not None else None
                    if best is None:
                        if run is not None:
                            run.forget()
                        found = self.candidates_for(job, task, nodes, node_names, self.helper, role_failed=False,
                                                    keep_going=job.need_continue_allocating, lazy=True,
                                                    checked=True)
            else:
                found = self.candidates_for(job, task, nodes, node_names, self.helper, role_failed=role_failed,
                                            keep_going=job.need_continue_allocating, lazy=True)
                if run is not None:
                    run.forget()
            if best is None:
                if found is SKIP:
                    continue
                if found is NO_FIT:
                    self.turn_unfit = (attempted == 1 and nodes is ssn.node_list and not self.pipelined_any
                                       and unfit.repeatable(task))
                if isinstance(found, str):
                    break
                best = self.best_node(task, found)
                if best is None:
                    continue
            try:
                self.place(stmt, task, best)
            except NodeAccountingError:
                continue
            if ssn.job_ready(job):
                return True
        return None

    def candidates_for(self, job: JobInfo, task: TaskInfo, nodes: list[NodeInfo], node_names: Container[str],
                       helper: PredicateHelper, *, role_failed: bool, keep_going: Callable[[], bool],
                       hypernode: str = "", lazy: bool = False, checked: bool = False) -> list[NodeInfo] | str:
        """The nodes ``task`` may go to (nominated node first), or SKIP (try the job's next task),
        STOP (pre-predicates failed and the turn ends) or NO_FIT (no node fits and the turn ends).
        Every failure is recorded in the job's fit errors.  Shared with topology allocation.
        ``lazy`` (allocate's own turn): the nodes may come as a sequence that fetches them when read
        (only the best one is: `PredicateHelper.predicate_nodes`), or already bucketed into
        gradients (`nodeselect.Gradients`, which `best_node` takes as they are), or gradients
        holding only the node already chosen from a template's kept vectors
        (`PredicateHelper.chosen_found`)."""
        ssn = self.ssn
        if role_failed:
            fe = FitErrors()
            fe.set_error(f"Task {task.name} with role spec {task.role} has already predicated failed, skip")
            job.nodes_fit_errors[task.uid] = fe
            return SKIP
        if not checked:  # (checked: the caller ran the pre-predicates and they passed)
            try:
                ssn.pre_predicate_fn(task)
            except FitError as e:
                return self.pre_predicates_failed(job, task, nodes, e, keep_going)
        fit_errors: FitErrors | None = None
        nominated = task.nominated_node_name
        if nominated and nominated in node_names:
            nn = ssn.nodes.get(nominated)
            if nn is not None and task.init_resreq.less_equal(nn.future_idle()):
                # the nominated node first; its errors are not read (the full search follows)
                on_nominated, _ = helper.predicate_nodes(
                    task, [nn], ssn.predicate_for_allocate, resource_fit=task.init_resreq, errors_if_found=False)
                if on_nominated:
                    return on_nominated
        elif lazy:
            # allocate's common case: the search and the gradients in one pass (fit errors: no node
            # passes; None: the full search)
            got = helper.chosen_found(task, nodes, ssn.predicate_for_allocate)
            if isinstance(got, nodeselect.Gradients):
                return got
            fit_errors = got
        if fit_errors is None:
            # the fit errors are read only when no node is found
            candidates, fit_errors = helper.predicate_nodes(
                task, nodes, ssn.predicate_for_allocate, resource_fit=task.init_resreq, errors_if_found=False,
                lazy=lazy)
            if candidates:
                return candidates
        if hypernode:
            fit_errors.hypernode = hypernode  # type: ignore[attr-defined]
        job.nodes_fit_errors[task.uid] = fit_errors
        return SKIP if keep_going() else NO_FIT

    @staticmethod
    def pre_predicates_failed(job: JobInfo, task: TaskInfo, nodes: list[NodeInfo], e: FitError,
                              keep_going: Callable[[], bool]) -> str:
        """The pre-predicates' ``e`` recorded against every node: SKIP or STOP."""
        fe = FitErrors()
        for n in nodes:
            fe.set_node_error(n.name, e)
        job.nodes_fit_errors[task.uid] = fe
        return SKIP if keep_going() else STOP

    def best_node(self, task: TaskInfo, nodes: list[NodeInfo]) -> NodeInfo | None:
        """Score in gradients: idle (in shard, then elsewhere), then future idle (same split)."""
        return nodeselect.best_node(self.ssn, task, nodes)

    def place(self, stmt: Statement, task: TaskInfo, node: NodeInfo) -> None:
        if task.init_resreq.less_equal(node.idle):
            stmt.allocate(task, node.name)
        elif task.init_resreq.less_equal(node.future_idle()):
            self.pipelined_any = True
            stmt.pipeline(task, node.name)


JobQueue = PriorityQueue[JobInfo] | KeyedQueue[JobInfo]


class OneTask:
    """The waiting tasks of a job that has one: what `_turn` and `execute` ask of a task queue."""

    __slots__ = ("task",)

    def __init__(self, task: TaskInfo) -> None:
        self.task: TaskInfo | None = task

    def empty(self) -> bool:
        return self.task is None

    def pop(self) -> TaskInfo:
        task = self.task
        assert task is not None
        self.task = None
        return task

    def __len__(self) -> int:
        return 0 if self.task is None else 1


TaskQueue = PriorityQueue[TaskInfo] | KeyedQueue[TaskInfo] | OneTask
