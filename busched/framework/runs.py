"""Event handlers told once per run: allocate's turn tells a handler with a run form of its
placements in one call, the rest task by task as they happen.

Volcano tells every event handler of every allocation at once (``AllocateFunc`` per task).  Some
handlers keep state that nothing allocate's turn asks reads: drf's shares are read when jobs and
queues are ordered or victims chosen, never by allocatable, the predicates, the node order or
job_ready, and proportion's queue shares only when queues are ordered (its queues' allocated,
which allocatable reads, it keeps with a handler of its own, told per task).  Such a handler may
give an ``allocate_run`` (`busched.framework.hooks.EventHandler`): told the tasks of a run in
order, it must leave its state exactly as its ``allocate`` told them one by one would.  A
`HandlerRun` holds the tasks placed since its handlers last heard, and its statement flushes it
before anything that could read what they keep: any other statement operation (evict, pipeline,
discard, commit, save), the end of the turn, and an exception, which also tells the run handlers
that come before the failing handler of the failing task, as the one-by-one order would have.
Handlers without a run form are told per task, in their order, as before.  Whatever reaches the
world is the same; only when a run handler hears differs.

A commit likewise hands a job's consecutive allocations to the binder together
(`dispatch_run`, busched.api.moves).  The one-by-one path (no run: `Session._on_allocate`,
`Session.dispatch` per task) is the reference; both runs are taken only with the kernels on
(`wanted`), and tests/framework/test_handler_runs.py checks whole cycles equal.
"""

from __future__ import annotations

from collections.abc import Callable

from busched.api import moves
from busched.api.task import TaskInfo, TaskStatus
from busched.framework.decision import Decision
from busched.framework.hooks import EventHandler
from busched.framework.session import Session

__all__ = ["HandlerRun", "open_run", "wanted", "dispatch_run"]

_KEY = "handler-runs"  # where a session keeps its handlers' split (Session.shared)


def wanted(ssn: Session) -> bool:
    """Whether ``ssn`` tells handlers per run and dispatches a commit's allocations together: with
    the kernels on (off, and in the oracle tests' reference, everything goes task by task)."""
    return ssn.fast is not None


class HandlerRun:
    """The allocations a statement made whose run handlers have not heard of them yet."""

    __slots__ = ("handlers", "eager", "deferred", "tasks")

    def __init__(self, ssn: Session, split: _Split | None = None) -> None:
        self.handlers, self.eager, self.deferred = split if split is not None else _split(ssn.event_handlers)
        self.tasks: list[TaskInfo] = []

    def allocated(self, task: TaskInfo) -> None:
        """``task`` was placed: the per-task handlers hear now, the run handlers at the next flush."""
        at = 0  # the failing handler's place, if one fails
        try:
            for pos, fn in self.eager:
                at = pos
                fn(task)
        except BaseException:
            # as one by one: the run handlers heard every earlier task, and this one if they come first
            self.flush()
            for eh in self.handlers[:at]:
                if eh.allocate_run is not None:
                    eh.allocate(task)  # type: ignore[misc]
            raise
        self.tasks.append(task)

    def flush(self) -> None:
        """Tell the run handlers of the tasks placed since they last heard."""
        tasks = self.tasks
        if tasks:
            self.tasks = []
            for fn in self.deferred:
                fn(tasks)


_Split = tuple[list[EventHandler], list[tuple[int, Callable[[TaskInfo], None]]], list[Callable[[list[TaskInfo]], None]]]


def _split(handlers: list[EventHandler]) -> _Split:
    """The handlers told of allocations; the per-task ones with their place among them (an exception
    needs it); the run forms."""
    hs = [eh for eh in handlers if eh.allocate is not None]
    eager = [(i, eh.allocate) for i, eh in enumerate(hs) if eh.allocate_run is None]
    deferred = [eh.allocate_run for eh in hs if eh.allocate_run is not None]
    return hs, eager, deferred  # type: ignore[return-value]


def open_run(ssn: Session) -> HandlerRun | None:
    """A run for allocate's turn when some handler has a run form (else None: per task, as ever).
    The handlers are split once per session (every job's turn opens a run), again if they change;
    the run itself is kept too, and handed out again once flushed (it holds nothing then)."""
    handlers = ssn.event_handlers
    kept = ssn.shared.get(_KEY)
    if kept is None or kept[0] is not handlers or kept[1] != len(handlers):
        split = _split(handlers)
        kept = ssn.shared[_KEY] = (handlers, len(handlers), split, HandlerRun(ssn, split) if split[2] else None)
    run: HandlerRun | None = kept[3]
    if run is not None and run.tasks:  # (every turn flushes its run: an unflushed one is someone's)
        return HandlerRun(ssn, kept[2])
    return run


def dispatch_run(ssn: Session, tasks: list[TaskInfo]) -> None:
    """`Session.dispatch` each of ``tasks`` in order (a commit's consecutive allocations): a job's
    consecutive tasks get their bind decisions, their move to Binding (busched.api.moves) and their
    node copies' status together, the same changes as one by one."""
    i, n = 0, len(tasks)
    while i < n:
        job = ssn.jobs.get(tasks[i].job)
        j = i + 1
        while j < n and tasks[j].job == tasks[i].job:
            j += 1
        if job is None or j - i < 2:
            for t in tasks[i:j]:
                ssn.dispatch(t)
            i = j
            continue
        group = tasks[i:j]
        # (positional: a keyword argument costs the dataclass's __init__ more than the four others)
        ssn.decisions.extend([Decision("bind", t.key, t.node_name, "", t.bind_annotations) for t in group])
        binding = TaskStatus.Binding  # (read once: an enum member read from its class is slow)
        moves.move_run(job, group, binding)
        nodes = ssn.nodes
        for t in group:
            node = nodes.get(t.node_name)
            if node is not None:
                held = node.tasks.get(t.uid)
                if held is not None:
                    held.status = binding
        i = j
