"""The Executor SDK: what an agent needs from the thing that really runs its tasks.

An `Executor` starts a task, waits for it to end, stops it with a grace period and tells how it is.
Give one to `busched.agent.Agent` (``executor=``) or to `run_agent` and the agent

* accepts a bind at once (``bind.accepted``: the capacity check is done, the task is the node's),
* starts it in the background through `Launcher`, at most ``concurrency`` starts at a time per node,
  so one slow start (an image pull, a big download) never holds up the other binds or nodes,
* reports ``task.phase Running`` once `Executor.start` returns, then ``Succeeded`` (exit code 0) or
  ``Failed`` (the exit code and reason `Executor.wait` gives) when it ends; a start that raises is
  ``Failed`` with the error as its reason,
* on an evict answers ``Failed`` (reason ``Evicted: ...``) at once and calls `Executor.stop` with
  the agent's grace period in the background.

An executor that can find its tasks again after the agent restarts (its processes outlive the
agent) implements `Recovering`: the agent asks it, before its first heartbeat, for the runs it still
has; it holds those again (so the scheduler keeps them bound) and waits for them as before.  An
attempt the scheduler no longer wants gets a stale evict, which stops it.  The process executor
(`busched.agent.process`, ``busched agent --exec``) is the reference implementation; docs/executors.md
shows a minimal one.

    class Echo:
        async def start(self, run: TaskRun) -> None: ...
        async def wait(self, run: TaskRun) -> Exit: return Exit(0)
        async def stop(self, run: TaskRun, grace: float) -> None: ...
        async def status(self, run: TaskRun) -> Exit | None: return None
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from busched.agent.node import AgentNode, HeldTask
from busched.api.objects import TaskSpec
from busched.api.resource import Resource

__all__ = ["Executor", "Recovering", "TaskRun", "Exit", "StartError", "Launcher", "Report", "recover_runs"]

log = logging.getLogger("busched.agent")


@dataclass
class TaskRun:
    """One attempt of a task on one node: what an executor is asked to run.  ``state`` is the
    executor's own (a process handle, a container id); ``boot`` the agent incarnation that took it."""

    node: str
    key: str  # "namespace/name"
    attempt: int
    spec: TaskSpec
    boot: str = ""
    state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Exit:
    """How a run ended: its exit code (a signal's as 128 + the signal, as shells and Kubernetes
    show it) and a reason (``Completed``, ``Error``, ``OOMKilled``, ``Lost``, ...)."""

    code: int
    reason: str = ""

    @property
    def succeeded(self) -> bool:
        return self.code == 0


class StartError(Exception):
    """Raised by `Executor.start` when the task cannot be started; the message is the reason reported."""


@runtime_checkable
class Executor(Protocol):
    async def start(self, run: TaskRun) -> None:
        """Start the task; return once it runs (this may take long: other starts go on meanwhile).
        Raise `StartError` (or anything) to fail it."""

    async def wait(self, run: TaskRun) -> Exit:
        """Wait until the started task ends, and say how."""

    async def stop(self, run: TaskRun, grace: float) -> None:
        """Stop the task: ask it to end, and after ``grace`` seconds end it and everything it started."""

    async def status(self, run: TaskRun) -> Exit | None:
        """How the task ended, or None while it runs."""


@runtime_checkable
class Recovering(Protocol):
    async def recover(self, nodes: list[str]) -> list[TaskRun]:
        """The runs an earlier incarnation of the agent started on ``nodes`` that are still running or
        ended unreported (their `TaskRun.boot` is the incarnation that took them).  What cannot be
        recovered (a process whose pid was reused, a record that cannot be read) is stopped and
        forgotten here, never left running."""

    def forget(self, run: TaskRun) -> None:
        """The run's end is reported: drop its record (what recover would find again)."""


# report(node, run, phase, reason, exit_code) -> whether it was stored
Report = Callable[[str, TaskRun, str, str, "int | None"], Awaitable[bool]]


