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
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from busched.api.task import TaskInfo, TaskStatus, completed_status
from busched.framework.session import Session
from busched.plugins.k8s import Selector, parse_label_selector, selector_matches

__all__ = ["PdbPlugin", "PodDisruptionBudget", "parse_pdb", "disruptions_allowed", "PdbError", "PDBS_KEY"]

PDBS_KEY = "podDisruptionBudgets"
PERMIT = 1
_PERCENT = re.compile(r"[0-9]+%")


class PdbError(ValueError):
    """A budget Kubernetes would not accept; the message names the budget and field."""


@dataclass(frozen=True)
class PodDisruptionBudget:
    name: str
    namespace: str
    selector: Selector  # None or (): selects nothing (for this plugin)
    min_available: int | str | None = None
    max_unavailable: int | str | None = None
    disruptions_allowed: int | None = None  # a given status; None: compute
    disrupted_pods: frozenset[str] = frozenset()

    def selects(self, task: TaskInfo) -> bool:
        return (task.namespace == self.namespace and bool(self.selector)
                and selector_matches(self.selector, task.labels))


def _int_or_percent(v: Any, where: str) -> int | str:
    """A non-negative integer or a percentage up to 100% (the API server's validation)."""
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise PdbError(f"{where}: expected an integer or a percentage, got {v!r}")
    if isinstance(v, str):
        if not _PERCENT.fullmatch(v):
            raise PdbError(f"{where}: a string must be a percentage such as '50%', got {v!r}")
        if int(v[:-1]) > 100:
            raise PdbError(f"{where}: must not be greater than 100%")
        return v
    if v < 0:
        raise PdbError(f"{where}: must not be negative")
    return v


def parse_pdb(d: Mapping[str, Any]) -> PodDisruptionBudget:
    """One budget dict to a `PodDisruptionBudget`; `PdbError` for what the API server would reject."""
    name = d.get("name")
    if not isinstance(name, str) or not name:
        raise PdbError("podDisruptionBudget: name: required string")
    ns = d.get("namespace", "default")
    where = f"podDisruptionBudget {ns}/{name}"
    sel = d.get("selector")
    if sel is not None and not isinstance(sel, Mapping):
        raise PdbError(f"{where}: selector: expected a label selector")
    min_av, max_un = d.get("minAvailable"), d.get("maxUnavailable")
    if min_av is not None and max_un is not None:
        raise PdbError(f"{where}: minAvailable and maxUnavailable cannot be both set")
    min_av = _int_or_percent(min_av, f"{where}: minAvailable") if min_av is not None else None
    max_un = _int_or_percent(max_un, f"{where}: maxUnavailable") if max_un is not None else None
    if min_av is None and max_un is None:
        min_av = 1
    allowed = d.get("disruptionsAllowed")
    if allowed is not None and (isinstance(allowed, bool) or not isinstance(allowed, int)):
        raise PdbError(f"{where}: disruptionsAllowed: expected an integer")
    disrupted = d.get("disruptedPods") or []
    if isinstance(disrupted, Mapping):  # status.disruptedPods is a map pod name -> time
        disrupted = list(disrupted)
    return PodDisruptionBudget(name=name, namespace=str(ns), selector=parse_label_selector(sel),
                               min_available=min_av, max_unavailable=max_un, disruptions_allowed=allowed,
                               disrupted_pods=frozenset(str(p) for p in disrupted))


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

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        self.arguments = arguments
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

        ssn.add_fn("victim_tasks", self.name, [self.filter])
        ssn.add_fn("reclaimable", self.name, vote)
        ssn.add_fn("preemptable", self.name, vote)
