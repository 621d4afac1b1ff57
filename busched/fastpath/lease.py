"""What one snapshot lent (`Lease`): the token a session, the snapshot and the verification pass.

The shared snapshot (busched.fastpath.lending) hands a lease with every lending; a session marks it
opened, in session and closed (busched.framework.session), a snapshot no session opened is marked
superseded when the objects are lent again, and verification (busched.fastpath.verify) checks the
fingerprints it carries.  Those readers need the lease, not the memo that lends: it lives apart.
"""

from __future__ import annotations

from typing import Any

from busched.api.job import JobInfo

__all__ = ["Lease"]


class Lease:
    """What one snapshot lent: ``opened`` once a session opened over it, ``in_session`` while that
    session runs, ``closed`` once it closed; ``superseded`` when a later snapshot took the objects
    of one no session had opened (it may not be opened any more)."""

    __slots__ = ("closed", "in_session", "opened", "superseded", "prints", "log")

    def __init__(self, log: list[JobInfo] | None = None) -> None:
        # the lent jobs' log (busched.api.outputs): those written or whose outputs changed in the
        # session, in order (None: the session looks at every job, the reference)
        self.log = log
        self.closed = False
        self.in_session = False
        self.opened = False
        self.superseded = False
        self.prints: list[tuple[str, Any, dict[str, Any]]] | None = None
