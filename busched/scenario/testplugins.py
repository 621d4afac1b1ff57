"""Plugins that exist only for conformance scenarios, standing in for fakes of Volcano's own tests.

- ``test-victim-by-priority`` (arguments ``{priority: N}``): its victim function
  returns every candidate task whose priority equals N.
- ``test-device-fit-after-eviction`` (arguments ``{task: NAME, blockingTask: NAME}``):
  for the task named ``task`` only, its predicate fails with a plain Unschedulable
  status while a task named ``blockingTask`` sits on the node in any status but
  Releasing (a device that frees up only once the blocking task is evicted).
- ``test-rejecter`` (arguments ``{job: NAME}``): its job-enqueueable vote rejects
  the podgroup named NAME and permits every other (Volcano's
  ``uthelper.RejecterPlugin``).

`TEST_PLUGINS` maps each name to a builder taking the plugin's arguments; the
scenario runner merges it into the plugin registry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from busched.api.fit import Code
from busched.api.job import JobInfo
from busched.api.node import NodeInfo
from busched.api.task import TaskInfo, TaskStatus
from busched.framework import points
from busched.framework.decision import fit_error
from busched.framework.session import Session

__all__ = ["TEST_PLUGINS", "VictimByPriorityPlugin", "DeviceFitAfterEvictionPlugin", "RejecterPlugin"]


class PluginArgumentError(ValueError):
    """A test-only plugin configured with arguments it cannot use."""


def _int_argument(arguments: Mapping[str, Any], key: str, plugin: str) -> int:
    if key not in arguments:
        raise PluginArgumentError(f"{plugin}: arguments.{key}: required")
    v = arguments[key]
    if isinstance(v, bool):
        raise PluginArgumentError(f"{plugin}: arguments.{key}: expected an integer, got {v!r}")
    try:
        return int(v)
    except (TypeError, ValueError):
        raise PluginArgumentError(f"{plugin}: arguments.{key}: expected an integer, got {v!r}") from None


def _str_argument(arguments: Mapping[str, Any], key: str, plugin: str, what: str = "a task name") -> str:
    v = arguments.get(key)
    if not isinstance(v, str) or not v:
        raise PluginArgumentError(f"{plugin}: arguments.{key}: expected {what}")
    return v


class VictimByPriorityPlugin:
    name = "test-victim-by-priority"

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        self.priority = _int_argument(arguments or {}, "priority", self.name)

    def on_session_open(self, ssn: Session) -> None:
        def victims(tasks: list[TaskInfo]) -> list[TaskInfo]:
            return [t for t in tasks if t.priority == self.priority]

        ssn.add_fn(points.VICTIM_TASKS, self.name, [victims])


class DeviceFitAfterEvictionPlugin:
    name = "test-device-fit-after-eviction"
    reason = "hidden device capacity is occupied"

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        args = arguments or {}
        self.task = _str_argument(args, "task", self.name)
        self.blocking_task = _str_argument(args, "blockingTask", self.name)

    def on_session_open(self, ssn: Session) -> None:
        def predicate(task: TaskInfo, node: NodeInfo) -> None:
            if task.name != self.task:
                return
            for t in node.tasks.values():
                if t.name == self.blocking_task and t.status != TaskStatus.Releasing:
                    raise fit_error(task, node, self.reason, self.name, Code.Unschedulable)

        ssn.add_fn(points.PREDICATE, self.name, predicate)


class RejecterPlugin:
    name = "test-rejecter"

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        self.job = _str_argument(arguments or {}, "job", self.name, "a podgroup name")

    def on_session_open(self, ssn: Session) -> None:
        def enqueueable(job: JobInfo) -> int:
            return -1 if job.name == self.job else 1

        ssn.add_fn(points.JOB_ENQUEUEABLE, self.name, enqueueable)


TEST_PLUGINS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    VictimByPriorityPlugin.name: VictimByPriorityPlugin,
    DeviceFitAfterEvictionPlugin.name: DeviceFitAfterEvictionPlugin,
    RejecterPlugin.name: RejecterPlugin,
}
