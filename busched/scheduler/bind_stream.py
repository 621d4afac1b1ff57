"""A cycle's binds written while its session still places them (issue 17: binds before the actions end).

The session runs its actions in a worker thread (`Cycles._in_cycle`) over a snapshot; every bind it
decides is appended to ``ssn.decisions`` and is final from then on (Volcano binds as allocate commits).
Before this, the event loop waited for the whole session and only then wrote the write-ahead binding
records and sent the decisions, so on a big burst the records, the decisions and the agents' answers
all came after the last task was placed, and the loop mostly waited on the server meanwhile.  A
`BindStream` reads the session's decisions as they grow and writes the binds already decided, chunk by
chunk, through the same path as after the session (`BindingTable.take_binds`, `write_ahead`): each
record a conditional write, each decision sent only after its own record is stored.  What the loop does
meanwhile is what it did after the session, only sooner; the session itself reads its snapshot only,
never the table or the cache, so its decisions are the same.

Only binds are streamed: evictions (and the binds the stream had not taken yet) go out after the
actions, as before, binds first.  The loop looks at the session's list every ``POLL`` seconds rather
than being woken per decision, so the session's thread pays nothing per bind for it.  A session that
fails writes every bind it had appended, those the stream had not looked at too, as Volcano's binds of
a failed cycle stay bound: each was a complete decision once appended.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from busched.scheduler.records import CycleReport

if TYPE_CHECKING:
    from busched.scheduler.bindings import BindingTable

__all__ = ["BindStream"]

log = logging.getLogger("busched.scheduler")

POLL = 0.02  # seconds between two looks at the session's decisions while it places
MIN_CHUNK = 200  # decisions gathered before a chunk goes out while the session adds more (fewer once it pauses)


class BindStream:
    """The binds of one session, written while it runs (see the module's docstring)."""

    def __init__(self, table: BindingTable, report: CycleReport) -> None:
        self.table = table
        self.report = report
        self.ssn: Any = None  # set from the worker thread once the session is open (`opened`)
        self.seen = 0  # the session's decisions looked at so far
        self.sending: list[asyncio.Task[None]] = []
        self._done = asyncio.Event()  # set when the actions end (`finish`, `cancel`)
        self._last_n = 0  # the session's decisions at the last look
        self._task: asyncio.Task[None] | None = None

    def opened(self, ssn: Any) -> None:
        """Called in the session's thread as it opens (`run_actions`' ``opened``): one assignment."""
        self.ssn = ssn

    def start(self) -> None:
        self._task = asyncio.create_task(self._follow())

    async def _follow(self) -> None:
        while not self._done.is_set():
            if not await self._take(MIN_CHUNK):
                try:  # (woken at once when the actions end: a cycle never waits out a look's pause)
                    await asyncio.wait_for(self._done.wait(), POLL)
                except asyncio.TimeoutError:
                    pass

    async def _take(self, least: int) -> bool:
        """Write the binds decided since the last look, when there are at least ``least`` new decisions or the
        session added none since the previous look (it is busy elsewhere: what it decided goes now)."""
        ssn = self.ssn
        if ssn is None:
            return False
        decisions = ssn.decisions
        n = len(decisions)
        grew, self._last_n = n != self._last_n, n
        if n == self.seen or (n - self.seen < least and grew):
            return False  # nothing new, or a few while the session still adds more: wait for a chunk
        new, self.seen = decisions[self.seen:n], n
        binds = [d for d in new if d.kind == "bind"]
        if binds:
            await self.table.write_ahead(self.table.take_binds(binds), self.report, self.sending)
        return True

    def cancel(self) -> None:
        """The cycle was cancelled (the scheduler stops): stop following at once.  Decisions already being sent
        finish by themselves; what they raise is logged, not left unretrieved."""
        self._done.set()
        if self._task is not None:
            self._task.cancel()
        for t in self.sending:
            t.add_done_callback(_log_failure)

    async def finish(self, ssn: Any) -> None:
        """The actions are done: stop following, write the binds not taken yet and wait for every decision
        sent.  ``ssn`` None: the session failed; the binds it had appended are written all the same (each was
        final once appended, as Volcano's binds of a failed cycle stay bound), so a job is never half out
        because of when the last look happened.  A failure of the following task is logged here and the
        binds it left go out now; a failure of this last write is the caller's, as after the session."""
        self._done.set()
        try:
            if self._task is not None:
                try:
                    await self._task
                except Exception:  # noqa: BLE001 - logged; what it had not written goes below
                    log.exception("writing a cycle's binds while its session placed them failed")
            if ssn is not None:
                self.ssn = ssn
            if self.ssn is not None:
                await self._take(0)
        finally:
            if self.sending:
                await asyncio.gather(*self.sending)


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("sending a cancelled cycle's decisions failed: %s", task.exception())
