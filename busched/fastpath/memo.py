"""Work a session does over every job or node, done again only for what changed.

Lent objects (busched.fastpath.lending) keep their identity from session to session
for as long as they do not change, so identity is a version, as it is for the
cache's specs:

* `job_value` / `node_value` keep a value derived from one job (its spec and
  task index) or one node (its spec and tasks) on the object itself, in its
  ``derived`` map, which the object empties whenever its task index changes.
  Such a value may depend on nothing else but what ``key`` names.
* `incremental` keeps, from one session to the next, a result computed over
  all of the session's jobs (nodes) with the list of objects it came from.
  The next session whose objects are the very same, in the same order, gets
  it again (comparing identities costs a pass in C); when only some were
  replaced in place and some added at the end (a job assembled again keeps
  its place in the session's order; new jobs come last), an update function
  gets the old result and the (place, old, new) triples, so a session after
  a small change costs what changed, not the cluster.  Results are kept with
  the cache's other cross-cycle state (``plugin_state``); where there is
  none (a snapshot built by hand) nothing is kept.
* Sums of Resources kept this way are in `busched.fastpath.sums`.

Values handed out are shared between sessions: callers must not change them
(copy first, as drf does with a job's share before an allocation moves it).
An update may build on the old result: the session it was computed for has
closed (a lease that does not come back makes the lending start over, and
with new objects every result is computed afresh).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable
from typing import Any

__all__ = ["job_value", "node_value", "incremental", "split", "by_name", "names_of", "Pairs"]

# (place, old, new) for the objects replaced in place, then (place, None, new) for those added
Pairs = list[tuple[int, Any, Any]]

_MISSING = object()


def job_value(job: Any, key: Any, fn: Callable[[Any], Any]) -> Any:
    """``fn(job)``, computed once while the job's tasks and spec do not change."""
    d = job.derived
    v = d.get(key, _MISSING)
    if v is _MISSING:
        v = d[key] = fn(job)
    return v


node_value = job_value  # the same contract: a node's ``derived`` map is emptied when its tasks change


def incremental(ssn: Any, key: Any, objects: list[Any], full: Callable[[list[Any]], Any],
                update: Callable[[Any, Pairs], Any]) -> Any:
    """``full(objects)``, or ``update(last result, pairs)`` when the last session's objects are these
    but for some replaced in place and some added at the end.  ``update`` returns None when it
    cannot follow the change (then ``full`` runs).  The old objects may have changed in the last
    session: what an update takes out must come from the result, not from them."""
    state = ssn.others.get("plugin_state")
    if state is None:
        return full(objects)
    seen = getattr(ssn, "shared", None)
    objects, token = _one_of(state, seen, objects)
    slot = ("reuse", key)
    m = state.get(slot)
    v = None
    if m is not None:
        old, last, old_token = m
        n = len(old)
        if len(objects) >= n:
            changed = _changed(seen, old, old_token, objects, token)
            if not changed and len(objects) == n:
                return last
            pairs: Pairs = [(i, old[i], objects[i]) for i in changed]
            pairs.extend((i, None, objects[i]) for i in range(n, len(objects)))
            if len(pairs) <= len(objects) // 4:  # more than that changed: as cheap to start over
                del state[slot]  # an update may change ``last`` in place: if it fails midway, none is kept
                v = update(last, pairs)
    if v is None:
        v = full(objects)
    state[slot] = (objects, v, token)
    return v


def _one_of(state: dict[Any, Any], seen: dict[str, Any] | None, objects: list[Any]) -> tuple[list[Any], object]:
    """The list with these very objects that an earlier call of this session kept, else ``objects``
    (kept), with its token: every result over the session's jobs (nodes) then keeps one list, so the
    next session compares its lists with the last one once (`_changed`), not once per result.

    The lists are kept in ``state`` under the session's mark (``seen``, its shared state, holds only
    the mark): dropped there by the next session, they go when their results do, not with the
    session's garbage (a list of 50,000 jobs freed by the collector would lengthen its pause)."""
    if seen is None:
        return objects, None
    mark = seen.get("reuse.mark")
    if mark is None:
        mark = seen["reuse.mark"] = object()
    kept_lists = state.get("reuse.lists")
    if kept_lists is None or kept_lists[0] is not mark:
        kept_lists = state["reuse.lists"] = (mark, [])
    lists: list[tuple[list[Any], object]] = kept_lists[1]
    for kept, token in lists:
        if len(kept) == len(objects) and kept == objects:  # identity (lent objects compare so), in C
            return kept, token
    token = object()
    lists.append((objects, token))
    return objects, token


