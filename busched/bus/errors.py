"""The error every part of the bus client raises.

Its own module so that the parts of the client (`busched.bus.feeds`, `busched.bus.reads`,
`busched.bus.streams`, `busched.bus.client`) can raise it without importing each other.
"""

from __future__ import annotations

__all__ = ["BusError"]


class BusError(RuntimeError):
    """A bus operation that cannot be done (no connection, no answer, a stream that cannot be made)."""
