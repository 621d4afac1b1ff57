"""The tier walk, written once, and the ways Volcano combines plugin answers.

Every extension point (`busched.framework.points`) is a map plugin-name ->
callback, filled by plugins when the session opens.  `resolve` turns one point
into a list of tiers, each a list of ``(plugin, callback)`` in configuration
order, keeping only plugins whose switch for that point is on.  The combine
functions below are the policies Volcano's ``session_plugins.go`` repeats per
point; every session dispatcher is one of them over the resolved tiers, and
each point names its own in the points table.

The walkers that call plugin code on behalf of a task (predicates, node
order) take ``fail(plugin, args, error) -> Exception``: a callback that raises
anything but a `FitError` is reported as that plugin's failure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from busched.api.fit import FitError

if TYPE_CHECKING:
    from busched.framework.config import Tier

__all__ = ["Fail", "Tiers", "all_pass", "any_true", "by_plugin", "call_all", "first_decision", "first_failure",
           "first_invalid", "first_plugin", "intersect_victims", "resolve", "starving_vote", "sum_maps",
           "sum_scores", "union_victims", "vote"]

T = TypeVar("T")
Tiers = list[list[tuple[str, Any]]]
Fail = Callable[[str, tuple[Any, ...], Exception], Exception]


def resolve(tiers: Sequence[Tier], fns: dict[str, Any], switch: str | None, any_of: Sequence[str] = ()) -> Tiers:
    """Callbacks of one extension point grouped by tier; ``switch`` None means always on; ``any_of``, when
    given, keeps only the plugins with one of those switches on."""
    out: Tiers = []
    for tier in tiers:
        row = []
        for p in tier.plugins:
            if switch is not None and not p.enabled(switch):
                continue
            if any_of and not any(p.enabled(s) for s in any_of):
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
            r: int = fn(*args)
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
        for _, fn in row:  # noqa: SIM110 - a plain loop: no generator per call on this hot path
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
    """VictimTasks: the union of every plugin's picks (each plugin registers a list of callbacks);
    the first tier with any pick decides."""
    for row in tiers:
        picked: dict[int, T] = {}
        for _, fns in row:
            for fn in fns:
                for v in fn(tasks):
                    picked.setdefault(id(v), v)
        if picked:
            return list(picked.values())
    return []


def first_failure(tiers: Tiers, fail: Fail, *args: Any) -> None:
    """PrePredicate, Predicate: every callback runs until one raises; a `FitError` is the answer,
    anything else the plugin's failure (``fail``)."""
    for row in tiers:
        for name, fn in row:
            try:
                fn(*args)
            except FitError:
                raise
            except Exception as e:
                raise fail(name, args, e) from e


def sum_scores(tiers: Tiers, fail: Fail, *args: Any) -> float:
    """NodeOrder: the sum of every plugin's score (from an int 0, as Go's sum of float64 reads)."""
    total: float = 0
    for row in tiers:
        for name, fn in row:
            try:
                total += fn(*args)
            except Exception as e:
                raise fail(name, args, e) from e
    return total


def sum_maps(tiers: Tiers, fail: Fail, *args: Any) -> dict[str, float]:
    """BatchNodeOrder: every plugin's ``{node: score}`` summed per node."""
    out: dict[str, float] = {}
    for row in tiers:
        for plugin, fn in row:
            try:
                scores = fn(*args)
            except Exception as e:
                raise fail(plugin, args, e) from e
            for name, s in scores.items():
                out[name] = out.get(name, 0.0) + s
    return out


def first_invalid(tiers: Tiers, *args: Any) -> Any:
    """JobValid: the first answer that did not pass, else None."""
    for row in tiers:
        for _, fn in row:
            vr = fn(*args)
            if vr is not None and not vr.passed:
                return vr
    return None


def call_all(tiers: Tiers, *args: Any) -> None:
    """JobEnqueued: a notification every callback hears."""
    for row in tiers:
        for _, fn in row:
            fn(*args)


def first_plugin(tiers: Tiers, default: T, *args: Any) -> T:
    """HyperNodeGradientFor(Sub)Job: the first callback's answer, whatever it is; ``default`` when none."""
    for row in tiers:
        for _, fn in row:
            r: T = fn(*args)
            return r
    return default


def by_plugin(tiers: Tiers, *args: Any) -> dict[str, Any]:
    """HyperNodeOrder: every callback's answer, by plugin."""
    out: dict[str, Any] = {}
    for row in tiers:
        for name, fn in row:
            out[name] = fn(*args)
    return out
