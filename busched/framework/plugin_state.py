"""State a plugin keeps from one session to the next (Volcano keeps it in package variables).

tdm remembers when it last evicted and rescheduling when it last ran.  That
state belongs to whoever runs the sessions, not to the process: the scheduler's
cache hands every session the same dict as ``ssn.others["plugin_state"]`` (one
per scheduler, so two schedulers, runs and tests stay apart).  A session that
was handed none gets a fresh dict of its own, so nothing leaks from one caller
to another through module globals.
"""

from __future__ import annotations

from typing import Any
from weakref import WeakKeyDictionary

from busched.framework.session import Session

__all__ = ["STATE_KEY", "state_of"]

STATE_KEY = "plugin_state"

# per-session stores for sessions handed no state; dropped with the session
_FRESH: WeakKeyDictionary[Session, dict[str, Any]] = WeakKeyDictionary()


def state_of(ssn: Session, plugin: str) -> dict[str, Any]:
    """``plugin``'s own dict of cross-session state (fresh for a session handed no state)."""
    store = ssn.others.get(STATE_KEY)
    if not isinstance(store, dict):
        store = _FRESH.get(ssn)
        if store is None:
            store = _FRESH[ssn] = {}
    mine: dict[str, Any] = store.setdefault(plugin, {})
    return mine
