"""preempt: starving jobs take resources from lower-priority work of their own queue.

Algorithm, in session hooks:

1. Preemptors.  Every job that is not Pending, passes ``ssn.job_valid``, has a
   queue in the session, is ``ssn.job_starving`` and asks for no network
   topology is a preemptor: per queue a job heap (``ssn.job_order_fn``), per job a
   heap of its Pending, ungated tasks (``ssn.task_order_fn``).  Queues holding
   preemptors are visited in ``ssn.queue_order_fn`` order.
2. Between jobs of one queue.  Pop the queue's preemptor jobs in order; for each,
   in a fresh statement and while ``ssn.job_starving(job)``, pop its tasks and
   `preempt` (below) each one, the preemptees being the Running/Bound,
   preemptable tasks of *other* jobs of the *same* queue (a BestEffort preemptor
   only takes BestEffort tasks).  Commit the statement when
   ``ssn.job_pipelined(job)``, else discard it -- every eviction of that job's
   attempt is rolled back.
3. Within a job.  Then, for every starving job of the queue, pop its (now still)
   Pending tasks in task order and `preempt` each from the tasks of its own job,
   one statement per task: committed when the task was placed, else discarded,
   which also ends that job's turn.

`preempt` for one task:
- a task whose preemptionPolicy is Never (or whose nominated node makes a
  preemption pointless) preempts nothing; ``ssn.pre_predicate_fn`` must pass;
- candidate nodes: ``ssn.predicate_for_preempt`` over the nodes the task was not
  found UnschedulableAndUnresolvable on (hard sharding: only this scheduler's
  shard), tried in groups -- in soft sharding mode the shard's nodes first.
- normal mode: nodes in ``prioritize_nodes`` score order; on each node the
  candidates pass ``ssn.preemptable`` (gang-safe, priority ...) and, with the
  node's future idle, must cover the task; in a statement for that node alone,
  while the task does not fit -- ``ssn.allocatable(queue, task)``, its request
  within the node's future idle, ``ssn.predicate_fn`` -- evict the next victim of
  ``ssn.build_victims_queue``.  Nothing is evicted when it fits already.  When it
  fits, pipeline it there and merge the node's statement into the caller's;
  otherwise discard the node's evictions and try the next node.
- topology-aware mode (``enableTopologyAwarePreemption``): a dry run on each
  node, from a random offset until ``numCandidates`` nodes with victims were
  found (``minCandidateNodesPercentage`` of the nodes, at least
  ``minCandidateNodesAbsolute``, at most ``maxCandidateNodesAbsolute``): evict
  victims in victim order until the task fits, then reprieve them from the most
  important down, keeping evicted only those without which it does not fit.
  Trial evictions are made on the live session and undone, so every plugin's
  totals follow them (event handlers), and each is told to the plugins through
  ``ssn.simulate_remove_task`` / ``ssn.simulate_add_task`` so that state kept
  per preemptor (inter-pod affinity counts) follows too; "fits" there is
  ``ssn.simulate_allocatable``, the node's future idle and
  ``ssn.simulate_predicate`` -- Volcano's Simulate* functions, which it runs
  on a cloned node and cycle state.
  The best node has the lowest highest-victim priority, then the lowest
  priority sum, then the fewest victims, then the first found; its victims are
  evicted and the task pipelined there, in a statement merged into the
  caller's.  Volcano runs the dry run on ``topologyAwarePreemptWorkerNum``
  parallel workers; here it is sequential and deterministic, so that argument
  is not read (a configuration naming it still loads), and the random start
  offset is drawn from the session's seeded ``rng``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from busched.actions.util import (
    PREDICATE_ERROR_CACHE_KEY,
    TrialEvictions,
    basic_preemptee,
    candidate_node_groups,
    contains_network_topology,
    fits_on_node,
    node_candidates,
    preemption_ineligibility,
    session_task,
    victims_cover,
)
from busched.api.job import JobInfo
from busched.api.node import NodeInfo
from busched.api.queue import QueueInfo
from busched.api.resource import Resource
from busched.api.task import TaskInfo, TaskStatus
from busched.framework.nodeselect import PredicateHelper, prioritize_nodes, unresolvable_filtered_nodes
from busched.framework.pqueue import PriorityQueue
from busched.framework.session import Session
from busched.framework.statement import Statement

__all__ = ["PreemptAction", "Candidate", "pick_candidate", "num_candidates"]

TOPOLOGY_AWARE_KEY = "enableTopologyAwarePreemption"
MIN_CANDIDATE_PERCENTAGE_KEY = "minCandidateNodesPercentage"
MIN_CANDIDATE_ABSOLUTE_KEY = "minCandidateNodesAbsolute"
MAX_CANDIDATE_ABSOLUTE_KEY = "maxCandidateNodesAbsolute"
# Volcano's worker count for the dry run: accepted (declared, so no warning) and not read, as the dry run
# here is sequential; the same decisions either way
WORKER_NUM_KEY = "topologyAwarePreemptWorkerNum"

_PRIORITY_OFFSET = 2**31  # makes every priority non-negative when summed


@dataclass
class Candidate:
    """A node where preemption works, with its victims (most important first)."""

    node: str
    victims: list[TaskInfo]


def num_candidates(num_nodes: int, percentage: int, min_absolute: int, max_absolute: int) -> int:
    """How many candidate nodes the topology-aware dry run looks for."""
    n = num_nodes * percentage // 100
    n = max(n, min_absolute)
    n = min(n, max_absolute)
    return min(n, num_nodes)


def pick_candidate(candidates: list[Candidate]) -> Candidate | None:
    """The node whose most important victim matters least; then the lowest sum of victim
    priorities; then the fewest victims; then the first found."""
    if not candidates:
        return None
    scores: list[Callable[[Candidate], int]] = [
        lambda c: -c.victims[0].priority,
        lambda c: -sum(v.priority + _PRIORITY_OFFSET for v in c.victims),
        lambda c: -len(c.victims),
    ]
    pool = candidates
    for f in scores:
        if len(pool) == 1:
            break
        best = max(f(c) for c in pool)
        pool = [c for c in pool if f(c) == best]
    return pool[0]


class PreemptAction:
    name = "preempt"
    reads_arguments = (PREDICATE_ERROR_CACHE_KEY, TOPOLOGY_AWARE_KEY, WORKER_NUM_KEY, MIN_CANDIDATE_PERCENTAGE_KEY,
                       MIN_CANDIDATE_ABSOLUTE_KEY, MAX_CANDIDATE_ABSOLUTE_KEY)

    def __init__(self) -> None:
        self.enable_predicate_error_cache = True
        self.topology_aware = False
        self.min_candidate_nodes_percentage = 10
        self.min_candidate_nodes_absolute = 1
        self.max_candidate_nodes_absolute = 100

    def _parse_arguments(self, ssn: Session) -> None:
        args = ssn.config.action_arguments(self.name, self.reads_arguments)
        self.enable_predicate_error_cache = args.get_bool(PREDICATE_ERROR_CACHE_KEY, self.enable_predicate_error_cache)
        self.topology_aware = args.get_bool(TOPOLOGY_AWARE_KEY, self.topology_aware)
        self.min_candidate_nodes_percentage = args.get_int(MIN_CANDIDATE_PERCENTAGE_KEY,
                                                           self.min_candidate_nodes_percentage)
        self.min_candidate_nodes_absolute = args.get_int(MIN_CANDIDATE_ABSOLUTE_KEY, self.min_candidate_nodes_absolute)
        self.max_candidate_nodes_absolute = args.get_int(MAX_CANDIDATE_ABSOLUTE_KEY, self.max_candidate_nodes_absolute)

    # -- the action ------------------------------------------------------------------------------
    def execute(self, ssn: Session) -> None:
        self._parse_arguments(ssn)
        preemptors: dict[str, PriorityQueue[JobInfo]] = {}
        preemptor_tasks: dict[str, PriorityQueue[TaskInfo]] = {}
        under_request: dict[str, list[JobInfo]] = {}

        for job in ssn.jobs.values():
            if job.is_pending():
                continue
            if ssn.job_valid(job) is not None:
                continue
            if job.queue not in ssn.queues:
                continue
            if not ssn.job_starving(job):
                continue
            if contains_network_topology(job):
                continue
            preemptors.setdefault(job.queue, PriorityQueue(ssn.job_order_fn)).push(job)
            under_request.setdefault(job.queue, []).append(job)
            preemptor_tasks[job.uid] = PriorityQueue(ssn.task_order_fn, _pending_tasks(job))

        queues = PriorityQueue(ssn.queue_order_fn, [ssn.queues[q] for q in preemptors])
        helper = PredicateHelper(ssn, self.enable_predicate_error_cache)

        while not queues.empty():
            queue = queues.pop()

            # Between jobs of this queue.
            jobs_q = preemptors.get(queue.uid)
            while jobs_q is not None and not jobs_q.empty():
                job = jobs_q.pop()
                stmt: Statement = Statement(ssn)
                tasks_q = preemptor_tasks[job.uid]
                while ssn.job_starving(job) and not tasks_q.empty():
                    preemptor = tasks_q.pop()
                    self._preempt(ssn, stmt, preemptor, _other_jobs_of_queue(ssn, preemptor, job.queue), helper)
                if ssn.job_pipelined(job):
                    stmt.commit()
                else:
                    stmt.discard()

            # Within each starving job of this queue.
            for job in under_request.get(queue.uid, []):
                intra = PriorityQueue(ssn.task_order_fn, _pending_tasks(job))
                while not intra.empty():
                    preemptor = intra.pop()
                    stmt = Statement(ssn)
                    if not self._preempt(ssn, stmt, preemptor, _same_job(preemptor), helper):
                        stmt.discard()
                        break
                    stmt.commit()

    # -- one preemptor ---------------------------------------------------------------------------------
    def _preempt(self, ssn: Session, stmt: Statement, preemptor: TaskInfo, keep: Callable[[TaskInfo], bool],
                 helper: PredicateHelper) -> bool:
        if preemption_ineligibility(ssn, preemptor) is not None:
            return False
        try:
            ssn.pre_predicate_fn(preemptor)
        except Exception:  # noqa: BLE001 - a failing pre-predicate: the task can go nowhere
            return False
        nodes, _ = helper.predicate_nodes(preemptor, unresolvable_filtered_nodes(ssn, preemptor),
                                          ssn.predicate_for_preempt)
        job = ssn.jobs.get(preemptor.job)
        if job is None:
            return False
        queue = ssn.queues.get(job.queue)
        for group in candidate_node_groups(ssn, nodes):
            if self.topology_aware:
                if self._topology_preempt(ssn, stmt, preemptor, queue, keep, group):
                    return True
            elif self._normal_preempt(ssn, stmt, preemptor, queue, keep, group):
                return True
        return False

    def _normal_preempt(self, ssn: Session, stmt: Statement, preemptor: TaskInfo, queue: QueueInfo | None,
                        keep: Callable[[TaskInfo], bool], nodes: list[NodeInfo]) -> bool:
        scores = prioritize_nodes(ssn, preemptor, nodes)
        for node in (n for s in sorted(scores, reverse=True) for n in scores[s]):
            victims = ssn.preemptable(preemptor, node_candidates(node, keep))
            if not victims_cover(preemptor, node, victims):
                continue
            victims_q = ssn.build_victims_queue([session_task(ssn, v) for v in victims], preemptor)
            node_stmt: Statement = Statement(ssn)
            preempted = Resource()
            fits = fits_on_node(ssn, queue, preemptor, node)
            while not fits and not victims_q.empty():
                victim = victims_q.pop()
                node_stmt.evict(victim, "preempt")
                preempted.add(victim.resreq)
                fits = fits_on_node(ssn, queue, preemptor, node)
            if fits:
                try:
                    node_stmt.pipeline(preemptor, node.name, not preempted.is_empty())
                except Exception:  # noqa: BLE001 - a failed pipeline rolls back this node's evictions
                    node_stmt.discard()
                    continue
                stmt.merge(node_stmt)
                return True
            node_stmt.discard()
        return False

    # -- topology-aware mode -----------------------------------------------------------------------------
    def _topology_preempt(self, ssn: Session, stmt: Statement, preemptor: TaskInfo, queue: QueueInfo | None,
                          keep: Callable[[TaskInfo], bool], nodes: list[NodeInfo]) -> bool:
        best = pick_candidate(self._find_candidates(ssn, preemptor, queue, keep, nodes))
        if best is None:
            return False
        tmp: Statement = Statement(ssn)
        for victim in best.victims:
            tmp.evict(victim, "preempt")
        try:
            tmp.pipeline(preemptor, best.node, True)
        except Exception:  # noqa: BLE001 - a failed pipeline rolls back the candidate's evictions
            tmp.discard()
            return False
        stmt.merge(tmp)
        return True

    def _find_candidates(self, ssn: Session, preemptor: TaskInfo, queue: QueueInfo | None,
                         keep: Callable[[TaskInfo], bool], nodes: list[NodeInfo]) -> list[Candidate]:
        if not nodes:
            return []
        offset = ssn.rng.randrange(len(nodes))
        wanted = num_candidates(len(nodes), self.min_candidate_nodes_percentage,
                                self.min_candidate_nodes_absolute, self.max_candidate_nodes_absolute)
        found: list[Candidate] = []
        for i in range(len(nodes)):
            node = nodes[(offset + i) % len(nodes)]
            victims = select_victims_on_node(ssn, preemptor, queue, node, keep)
            if victims:
                found.append(Candidate(node.name, victims))
                if len(found) >= wanted:
                    break
        return found


def select_victims_on_node(ssn: Session, preemptor: TaskInfo, queue: QueueInfo | None, node: NodeInfo,
                           keep: Callable[[TaskInfo], bool]) -> list[TaskInfo] | None:
    """The fewest victims on ``node`` that let ``preemptor`` fit (most important first), or None.

    Victims are evicted in victim order until the preemptor fits; then each is given back, the most
    important first, and stays evicted only if the preemptor no longer fits without its room.  All
    evictions are trials on the live session (`TrialEvictions`), each told to the plugins through
    the simulate-remove / simulate-add points, and are undone before returning.  "Fits" is the dry
    run's own check: ``ssn.simulate_allocatable``, the node's future idle, ``ssn.simulate_predicate``
    (Volcano's SelectVictimsOnNode).  A plugin refusing a trial change drops the node."""
    victims = ssn.preemptable(preemptor, node_candidates(node, keep))
    if not victims_cover(preemptor, node, victims):
        return None
    victims_q = ssn.build_victims_queue([session_task(ssn, v) for v in victims], preemptor)
    trial = TrialEvictions(ssn, preemptor)
    try:
        potential: list[TaskInfo] = []
        while not victims_q.empty():
            victim = victims_q.pop()
            potential.append(victim)
            trial.evict(victim)
            if _fits_in_dry_run(ssn, queue, preemptor, node):
                break
        if not potential:
            return None
        if not _simulated_predicate_passes(ssn, preemptor, node):
            return None
        chosen: list[TaskInfo] = []
        for victim in reversed(potential):
            trial.undo(victim)
            if _fits_in_dry_run(ssn, queue, preemptor, node):
                continue  # reprieved
            trial.evict(victim)
            chosen.append(victim)
        return chosen or None
    except Exception:  # noqa: BLE001 - a plugin refused a trial change: no candidate here
        return None
    finally:
        trial.discard()


def _fits_in_dry_run(ssn: Session, queue: QueueInfo | None, task: TaskInfo, node: NodeInfo) -> bool:
    return fits_on_node(ssn, queue, task, node, allocatable=ssn.simulate_allocatable,
                        predicate=ssn.simulate_predicate)


def _simulated_predicate_passes(ssn: Session, task: TaskInfo, node: NodeInfo) -> bool:
    try:
        ssn.simulate_predicate(task, node)
    except Exception:  # noqa: BLE001 - any failure means no fit
        return False
    return True


def _pending_tasks(job: JobInfo) -> list[TaskInfo]:
    return [t for t in job.tasks_in(TaskStatus.Pending) if not t.sch_gated]


def _other_jobs_of_queue(ssn: Session, preemptor: TaskInfo, queue: str) -> Callable[[TaskInfo], bool]:
    def keep(task: TaskInfo) -> bool:
        if not basic_preemptee(preemptor, task):
            return False
        job = ssn.jobs.get(task.job)
        if job is None:
            return False
        return job.queue == queue and task.job != preemptor.job

    return keep


def _same_job(preemptor: TaskInfo) -> Callable[[TaskInfo], bool]:
    return functools.partial(lambda p, t: basic_preemptee(p, t) and t.job == p.job, preemptor)
