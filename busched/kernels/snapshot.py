"""Snapshot sharing: build each node and task once per spec version, not once per cycle.

Replaces, in `Cache.snapshot`, the per-cycle ``build.node_info`` /
``build.task_info`` of every object and the ``NodeInfo.add_task`` of every
placed task (the loop kept as ``Cache.snapshot(memo=False)``).  The cache's
specs are immutable values replaced on every upsert, so a spec object's
identity is its version:

* a task is converted once per spec version into a template; each snapshot
  gets a fresh clone of it (sessions change tasks);
* a node's accounting (idle, used, releasing, pipelined and its copies of its
  tasks) is computed once per (node spec, the task templates on it); each
  snapshot gets a fresh node with its own accounting resources, maps and task
  map.  The copies a node keeps of its tasks, and its allocatable and
  capacity, are shared between snapshots: sessions replace task entries and
  never change those resources in place.

Priority classes feed task priorities: when they change, every task is
converted again.
"""

from __future__ import annotations

from typing import Any

from busched.api.job import JobInfo
from busched.api.node import NodeInfo
from busched.api.resource import Resource
from busched.api.queue import PriorityClass
from busched.api.task import TaskInfo, completed_status
from busched.cache import build

__all__ = ["SnapshotMemo"]


def _fresh_node(acc: NodeInfo, index: int) -> NodeInfo:
    """A node a session may change, equal to ``acc``: its own resources, maps and listeners."""
    n = object.__new__(NodeInfo)
    n.__dict__.update(acc.__dict__)
    # a node's allocatable and capacity are read, never changed in place: shared
    n.idle = acc.idle.clone()
    n.used = acc.used.clone()
    n.releasing = acc.releasing.clone()
    n.pipelined = acc.pipelined.clone()
    n.labels = dict(acc.labels)
    n.annotations = dict(acc.annotations)
    n.taints = list(acc.taints)
    n.images = dict(acc.images)
    n.tasks = dict(acc.tasks)
    n.listeners = []
    n.index = index
    return n


_PLANS: dict[tuple[tuple[str, ...], tuple[type, ...]], list[tuple[str, int]]] = {}


def _copy_plan(tmpl: JobInfo) -> list[tuple[str, int]]:
    """The fields of a job that hold containers, and how to copy each (1 dict, 2 list, 3 Resource);
    the same for every job whose fields have the same types."""
    d = tmpl.__dict__
    sig = (tuple(d), tuple(map(type, d.values())))
    plan = _PLANS.get(sig)
    if plan is None:
        plan = []
        for k, v in d.items():
            if isinstance(v, dict):
                plan.append((k, 1))
            elif isinstance(v, list):
                plan.append((k, 2))
            elif isinstance(v, Resource):
                plan.append((k, 3))
        _PLANS[sig] = plan
    return plan


def _fresh_job(tmpl: JobInfo, plan: list[tuple[str, int]]) -> JobInfo:
    """A job a session may change, equal to ``tmpl`` (which has no tasks): every container copied."""
    j = object.__new__(JobInfo)
    d = tmpl.__dict__.copy()
    for k, how in plan:
        v = d[k]
        if how == 1:
            d[k] = dict(v) if v else {}
        elif how == 2:
            d[k] = [dict(x) if isinstance(x, dict) else x for x in v] if v else []
        else:
            d[k] = v.clone()
    j.__dict__ = d
    return j


def _fresh_task(tmpl: TaskInfo) -> TaskInfo:
    t = tmpl.clone()
    t.extra = dict(tmpl.extra)  # the one per-task map sessions write into
    return t


