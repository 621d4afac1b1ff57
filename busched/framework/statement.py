"""A statement: a small undo log of evict / pipeline / allocate operations.

Operations change the session at once (so later decisions see them); `commit`
turns them into decisions (binds, evictions), `discard` undoes them in reverse
order and leaves no trace.  Actions do one job's work in a statement and
commit only when the job is ready (gang scheduling).

Allocate's turn may give its statement a `HandlerRun` (``run``): its allocations then reach the
event handlers that have a run form once per run (busched.framework.runs); every other operation
flushes the run first, so those handlers have heard everything before anything else happens.
A commit dispatches a job's consecutive allocations together (`runs.dispatch_run`).
"""

from __future__ import annotations

from dataclasses import dataclass

from busched.api.node import NodeAccountingError
from busched.api.task import TaskInfo, TaskStatus
from busched.framework import runs
from busched.framework.decision import Decision
from busched.framework.runs import HandlerRun
from busched.framework.session import Session

__all__ = ["Statement", "Operation"]

EVICT, PIPELINE, ALLOCATE = "evict", "pipeline", "allocate"
_ALLOCATED = TaskStatus.Allocated  # (an enum member read from its class costs a metaclass lookup)


@dataclass(slots=True)  # one per task an action places: slots make it cheaper to build
class Operation:
    name: str
    task: TaskInfo
    reason: str = ""
    prev_status: TaskStatus = TaskStatus.Running


class Statement:
    def __init__(self, ssn: Session) -> None:
        self.ssn = ssn
        self.operations: list[Operation] = []
        self.run: HandlerRun | None = None  # set by allocate's turn, which flushes it at its end

    def flush(self) -> None:
        """The run handlers hear of every allocation made so far."""
        if self.run is not None:
            self.run.flush()

    # -- operations ----------------------------------------------------------------------
    def evict(self, task: TaskInfo, reason: str) -> None:
        self.flush()
        prev = task.status
        job = self.ssn.jobs.get(task.job)
        if job is not None:
            job.update_task_status(task, TaskStatus.Releasing)
        node = self.ssn.nodes.get(task.node_name)
        if node is not None:
            node.update_task(task)
        self.ssn._on_deallocate(task)
        self.operations.append(Operation(EVICT, task, reason, prev))

    def pipeline(self, task: TaskInfo, hostname: str, eviction_occurred: bool = False) -> None:
        self.flush()
        job = self.ssn.jobs[task.job]
        node = self.ssn.nodes.get(hostname)
        if node is None:
            raise NodeAccountingError(f"node {hostname} not in session")
        prev = task.status
        job.update_task_status(task, TaskStatus.Pipelined)
        task.node_name = hostname
        task.eviction_occurred = eviction_occurred
        try:
            node.add_task(task)
        except NodeAccountingError:
            job.update_task_status(task, prev)
            task.node_name = ""
            raise
        self.ssn._on_allocate(task)
        self.operations.append(Operation(PIPELINE, task, "", prev))

    def allocate(self, task: TaskInfo, node_name: str) -> None:
        ssn = self.ssn
        job = ssn.jobs[task.job]
        node = ssn.nodes.get(node_name)
        if node is None:
            raise NodeAccountingError(f"node {node_name} not in session")
        prev = task.status
        job.update_task_status(task, _ALLOCATED)
        task.node_name = node_name
        try:
            node.add_task(task)
        except NodeAccountingError:
            job.update_task_status(task, prev)
            task.node_name = ""
            raise
        run = self.run
        if run is None:
            ssn._on_allocate(task)
        else:
            run.allocated(task)
        self.operations.append(Operation(ALLOCATE, task, "", prev))

    # -- undo ------------------------------------------------------------------------------
    def _unevict(self, op: Operation) -> None:
        task = op.task
        job = self.ssn.jobs.get(task.job)
        if job is not None:
            job.update_task_status(task, op.prev_status)
        node = self.ssn.nodes.get(task.node_name)
        if node is not None:
            node.update_task(task)
        self.ssn._on_allocate(task)

    def _unplace(self, op: Operation) -> None:
        task = op.task
        job = self.ssn.jobs.get(task.job)
        if job is not None:
            job.update_task_status(task, TaskStatus.Pending)
        node = self.ssn.nodes.get(task.node_name)
        if node is not None:
            node.remove_task(task)
        self.ssn._on_deallocate(task)
        task.node_name = ""

    def unpipeline(self, task: TaskInfo) -> None:
        """Undo a pipeline made outside this statement (backfill's UnPipeline)."""
        self.flush()
        self._unplace(Operation(PIPELINE, task))

    def discard(self) -> None:
        self.flush()
        for op in reversed(self.operations):
            op.task.last_status = op.task.status
            op.task.last_node = op.task.node_name
            if op.name == EVICT:
                self._unevict(op)
            else:
                self._unplace(op)
        self.operations = []

    def commit(self) -> None:
        self.flush()
        if not runs.wanted(self.ssn):
            for op in self.operations:
                op.task.last_status = None
                if op.name == EVICT:
                    self.ssn.decisions.append(_decision("evict", op.task, op.reason))
                elif op.name == ALLOCATE:
                    self.ssn.dispatch(op.task)
                # a pipelined task stays Pipelined: it waits for resources being released
            self.operations = []
            return
        run: list[TaskInfo] = []  # consecutive allocations, dispatched together (the same order)
        for op in self.operations:
            op.task.last_status = None
            if op.name == ALLOCATE:
                run.append(op.task)
                continue
            if run:
                runs.dispatch_run(self.ssn, run)
                run = []
            if op.name == EVICT:
                self.ssn.decisions.append(_decision("evict", op.task, op.reason))
        if run:
            runs.dispatch_run(self.ssn, run)
        self.operations = []

    # -- save / recover (dry runs over alternatives) ------------------------------------------
    def save(self) -> list[tuple[str, TaskInfo, str, str, bool]]:
        self.flush()
        return [(op.name, op.task, op.task.node_name, op.reason, op.task.eviction_occurred)
                for op in self.operations]

    def recover(self, saved: list[tuple[str, TaskInfo, str, str, bool]]) -> None:
        for name, task, node, reason, ev in saved:
            if name == EVICT:
                self.evict(task, reason)
            elif name == PIPELINE:
                task.node_name = ""
                self.pipeline(task, node, ev)
            else:
                task.node_name = ""
                self.allocate(task, node)

    def merge(self, *others: Statement) -> None:
        self.flush()
        for o in others:
            o.flush()
            self.operations.extend(o.operations)
            o.operations = []

    def has_evictions(self) -> bool:
        return any(op.name == EVICT for op in self.operations)


def _decision(kind: str, task: TaskInfo, reason: str = "") -> Decision:
    return Decision(kind, task.key, task.node_name, reason)