class Launcher:
    """Starts, waits for and stops an agent's runs in the background, reporting each change."""

    def __init__(self, executor: Executor, report: Report, *, concurrency: int = 4, grace: float = 30.0) -> None:
        if concurrency < 1:
            raise ValueError("concurrency: at least 1 start at a time per node")
        self.executor = executor
        self.report = report
        self.concurrency = concurrency
        self.grace = grace
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._runs: dict[tuple[str, str], tuple[TaskRun, asyncio.Task[None]]] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        # starts under way, by id of their run: a start is never cancelled half-way (it could leave what it
        # started unrecorded); a stop or the agent's stop waits for it instead
        self._starts: dict[int, asyncio.Future[None]] = {}

    def launch(self, run: TaskRun, *, started: bool = False) -> None:
        """Start ``run`` (or, ``started``, only wait for it: a recovered run) in the background."""
        key = (run.node, run.key)
        old = self._runs.pop(key, None)
        if old is not None:  # a newer attempt replaces an older one still here
            self._background_stop(old[0], old[1])
        task = asyncio.create_task(self._run(run, started), name=f"run {run.node} {run.key} {run.attempt}")
        self._runs[key] = (run, task)
        task.add_done_callback(lambda t: self._done(key, t))

    def stop(self, node: str, key: str, attempt: int) -> None:
        """Stop the run of ``attempt`` (any attempt for 0) in the background; nothing more is reported for it."""
        cur = self._runs.get((node, key))
        if cur is None or (attempt and cur[0].attempt != attempt):
            return
        del self._runs[(node, key)]
        self._background_stop(*cur)

    def runs(self) -> list[TaskRun]:
        return [r for r, _ in self._runs.values()]

    async def close(self) -> None:
        """Stop waiting (the agent stops): runs go on, unreported, for the next incarnation to recover."""
        tasks = [t for _, t in self._runs.values()]
        self._runs.clear()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, *self._starts.values(), return_exceptions=True)

    # -- internals -----------------------------------------------------------------------------------------------
    async def _run(self, run: TaskRun, started: bool) -> None:
        if not started:
            slot = self._slots.setdefault(run.node, asyncio.Semaphore(self.concurrency))
            async with slot:
                start = asyncio.ensure_future(self.executor.start(run))
                self._starts[id(run)] = start
                start.add_done_callback(lambda _: self._starts.pop(id(run), None))
                try:
                    await asyncio.shield(start)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # noqa: BLE001 - any failure to start is the task's
                    log.warning("node %s: cannot start %s (attempt %d): %s", run.node, run.key, run.attempt, e)
                    await self.report(run.node, run, "Failed", f"StartError: {e}", None)
                    return
            await self.report(run.node, run, "Running", "", None)
        end = await self.executor.wait(run)
        if (run.node, run.key) in self._runs and self._runs[(run.node, run.key)][0] is run:
            phase = "Succeeded" if end.succeeded else "Failed"
            if await self.report(run.node, run, phase, end.reason, end.code) and isinstance(self.executor, Recovering):
                self.executor.forget(run)

    def _background_stop(self, run: TaskRun, task: asyncio.Task[None]) -> None:
        async def stop() -> None:
            # a start under way ends first (then the stop finds what it started); a wait is just dropped
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            start = self._starts.get(id(run))
            if start is not None:
                await asyncio.gather(start, return_exceptions=True)
            try:
                await self.executor.stop(run, self.grace)
            except Exception:  # noqa: BLE001
                log.exception("node %s: cannot stop %s (attempt %d)", run.node, run.key, run.attempt)
        t = asyncio.create_task(stop(), name=f"stop {run.node} {run.key} {run.attempt}")
        self._stopping.add(t)
        t.add_done_callback(self._stopping.discard)

    async def drain(self) -> None:
        """Wait for the stops under way (tests, and an agent's orderly shutdown)."""
        while self._stopping:
            await asyncio.gather(*list(self._stopping), return_exceptions=True)

    def _done(self, key: tuple[str, str], task: asyncio.Task[None]) -> None:
        cur = self._runs.get(key)
        if cur is not None and cur[1] is task:
            del self._runs[key]
        if not task.cancelled() and task.exception() is not None:
            log.error("run %s on %s failed", key[1], key[0], exc_info=task.exception())


async def recover_runs(launcher: Launcher, nodes: Mapping[str, AgentNode]) -> int:
    """Hold again, and wait for, the runs an earlier incarnation left (a `Recovering` executor's); how many."""
    ex = launcher.executor
    if not isinstance(ex, Recovering):
        return 0
    runs = await ex.recover(list(nodes))
    for run in runs:
        n = nodes[run.node]
        try:
            req = Resource.from_list(run.spec.requests, field=f"task {run.key}: requests")
        except ValueError:
            req = Resource()
        n.tasks[run.key] = HeldTask(run.key, run.attempt, run.spec, req)
        launcher.launch(run, started=True)
        log.info("node %s: recovered %s (attempt %d, boot %s)", run.node, run.key, run.attempt, run.boot)
    return len(runs)
