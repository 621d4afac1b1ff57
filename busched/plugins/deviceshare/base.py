"""What every kind of shared device offers the plugin (Volcano's ``api.Devices``), and a few shared helpers."""

from __future__ import annotations

import math
from typing import Protocol

from busched.api.task import TaskInfo, TaskStatus

__all__ = ["Devices", "DeviceError", "whole", "holds_devices"]

# a task in one of these is on its node without holding devices there (Volcano's NodeInfo.AddTask adds
# devices for every other status)
_NOT_HOLDING = frozenset({TaskStatus.Releasing, TaskStatus.Pipelined})


class DeviceError(RuntimeError):
    """A device could not be given to a task the predicate passed (the node changed in between)."""


class Devices(Protocol):
    """One node's devices of one kind, as a session sees and changes them."""

    name: str

    def has_request(self, task: TaskInfo) -> bool:
        """The task asks for this kind of device (and the kind is enabled)."""

    def add_task(self, task: TaskInfo) -> None:
        """Account a task already on the node, from the assignment its annotations carry."""

    def filter(self, task: TaskInfo) -> str | None:
        """Why the task's devices do not fit here, or None when they do."""

    def score(self, task: TaskInfo, policy: str) -> float:
        """The node's device score for the task under ``deviceshare.SchedulePolicy``."""

    def allocate(self, task: TaskInfo, now_ns: int) -> dict[str, str]:
        """Give the task its devices; the annotations its bind carries to the agent."""

    def release(self, task: TaskInfo) -> list[str]:
        """Take the task's devices back; the annotation keys its bind must no longer carry."""


def whole(milli: float) -> int:
    """A scalar resource (kept in thousandths) as the integer Kubernetes' ``Quantity.Value`` gives (rounded up)."""
    return max(0, math.ceil(milli / 1000 - 1e-9))


def holds_devices(task: TaskInfo) -> bool:
    """A task on a node holds devices there unless it is Releasing or Pipelined (as Volcano's AddTask)."""
    return task.status not in _NOT_HOLDING
