"""Pod disruption budgets as cluster objects: the parsed budget and its validation.

`parse_pdb` rejects what the Kubernetes API server would reject; the cache uses
it to refuse a bad budget when it arrives, the pdb plugin to read budgets.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from busched.api.k8s import Selector, parse_label_selector, selector_matches
from busched.api.task import TaskInfo

__all__ = ["PdbError", "PodDisruptionBudget", "parse_pdb"]

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
