"""pdb: never pick victims that would break a PodDisruptionBudget.

Budgets are cluster objects, read from ``ssn.others["podDisruptionBudgets"]``,
a list of dicts in the shape of a ``policy/v1`` PodDisruptionBudget::

    {name: web, namespace: default, selector: {matchLabels: {app: web}},
     minAvailable: 2}            # or maxUnavailable; an int or "N%"

Volcano reads ``status.disruptionsAllowed``, which the Kubernetes disruption
controller computes.  Without a controller we compute it the same way when the
session opens, unless the dict carries ``disruptionsAllowed`` itself:

- matching pods: the session's pods of the budget's namespace whose labels the
  selector matches; healthy ones are Running (ready, not being deleted) and not
  listed in the optional ``disruptedPods`` (pod names);
- ``minAvailable: N``: N must stay healthy;
- ``minAvailable: "P%"``: ceil(P% of expected) must; ``maxUnavailable: M`` (or
  "P%" of expected, rounded up): expected - M must; expected is the matching
  pods that have not finished (the controllers' scale in Kubernetes);
- neither: ``minAvailable: 1`` (the API default);
- allowed = healthy - (what must stay healthy), never below 0.

Filtering (victim tasks, preemptable, reclaimable -- the last two always vote):
each call starts from every budget's allowance; candidates are taken in order,
each decrementing the allowance of every budget that selects it (unless listed
in its ``disruptedPods``); a candidate that takes any allowance below zero is
kept back.  As in Volcano, a pod without labels is never a victim, and a budget
with an empty or invalid selector selects nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from busched.api.disruption import PdbError, PodDisruptionBudget, parse_pdb  # noqa: F401 (re-exported)
from busched.api.task import TaskInfo, TaskStatus, completed_status
from busched.framework import points
from busched.framework.arguments import Arguments
from busched.framework.session import Session

__all__ = ["PdbPlugin", "PodDisruptionBudget", "parse_pdb", "disruptions_allowed", "PdbError", "PDBS_KEY"]

PDBS_KEY = "podDisruptionBudgets"
PERMIT = 1


def _scaled(v: int | str, total: int) -> int:
    """GetScaledValueFromIntOrPercent(roundUp=true)."""
    if isinstance(v, int):
        return v
    return math.ceil(int(v[:-1]) * total / 100)


def disruptions_allowed(pdb: PodDisruptionBudget, pods: Iterable[TaskInfo]) -> int:
    """status.disruptionsAllowed as the disruption controller would compute it over ``pods``."""
    if pdb.disruptions_allowed is not None:
        return pdb.disruptions_allowed
    matched = [t for t in pods if pdb.selects(t)]
    healthy = sum(1 for t in matched if t.status == TaskStatus.Running and t.name not in pdb.disrupted_pods)
    live = sum(1 for t in matched if not completed_status(t.status))
    if pdb.max_unavailable is not None:
        desired = max(0, live - _scaled(pdb.max_unavailable, live))
    elif isinstance(pdb.min_available, int):
        desired = pdb.min_available
    else:
        desired = _scaled(pdb.min_available or 0, live)
    return max(0, healthy - desired)


def _session_pods(ssn: Session) -> list[TaskInfo]:
    """Every pod the session knows: its jobs' tasks, and any other task accounted on a node."""
    pods: dict[str, TaskInfo] = {}
    for job in ssn.jobs.values():
        pods.update(job.tasks)
    for node in ssn.node_list:
        for uid, t in node.tasks.items():
            pods.setdefault(uid, t)
    return list(pods.values())


class PdbPlugin:
    name = "pdb"
    reads_arguments = ()  # every argument it reads (busched.framework.arguments)
    reads_clock = False

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        self.arguments = Arguments.of(arguments)
        self.budgets: list[tuple[PodDisruptionBudget, int]] = []

    def filter(self, tasks: list[TaskInfo]) -> list[TaskInfo]:
        """The tasks that can go without breaking a budget (pdbFilterFn)."""
        allowed = [a for _, a in self.budgets]
        victims = []
        for t in tasks:
            if not t.labels:
                continue  # Volcano skips unlabelled pods before adding them to the victims
            violated = False
            for i, (pdb, _) in enumerate(self.budgets):
                if not pdb.selects(t) or t.name in pdb.disrupted_pods:
                    continue
                allowed[i] -= 1
                if allowed[i] < 0:
                    violated = True
            if not violated:
                victims.append(t)
        return victims

    def on_session_open(self, ssn: Session) -> None:
        raw = ssn.others.get(PDBS_KEY) or []
        budgets = []
        for d in raw:
            try:
                budgets.append(d if isinstance(d, PodDisruptionBudget) else parse_pdb(d))
            except PdbError:
                continue  # an object the API server would have refused does not exist
        pods = _session_pods(ssn) if any(b.disruptions_allowed is None for b in budgets) else []
        self.budgets = [(b, disruptions_allowed(b, pods)) for b in budgets]

        def vote(_: TaskInfo, preemptees: list[TaskInfo]) -> tuple[list[TaskInfo], int]:
            return self.filter(preemptees), PERMIT

        ssn.add_fn(points.VICTIM_TASKS, self.name, [self.filter])
        ssn.add_fn(points.RECLAIMABLE, self.name, vote)
        ssn.add_fn(points.PREEMPTABLE, self.name, vote)