def _changed(seen: dict[str, Any] | None, old: list[Any], old_token: object, objects: list[Any],
             token: object) -> list[int]:
    """The places below ``len(old)`` where ``objects`` holds another object than ``old``, worked out
    once per session for each pair of kept lists, known by their tokens (``seen``: the session's
    shared state).  Only the tokens are held there: a session holding the last one's list would
    hold the objects it wrote, and through their listeners that session, and so on back."""
    if seen is None or old_token is None or token is None:
        return list(itertools.compress(range(len(old)), map(operator.is_not, old, objects)))
    diffs: dict[tuple[int, int], tuple[object, object, list[int]]] = seen.setdefault("reuse.diffs", {})
    got = diffs.get((id(old_token), id(token)))
    if got is None or got[0] is not old_token or got[1] is not token:
        got = (old_token, token, list(itertools.compress(range(len(old)), map(operator.is_not, old, objects))))
        diffs[(id(old_token), id(token))] = got
    return got[2]


_NAME = operator.attrgetter("name")


def by_name(ssn: Any, key: Any, objects: list[Any]) -> dict[str, Any]:
    """``{o.name: o for o in objects}`` (the last of a name wins), kept from session to session
    (`incremental`): after a small change it costs the replaced and added objects, where building it
    touches every object (~10 ms over 20,000 lent nodes, the memory more than the bytecode).  Shared:
    callers must not change it, and the next session's update changes it in place (the session it was
    given to has closed)."""
    def full(objs: list[Any]) -> dict[str, Any]:
        return dict(zip(map(_NAME, objs), objs))  # (in C)

    def update(last: dict[str, Any], pairs: Pairs) -> dict[str, Any] | None:
        for _, old, new in pairs:  # a name that moved or went: start over (a dict keeps its first place)
            if old is None and new.name in last or old is not None and old.name != new.name:
                return None
        for _, _, new in pairs:
            last[new.name] = new
        return last

    return incremental(ssn, key, objects, full, update)


def names_of(ssn: Any, key: Any, by_names: dict[str, Any]) -> frozenset[str]:
    """``frozenset(by_names)`` for a map `by_name` gave, kept while it is the same map with as many
    names (its update only replaces objects under their names or adds names; otherwise it is a new
    map).  Built anew it is a megabyte at 20,000 nodes each session, and the session's garbage
    holding it waits for the collector (busched.scheduler.memory)."""
    state = ssn.others.get("plugin_state")
    if state is None:
        return frozenset(by_names)
    slot = ("names", key)
    kept = state.get(slot)
    if kept is None or kept[0] is not by_names or kept[1] != len(by_names):
        kept = state[slot] = (by_names, len(by_names), frozenset(by_names))
    names: frozenset[str] = kept[2]
    return names


def split(ssn: Any, key: Any, objects: list[Any], test: Callable[[Any], bool]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The objects that pass ``test`` and the others, each by uid, kept from session to session
    (`incremental`): only the replaced and added ones are tested again (so after an update the maps'
    order is no longer the objects': read them as sets). ``test`` must answer the same for an object
    lent unchanged."""
    def full(objs: list[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        yes: dict[str, Any] = {}
        no: dict[str, Any] = {}
        for o in objs:
            (yes if test(o) else no)[o.uid] = o
        return yes, no

    def update(last: tuple[dict[str, Any], dict[str, Any]], pairs: Pairs) -> tuple[dict[str, Any], dict[str, Any]]:
        yes, no = last  # changed in place: the session they were given to has closed (no copy of 50,000)
        # every replaced object out first, then every new one in: a job deleted shifts the ones after it
        # down a place, so an object may be the new one of a pair and the old one of the next ([B, C] ->
        # [C, D]); taken out pair by pair, C would be put in and then taken out again
        for _, old, _new in pairs:
            if old is not None:
                yes.pop(old.uid, None)
                no.pop(old.uid, None)
        for _, _, o in pairs:
            (yes if test(o) else no)[o.uid] = o
        return yes, no

    return incremental(ssn, key, objects, full, update)
