"""cdp (cooldown protection): a task that started recently is no victim yet.

Elastic jobs grow and shrink; without protection a pod preempted and started
again can be preempted again moments later.  A pod opts in with the label, or
else the annotation, ``volcano.sh/cooldown-time`` holding a Go duration
(``"600s"``, ``"10m"``, ``"1h30m"``); a value that does not parse gives no
protection.  A Running task is protected while ``start_time + cooldown`` is
after the session clock (``ssn.now``): once exactly the cooldown has elapsed
it is a victim again.  ``start_time`` is the task's start (Volcano reads the
pod's PodScheduled condition time; an agent reports it as the task's
``startTime``); a task whose start is not known, or that is not Running, is
not protected.

The preemptable and reclaimable callbacks drop the protected candidates and
permit the rest, in their order.  The plugin takes no arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from busched.api.duration import DurationError, parse_duration
from busched.api.task import TaskInfo, TaskStatus
from busched.framework import points
from busched.framework.session import Session

__all__ = ["CdpPlugin", "COOLDOWN_TIME_KEY", "cooldown_of", "cooling_down"]

COOLDOWN_TIME_KEY = "volcano.sh/cooldown-time"
PERMIT = 1
# A task being deleted while its pod still runs is Releasing; Volcano checks the pod phase.
_RUNNING = frozenset({TaskStatus.Running, TaskStatus.Releasing})


def cooldown_of(task: TaskInfo) -> float | None:
    """The task's cooldown in seconds (label first, then annotation); None when absent or malformed."""
    text = task.labels.get(COOLDOWN_TIME_KEY)
    if text is None:
        text = task.annotations.get(COOLDOWN_TIME_KEY)
        if text is None:
            return None
    if text != text.strip():  # Go's ParseDuration takes no surrounding space
        return None
    try:
        return parse_duration(text)
    except DurationError:
        return None


def cooling_down(task: TaskInfo, now: float) -> bool:
    """Protected from eviction at ``now``."""
    cooldown = cooldown_of(task)
    if cooldown is None or task.status not in _RUNNING or task.start_time == 0.0:
        return False
    return task.start_time + cooldown > now


class CdpPlugin:
    name = "cdp"
    reads_arguments = ()  # every argument it reads (busched.framework.arguments)
    reads_clock = True  # the cooldown after a pod starts is measured against the clock

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        pass  # Volcano's cdp takes no arguments

    def on_session_open(self, ssn: Session) -> None:
        def victims(_: TaskInfo, candidates: list[TaskInfo]) -> tuple[list[TaskInfo], int]:
            return [t for t in candidates if not cooling_down(t, ssn.now)], PERMIT

        ssn.add_fn(points.PREEMPTABLE, self.name, victims)
        ssn.add_fn(points.RECLAIMABLE, self.name, victims)
