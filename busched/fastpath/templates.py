"""The task conversions the shared snapshot assembles jobs and nodes from (its templates).

A task is converted from its spec once and kept as a template while its spec stays and the
job it was handed to is not written (busched.fastpath.lending says why a written owner means
the template may have changed); the cache's validation conversions seed the templates and a
job's first assembly (`remember_task`, `remember_job`).  Jobs and nodes both read templates,
so they live apart from either.  A mixin of `SharedMemo`, which holds the maps: the methods
stay methods (no extra call on the per-task path of an assembly).
"""

from __future__ import annotations

from typing import Any

from busched.api import build
from busched.api.job import JobInfo
from busched.api.queue import PriorityClass
from busched.api.task import TaskInfo

__all__ = ["TaskTemplates"]


def _fresh_task(tmpl: TaskInfo) -> TaskInfo:
    """A copy of a template's task for a job a session may write.  It shares the template's
    requests: a task's requests are replaced, never changed in place (a converted task's are the
    read-only `SharedResource` every task of that request holds, whose writes raise), so a copy
    of them protected nothing, and tasks sharing one answer `rowlocal.same_template` by identity."""
    t = tmpl.copy()
    t.extra = dict(tmpl.extra)
    return t


class _Template:
    """A task as converted from its spec, and the job it was handed to as it is (None: not handed)."""

    __slots__ = ("spec", "task", "owner")

    def __init__(self, spec: Any, task: TaskInfo, owner: JobInfo | None = None) -> None:
        self.spec, self.task, self.owner = spec, task, owner


class TaskTemplates:
    """The template methods of `SharedMemo` (busched.fastpath.lending), which sets the maps."""

    # the memo's maps these read and keep: task key -> template; job key -> (spec, the validation's job)
    _tasks: dict[str, _Template]
    _job_templates: dict[str, tuple[Any, JobInfo]]

    def remember_task(self, key: str, spec: Any, task: TaskInfo) -> None:
        """A task the cache converted to validate it: the template, when no priority class changes it."""
        if not spec.priority_class_name:
            self._tasks[key] = _Template(spec, task)

    def remember_job(self, key: str, spec: Any, job: JobInfo) -> None:
        """A job the cache converted to validate it: its first assembly starts from it, when no
        priority class changes it (its priority is then the default, set as it is lent)."""
        if not spec.priority_class_name:
            self._job_templates[key] = (spec, job)
        else:
            self._job_templates.pop(key, None)

    def remember_tasks(self, tasks: dict[str, Any], infos: list[TaskInfo]) -> None:
        """`remember_task` of each task of ``tasks`` (key -> spec) with its conversion, in order (a restart's
        run of new tasks: one dict update when no priority class is named)."""
        if not any(spec.priority_class_name for spec in tasks.values()):
            self._tasks.update(zip(tasks, map(_Template, tasks.values(), infos)))
            return
        for (key, spec), info in zip(tasks.items(), infos):
            self.remember_task(key, spec, info)

    def remember_jobs(self, jobs: dict[str, Any], infos: list[JobInfo]) -> None:
        """`remember_job` of each job of ``jobs`` (key -> spec) with its conversion, in order."""
        if not any(spec.priority_class_name for spec in jobs.values()):
            self._job_templates.update(zip(jobs, zip(jobs.values(), infos)))
            return
        for (key, spec), info in zip(jobs.items(), infos):
            self.remember_job(key, spec, info)

    def _template(self, key: str, spec: Any, classes: dict[str, PriorityClass]) -> _Template:
        """The task's conversion as its spec gives it: converted again when the spec changed, or when
        the job it was handed to was written (a session may have changed it since)."""
        m = self._tasks.get(key)
        if m is None or m.spec is not spec or (m.owner is not None and m.owner.written):
            m = self._tasks[key] = _Template(spec, build.task_info(spec, classes))
        return m

    def _task(self, key: str, spec: Any, classes: dict[str, PriorityClass]) -> TaskInfo:
        return self._template(key, spec, classes).task

    def _new_job(self, key: str, spec: Any, classes: dict[str, PriorityClass], default_priority: int) -> JobInfo:
        """The job without its tasks: the validation's conversion the first time, else converted."""
        m = self._job_templates.pop(key, None)
        if m is not None and m[0] is spec and "" not in classes:
            job = m[1]
            job.priority = default_priority  # what build.job_info gives without a priority class
            return job
        return build.job_info(spec, classes, default_priority)
