"""Jobs that cannot fit, remembered from one cycle to the next so they are not tried again for nothing.

Replaces allocate's turn for a job that failed last cycle in a way that must
repeat: its first task found no feasible node in a full scan (no node
examined passed), nothing was placed, the session's node-search position and
random source were left as they were, and none of its tasks has inter-pod
(anti-)affinity or topology spread (which other pods' placements can satisfy).
Such a turn has no effect on the session except the job's fit errors.  The
job is skipped while

* neither it nor any of its tasks changed (the cache's per-job generation),
* no event could have made room anywhere: the cache's *capacity epoch* moves
  on any change except new pending work and tasks being placed (which only
  take room), and
* no configured plugin reads the clock or keeps state across cycles;

and its fit errors from the failed turn are put back, so its podgroup
condition says why, as before.  The decisions are those of trying it again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from busched.api.fit import FitErrors

__all__ = ["UnfitMemo", "Unfit", "frees_capacity", "MEMO_KEY"]

MEMO_KEY = "unfit"
TERMINAL = ("Succeeded", "Failed")


@dataclass
class Unfit:
    epoch: int
    job_version: int
    fit_errors: dict[str, FitErrors]
    reason: str = ""


@dataclass
class UnfitMemo:
    """Kept by the cache across cycles; handed to sessions in ``snapshot.others["unfit"]``."""

    epoch: int = 0  # capacity epoch of the snapshot this memo was handed with
    job_versions: dict[str, int] = field(default_factory=dict)  # job uid -> cache generation of its last change
    jobs: dict[str, Unfit] = field(default_factory=dict)
    skipped: int = 0

    def still_unfit(self, uid: str) -> Unfit | None:
        u = self.jobs.get(uid)
        if u is None:
            return None
        if u.epoch != self.epoch or u.job_version != self.job_versions.get(uid, 0):
            del self.jobs[uid]
            return None
        return u

    def remember(self, uid: str, fit_errors: dict[str, FitErrors]) -> None:
        self.jobs[uid] = Unfit(self.epoch, self.job_versions.get(uid, 0), dict(fit_errors))

    def forget(self, uid: str) -> None:
        self.jobs.pop(uid, None)


def frees_capacity(kind: str, old: Any, new: Any) -> bool:
    """Could replacing ``old`` by ``new`` (None: absent) make room for a job that did not fit?

    Only new pending work and tasks being placed (which take room) cannot.
    """
    if kind == "job":
        return new is None  # a job gone; a job's own change is its version
    if kind != "task":
        return True  # nodes, queues, priority classes, hypernodes, quotas, budgets
    if new is None:
        return old is not None
    if old is None or not old.node:
        # new or pending work: only a task that holds nothing once placed would matter
        return bool(new.node) and (new.phase in TERMINAL or new.deleting)
    # a placed task: only its start (Pending -> Running on the same node, nothing else changed) takes no room back
    if new.node != old.node or new.deleting or new.phase != "Running":
        return True
    return msgspec.structs.replace(old, phase=new.phase) != new


def memo_of(ssn: Any) -> UnfitMemo | None:
    """The session's memo, or None when it must not be used (kernels off, clock-reading plugins)."""
    memo = ssn.others.get(MEMO_KEY)
    if memo is None or ssn.fast is None:
        return None
    if any(getattr(p, "reads_clock", False) for p in ssn.plugins.values()):  # the plugins' own declaration
        return None
    return memo


def repeatable(task: Any) -> bool:
    """A task whose feasibility cannot grow without a capacity change (see the module docstring)."""
    return not task.topology_spread_constraints and not (
        task.affinity and (task.affinity.get("podAffinity") or task.affinity.get("podAntiAffinity")))
