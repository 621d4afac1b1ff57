"""The inserts a restart makes by the hundred thousand (`busched.scheduler.restore_bulk`).

`Cache.upsert` handles every case (a new object, a changed one, any kind); a restart
inserts only tasks and jobs the cache does not hold yet, so these write `upsert`'s steps
out for that one case, each validated (converted) before anything changes.  They live
apart from `busched.cache.cache` because they repeat, inline, what its `upsert`,
`_changed` and `_index_task` keep (tests check they leave the cache as `upsert` does),
and that is easier to read side by side than among the cache's other events.  A mixin of
`Cache`: the methods stay methods (no extra call on the restart's per-object path).
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

__all__ = ["Inserts"]

_NO_CLASSES: dict[str, PriorityClass] = {}  # (the conversion's priority classes when validating: none, as `_validate`)


class Inserts:
    """`insert`, `insert_task`, `insert_job` of `Cache`, which holds the state they change."""

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
    _index_task: Callable[[str, Any, Any, int], None]

    def insert(self, kind: str, spec: Any, key: str) -> None:
        """`upsert` of a task or job the cache does not hold yet, its steps written out for that case: a
        restart inserts hundreds of thousands (`busched.scheduler.restore_bulk`); anything else is `upsert`.
        Validated (converted) before anything changes, as `upsert` does."""
        objects = self.objects.get(kind)
        if objects is None or key in objects or (kind != "task" and kind != "job"):
            self.upsert(kind, spec, key)
            return
        version = self.generation + 1
        if kind == "task":
            self._memo.remember_task(key, spec, build.task_info(spec, {}))
            if unfit.frees_capacity(kind, None, spec):
                self.capacity_epoch += 1
            self._index_task(key, None, spec, version)
        else:
            self._memo.remember_job(key, spec, build.job_info(spec, {}))
            self.job_version[key] = version
            self.changes.job(key, None, spec)
            self.unfit.job_versions[key] = version
        objects[key] = spec
        self.generation = version

    def insert_task(self, key: str, spec: Any) -> None:
        """`insert` of a task, written out further for a restart's 140,000 (`busched.scheduler.restore_bulk`):
        the conversion first (it validates: nothing changes when it refuses), then the lending's template,
        the capacity epoch and the task indexes as `_index_task` keeps them for a task it did not hold; the
        job key is the conversion's (the same text as ``namespace/job``, one string, its hash computed once).
        A key the cache holds goes through `upsert`.  Tests check it leaves the cache as `upsert` does."""
        tasks = self.objects["task"]
        if key in tasks:
            self.upsert("task", spec, key)
            return
        info = build.task_info(spec, _NO_CLASSES)
        version = self.generation + 1
        self._memo.remember_task(key, spec, info)
        node = spec.node
        if node and (spec.phase in unfit.TERMINAL or spec.deleting):  # (`unfit.frees_capacity` of a new task)
            self.capacity_epoch += 1
        self.task_seq[key] = self._next_seq
        self._next_seq += 1
        changes = self.changes
        if spec.job:
            job = info.job
            self.unfit.job_versions[job] = version
            self.job_version[job] = version
            changes.jobs[job] = None
            keys = self.job_tasks.get(job)
            if keys is None:
                self.job_tasks[job] = {key}
            else:
                keys.add(key)
        if node:
            self.node_version[node] = version
            changes.nodes[node] = None
            keys = self.node_tasks.get(node)
            if keys is None:
                self.node_tasks[node] = {key}
            else:
                keys.add(key)
        tasks[key] = spec
        self.generation = version

    def insert_job(self, key: str, spec: Any) -> None:
        """`insert` of a job, written out as `insert_task` is."""
        jobs = self.objects["job"]
        if key in jobs:
            self.upsert("job", spec, key)
            return
        info = build.job_info(spec, _NO_CLASSES)
        version = self.generation + 1
        self._memo.remember_job(key, spec, info)
        self.job_version[key] = version
        self.changes.jobs[key] = None  # (`Changes.job` of a job that is there)
        self.unfit.job_versions[key] = version
        jobs[key] = spec
        self.generation = version
