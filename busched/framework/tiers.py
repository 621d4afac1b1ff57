"""The tier walk, written once, and the ways Volcano combines plugin answers.

Every extension point is a map plugin-name -> callback, filled by plugins when
the session opens.  `resolve` turns one point into a list of tiers, each a
list of callbacks in configuration order, keeping only plugins whose switch
for that point is on.  The combine functions below are the handful of
policies Volcano's ``session_plugins.go`` repeats per point.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from busched.framework.config import Tier

__all__ = ["resolve", "first_decision", "all_pass", "any_true", "vote", "starving_vote", "intersect_victims",
           "union_victims", "sum_scores", "first_answer"]

T = TypeVar("T")
Tiers = list[list[tuple[str, Callable[..., Any]]]]


def resolve(tiers: Sequence[Tier], fns: dict[str, Callable[..., Any]], switch: str | None) -> Tiers:
    """Callbacks of one extension point grouped by tier; ``switch`` None means always on."""
    out: Tiers = []
    for tier in tiers:
        row = []
        for p in tier.plugins:
            if switch is not None and not p.enabled(switch):
                continue
            fn = fns.get(p.name)
            if fn is not None:
                row.append((p.name, fn))
        out.append(row)
    return out


def first_decision(tiers: Tiers, *args: Any) -> int:
    """Order comparators: the first non-zero answer decides (JobOrderFn, TaskOrderFn...)."""
    for row in tiers:
        for _, fn in row:
            r = fn(*args)
            if r:
                return r
    return 0


def all_pass(tiers: Tiers, *args: Any) -> bool:
    """Every callback must say yes (JobReady, Allocatable, Preemptive)."""
    for row in tiers:
        for _, fn in row:
            if not fn(*args):
                return False
    return True


def any_true(tiers: Tiers, *args: Any) -> bool:
    """One yes is enough (Overused)."""
    return any(fn(*args) for row in tiers for _, fn in row)


def vote(tiers: Tiers, *args: Any) -> bool:
    """Permit (>0) / reject (<0) / abstain (0): a reject ends it, a permit ends its tier (JobPipelined,
    JobEnqueueable); all abstaining means yes."""
    for row in tiers:
        permitted = False
        for _, fn in row:
            r = fn(*args)
            if r < 0:
                return False
            if r > 0:
                permitted = True
        if permitted:
            return True
    return True


def starving_vote(tiers: Tiers, *args: Any) -> bool:
    """JobStarving: the first tier with any callback decides (all must agree); none at all means no."""
    for row in tiers:
        if not row:
            continue
        for _, fn in row:
            if not fn(*args):
                return False
        return True
    return False


def intersect_victims(tiers: Tiers, actor: Any, candidates: list[T]) -> list[T] | None:
    """Preemptable / Reclaimable: within a tier, the victims every voting plugin accepts; a plugin
    that abstains is skipped and one that returns none empties the tier.  The first tier that ends
    with victims decides.  Returns None when no plugin voted with victims."""
    victims: list[T] | None = None
    for row in tiers:
        for _, fn in row:
            cands, abstain = fn(actor, candidates)
            if abstain == 0:
                continue
            if not cands:
                victims = None
                break
            if victims is None:
                victims = list(cands)
            else:
                keep = {_identity(c) for c in cands}
                # Go leaves an empty intersection nil: the next voter of the tier starts afresh
                # and a tier ending with none does not decide.
                victims = [v for v in victims if _identity(v) in keep] or None
        if victims is not None:
            return victims
    return victims


def _identity(v: Any) -> Any:
    """Tasks are the same victim when their uid is (plugins may hand back copies)."""
    uid = getattr(v, "uid", None)
    return ("uid", uid) if uid is not None else ("obj", id(v))


def union_victims(tiers: Tiers, tasks: list[T]) -> list[T]:
    """VictimTasks: the union of every plugin's picks; the first tier with any pick decides."""
    for row in tiers:
        picked: dict[int, T] = {}
        for _, fns in row:
            for fn in fns:
                for v in fn(tasks):
                    picked.setdefault(id(v), v)
        if picked:
            return list(picked.values())
    return []


def sum_scores(tiers: Tiers, *args: Any) -> float:
    """NodeOrder: the sum of every plugin's score."""
    return sum(fn(*args) for row in tiers for _, fn in row)


def first_answer(tiers: Tiers, *args: Any) -> Any:
    """BestNode, TargetJob: the first callback that answers (not None) decides."""
    for row in tiers:
        for _, fn in row:
            r = fn(*args)
            if r is not None:
                return r
    return None
