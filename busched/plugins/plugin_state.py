"""State a plugin keeps from one session to the next (Volcano keeps it in package variables).

tdm remembers when it last evicted and rescheduling when it last ran.  The
scheduler may hand every session the same dict as ``ssn.others["plugin_state"]``
(one per scheduler, so runs and tests stay apart); without one, the state lives
in this module, process-wide, as Volcano's does.
"""

from __future__ import annotations

from typing import Any

from busched.framework.session import Session

__all__ = ["STATE_KEY", "state_of"]

STATE_KEY = "plugin_state"
_PROCESS_STATE: dict[str, Any] = {}


def state_of(ssn: Session, plugin: str) -> dict[str, Any]:
    """``plugin``'s own dict of cross-session state."""
    store = ssn.others.get(STATE_KEY)
    if not isinstance(store, dict):
        store = _PROCESS_STATE
    return store.setdefault(plugin, {})