class SnapshotMemo:
    """Kept by a `Cache`; `nodes_and_tasks` is the part of its snapshot it speeds up."""

    def __init__(self) -> None:
        self._classes: Any = None
        self._tasks: dict[str, tuple[Any, TaskInfo]] = {}
        self._nodes: dict[str, tuple[Any, NodeInfo]] = {}
        self._accounted: dict[str, tuple[NodeInfo, list[TaskInfo], NodeInfo]] = {}
        self._jobs: dict[str, tuple[Any, int, JobInfo, list[tuple[str, int]]]] = {}

    def remember_task(self, key: str, spec: Any, task: TaskInfo) -> None:
        """A task the cache converted to validate it: the template, when priority classes do not
        change it (no priority class named)."""
        if not spec.priority_class_name:
            self._tasks[key] = (spec, task)

    def remember_job(self, key: str, spec: Any, job: JobInfo) -> None:
        """A job the cache converted (with no priority classes) to validate it: the template while no
        class is named by it or is the global default (priority 0 then)."""
        if not spec.priority_class_name:
            self._jobs[key] = (spec, 0, job, _copy_plan(job))

    def job(self, key: str, spec: Any, classes: dict[str, PriorityClass], default_priority: int) -> JobInfo:
        """A fresh JobInfo (no tasks yet) for the job's spec; call `nodes_and_tasks` first."""
        m = self._jobs.get(key)
        if m is None or m[0] is not spec or m[1] != default_priority:
            tmpl = build.job_info(spec, classes, default_priority)
            m = self._jobs[key] = (spec, default_priority, tmpl, _copy_plan(tmpl))
        tmpl = m[2]
        if tmpl.sub_jobs or tmpl.task_to_sub_job:
            return build.job_info(spec, classes, default_priority)  # sub-job state: not shared
        return _fresh_job(tmpl, m[3])

    def nodes_and_tasks(self, objects: dict[str, dict[str, Any]],
                        classes: dict[str, PriorityClass]) -> tuple[list[NodeInfo], list[TaskInfo]]:
        """Ready nodes (indexed, with their tasks accounted) and one fresh TaskInfo per task spec."""
        sig = tuple(sorted((k, v.value, v.preemption_policy, v.global_default) for k, v in classes.items()))
        if sig != self._classes:
            self._classes = sig
            # tasks and jobs naming no priority class do not depend on the classes (a job's
            # default priority, from the global-default class, is checked on each use)
            self._tasks = {k: m for k, m in self._tasks.items() if not m[0].priority_class_name}
            self._jobs = {k: m for k, m in self._jobs.items() if not m[0].priority_class_name}
        node_specs = objects["node"]
        task_specs = objects["task"]
        templates = []
        for i, (key, spec) in enumerate(node_specs.items()):
            m = self._nodes.get(key)
            if m is None or m[0] is not spec:
                m = self._nodes[key] = (spec, build.node_info(spec, i))
            if m[1].ready:
                templates.append(m[1])
        placed: dict[str, list[TaskInfo]] = {n.name: [] for n in templates}
        tasks = []
        memo = self._tasks
        for key, spec in task_specs.items():
            m = memo.get(key)
            if m is None or m[0] is not spec:
                m = memo[key] = (spec, build.task_info(spec, classes))
            tmpl = m[1]
            tasks.append(_fresh_task(tmpl))
            if tmpl.node_name and not completed_status(tmpl.status):
                on = placed.get(tmpl.node_name)
                if on is not None:
                    on.append(tmpl)
        nodes = []
        for index, tmpl in enumerate(templates):
            on = placed[tmpl.name]
            acc = self._accounted.get(tmpl.name)
            if acc is None or acc[0] is not tmpl or len(acc[1]) != len(on) or any(
                    a is not b for a, b in zip(acc[1], on)):
                n = _fresh_node(tmpl, index)
                for t in on:
                    n.add_task(t)
                acc = self._accounted[tmpl.name] = (tmpl, on, n)
            nodes.append(_fresh_node(acc[2], index))
        self._forget(node_specs, task_specs)
        return nodes, tasks

    def forget_jobs(self, job_specs: dict[str, Any]) -> None:
        if len(self._jobs) > len(job_specs):
            for k in [k for k in self._jobs if k not in job_specs]:
                del self._jobs[k]

    def _forget(self, node_specs: dict[str, Any], task_specs: dict[str, Any]) -> None:
        """Drop what belongs to deleted objects (checked only when the counts say some are gone)."""
        if len(self._tasks) > len(task_specs):
            for k in [k for k in self._tasks if k not in task_specs]:
                del self._tasks[k]
        if len(self._nodes) > len(node_specs):
            for k in [k for k in self._nodes if k not in node_specs]:
                del self._nodes[k]
        if len(self._accounted) > len(self._nodes):
            names = {m[1].name for m in self._nodes.values()}
            for k in [k for k in self._accounted if k not in names]:
                del self._accounted[k]
