"""The inserts a restart makes by the hundred thousand (`busched.scheduler.restore_bulk`).

`Cache.upsert` handles every case (a new object, a changed one, any kind), one object at a
time; a restart inserts mostly tasks and jobs the cache does not hold yet, converted
(validated) by its scan, so `insert_new` sets what `upsert` would for a whole run of them
at once: dict and set updates over the run's columns (`NewObjects`) instead of per-object
steps.  It lives apart from `busched.cache.cache` because it repeats what its `upsert`,
`_changed` and `_index_task` keep (tests check it leaves the cache as `upsert` does, every
dict in the same order), and that is easier to read side by side than among the cache's
other events.  A mixin of `Cache`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from busched.api import build
from busched.api.queue import PriorityClass
from busched.fastpath import unfit
from busched.fastpath.lending import SharedMemo
from busched.fastpath.unfit import UnfitMemo

if TYPE_CHECKING:
    from busched.cache.cache import Changes

__all__ = ["Inserts", "NewObjects"]

_NO_CLASSES: dict[str, PriorityClass] = {}  # (the conversion's priority classes when validating: none, as `_validate`)

class NewObjects:
    """A run of tasks and jobs the cache does not hold, each converted (validated) already, in the order they
    came, for `Inserts.insert_new`: what `insert_task` / `insert_job` would do one by one, recorded as columns
    (the restart's scan, `busched.scheduler.restore_bulk`, appends to them; nothing here checks anything).

    ``tasks``: key -> the object the cache holds, ``task_infos`` its conversion (same order); ``jobs`` and
    ``job_infos`` likewise; ``specs``: key -> the spec, for a task the cache holds as its effective object
    (bound, ended, gated: it differs; the scheduler's own column, kept here for it).  The i-th object of the
    run (both kinds, from 1) takes the cache generation at the run's start plus i as its version:
    ``touched``/``touched_v``/``touched_task`` name the job each object touches (a task's job, or the job
    itself; ``touched_task`` the task's key, None for a job) with that version; ``nodes``/``nodes_v``/
    ``nodes_key`` the node each placed task is on.  ``freed``: how many of the tasks free capacity
    (`unfit.frees_capacity` of a new task); ``count``: the run's length."""

    __slots__ = ("base", "tasks", "specs", "task_infos", "jobs", "job_infos", "touched", "touched_v", "touched_task",
                 "nodes", "nodes_v", "nodes_key", "freed", "count")

    def __init__(self, base: int = 0) -> None:
        self.base = base  # the cache generation at the run's start (`add_task`, `add_job` number from it)
        self.tasks: dict[str, Any] = {}
        self.specs: dict[str, Any] = {}
        self.task_infos: list[Any] = []
        self.jobs: dict[str, Any] = {}
        self.job_infos: list[Any] = []
        self.touched: list[str] = []
        self.touched_v: list[int] = []
        self.touched_task: list[str | None] = []
        self.nodes: list[str] = []
        self.nodes_v: list[int] = []
        self.nodes_key: list[str] = []
        self.freed = 0
        self.count = 0

    def add_task(self, key: str, held: Any, info: Any) -> None:
        """A new task (the object the cache is to hold, and its conversion) at the run's end.  (The restart's scan
        does the same inline.)"""
        self.count += 1
        v = self.base + self.count
        if held.job:
            self.touched.append(info.job)  # (the conversion's job key: the same text as namespace/job)
            self.touched_v.append(v)
            self.touched_task.append(key)
        if held.node:
            self.nodes.append(held.node)
            self.nodes_v.append(v)
            self.nodes_key.append(key)
            if held.deleting or held.phase in unfit.TERMINAL:  # (`unfit.frees_capacity` of a new task)
                self.freed += 1
        self.tasks[key] = held
        self.task_infos.append(info)

    def add_job(self, key: str, spec: Any, info: Any) -> None:
        """A new job and its conversion at the run's end."""
        self.count += 1
        self.touched.append(key)
        self.touched_v.append(self.base + self.count)
        self.touched_task.append(None)
        self.jobs[key] = spec
        self.job_infos.append(info)

    def clear(self) -> None:
        """Empty for the next run (the lists kept: the scan holds their bound methods)."""
        self.tasks.clear()
        self.specs.clear()
        self.jobs.clear()
        for column in (self.task_infos, self.job_infos, self.touched, self.touched_v, self.touched_task, self.nodes,
                       self.nodes_v, self.nodes_key):
            column.clear()
        self.freed = self.count = 0


class Inserts:
    """`insert_new` (and `insert_task`, `insert_job`: a run of one) of `Cache`, which holds the state they
    change."""

    # the cache's state these keep (busched.cache.cache.Cache sets it)
    objects: dict[str, dict[str, Any]]
    generation: int
    capacity_epoch: int
    _memo: SharedMemo
    task_seq: dict[str, int]
    _next_seq: int
    job_tasks: dict[str, set[str]]
    node_tasks: dict[str, set[str]]
    job_version: dict[str, int]
    node_version: dict[str, int]
    changes: Changes
    unfit: UnfitMemo
    upsert: Callable[..., None]

    def insert_task(self, key: str, spec: Any) -> None:
        """A task as a restart inserts it: converted (validated: nothing changes when it refuses), then a run of
        one (`insert_new`); one the cache holds goes through `upsert`."""
        if key in self.objects["task"]:
            self.upsert("task", spec, key)
            return
        run = NewObjects(self.generation)
        run.add_task(key, spec, build.task_info(spec, _NO_CLASSES))
        self.insert_new(run)

    def insert_job(self, key: str, spec: Any) -> None:
        """A job as a restart inserts it (as `insert_task`)."""
        if key in self.objects["job"]:
            self.upsert("job", spec, key)
            return
        run = NewObjects(self.generation)
        run.add_job(key, spec, build.job_info(spec, _NO_CLASSES))
        self.insert_new(run)

    def insert_new(self, run: NewObjects) -> None:
        """Insert a run of new, converted tasks and jobs (`NewObjects`) at once, leaving the cache exactly as
        `insert_task` / `insert_job` of each in turn do: the same objects, indexes, versions, change record,
        epochs and templates, every dict in the same order (an update keeps a key where it first came, the
        last value winning, as assignments one by one).  Each column is applied by a dict or set operation over
        the run, not per object; the two task indexes (a set per job and per node) are the only loops.
        Every key of the run is one the cache does not hold (the caller's check: nothing here looks).  The
        templates are remembered first, as `insert_task` did before any index: what can raise there (a
        conversion kept, memory) leaves the indexes untouched."""
        tasks, jobs = run.tasks, run.jobs
        if tasks:
            self._memo.remember_tasks(tasks, run.task_infos)
        if jobs:
            self._memo.remember_jobs(jobs, run.job_infos)
        touched, touched_v = run.touched, run.touched_v
        changes = self.changes
        if touched:
            self.job_version.update(zip(touched, touched_v))
            self.unfit.job_versions.update(zip(touched, touched_v))
            changes.jobs.update(dict.fromkeys(touched))
            job_tasks = self.job_tasks
            for job, key in zip(touched, run.touched_task):
                if key is not None:
                    keys = job_tasks.get(job)
                    if keys is None:
                        job_tasks[job] = {key}
                    else:
                        keys.add(key)
        if run.nodes:
            nodes = run.nodes
            self.node_version.update(zip(nodes, run.nodes_v))
            changes.nodes.update(dict.fromkeys(nodes))
            node_tasks = self.node_tasks
            for node, key in zip(nodes, run.nodes_key):
                keys = node_tasks.get(node)
                if keys is None:
                    node_tasks[node] = {key}
                else:
                    keys.add(key)
        if tasks:
            first = self._next_seq
            self._next_seq = first + len(tasks)
            self.task_seq.update(zip(tasks, range(first, self._next_seq)))
            self.objects["task"].update(tasks)
        if jobs:
            self.objects["job"].update(jobs)
        self.capacity_epoch += run.freed
        self.generation += run.count
