"""Work a session does over every job or node, done again only for what changed.

Lent objects (busched.cache.shared) keep their identity from session to session
for as long as they do not change, so identity is a version, as it is for the
cache's specs:

* `job_value` / `node_value` keep a value derived from one job (its spec and
  task index) or one node (its spec and tasks) on the object itself, in its
  ``derived`` map, which the object empties whenever its task index changes.
  Such a value may depend on nothing else but what ``key`` names.
* `over_jobs` / `over_nodes` keep, from one session to the next, a result
  computed over all of the session's jobs (nodes), with the list of objects it
  was computed from; the next session whose objects are the very same, in the
  same order, gets it again (comparing identities costs a pass in C).  They are
  kept with the cache's other cross-cycle state (``plugin_state``); where there
  is none (a snapshot built by hand) nothing is kept.

Values handed out are shared between sessions: callers must not change them
(copy first, as drf does with a job's share before an allocation moves it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["job_value", "node_value", "over", "over_jobs", "over_nodes"]

_MISSING = object()


def job_value(job: Any, key: Any, fn: Callable[[Any], Any]) -> Any:
    """``fn(job)``, computed once while the job's tasks and spec do not change."""
    d = job.derived
    v = d.get(key, _MISSING)
    if v is _MISSING:
        v = d[key] = fn(job)
    return v


node_value = job_value  # the same contract: a node's ``derived`` map is emptied when its tasks change


def over(ssn: Any, key: Any, objects: list[Any], fn: Callable[[list[Any]], Any]) -> Any:
    """``fn(objects)``, reused while a later session passes the very same objects, in order."""
    state = ssn.others.get("plugin_state")
    if state is None:
        return fn(objects)
    slot = ("reuse", key)
    m = state.get(slot)
    if m is not None and m[0] == objects:  # identity, element by element (the objects define no __eq__)
        return m[1]
    v = fn(objects)
    state[slot] = (objects, v)
    return v


def over_jobs(ssn: Any, key: Any, fn: Callable[[list[Any]], Any]) -> Any:
    """``fn(jobs)`` over the session's jobs in order, reused while they are the same objects."""
    return over(ssn, ("jobs", key), list(ssn.jobs.values()), fn)


def over_nodes(ssn: Any, key: Any, fn: Callable[[list[Any]], Any]) -> Any:
    """``fn(nodes)`` over the session's node list, reused while it holds the same objects."""
    return over(ssn, ("nodes", key), list(ssn.node_list), fn)
