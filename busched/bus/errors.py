"""The error every part of the bus client raises, and the one way its parts let a subscription go.

Its own module so that the parts of the client (`busched.bus.feeds`, `busched.bus.reads`,
`busched.bus.streams`, `busched.bus.publish`, `busched.bus.client`) can share them without
importing each other.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BusError", "unsubscribe_quietly"]


async def unsubscribe_quietly(sub: Any) -> None:
    """Drop a subscription whose end nothing waits on (a closing or lost connection may refuse)."""
    try:
        await sub.unsubscribe()
    except Exception:  # noqa: BLE001 - it goes anyway: a lost connection took it with it
        pass


class BusError(RuntimeError):
    """A bus operation that cannot be done (no connection, no answer, a stream that cannot be made)."""
