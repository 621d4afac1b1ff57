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

**Hand-offs** (issue 17, eighth stop).  The loop and the session's thread share one GIL, and the loop
cannot look while the session holds it.  With the default 5 ms switch interval it was kept out for the
whole of a 5,000-bind session all the same (a 20 ms wait for I/O returned after 0.26-0.28 s, the thread
asleep on the GIL, not waiting for a CPU; `busched bench e2e --stages`' ``loop``), so on a quiet machine
no record went out before the actions ended.  So the session can hand the GIL over itself (off by
default, `HANDOFF` 0: on a 2-core machine the overlap also puts nats-server and the agents beside the
session on the cores, and this pass could not tell on its loaded machine which way it goes): every `HANDOFF`
decisions it appends (`_Watched`, the session's list as `opened` sees it) it wakes the loop and waits
`PAUSE` seconds of the loop's time, at most `HANDOFF_WAIT` (the loop may be busy), for the loop to
take what was decided and write it (a look then takes every new decision: the session is paused).  The
session's decisions are the same: it only waits; what the loop does meanwhile is what it does after
the session, sooner.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING, Any

from busched.scheduler.records import CycleReport

if TYPE_CHECKING:
    from busched.scheduler.bindings import BindingTable

__all__ = ["BindStream"]

log = logging.getLogger("busched.scheduler")

POLL = 0.02  # seconds between two looks at the session's decisions while it places
MIN_CHUNK = 200  # decisions gathered before a chunk goes out while the session adds more (fewer once it pauses)
# decisions the session appends between two hand-offs of the GIL to the loop; 0: none.  Off until measured on a
# quiet machine: on this pass's loaded one the hand-offs were inside the noise (docs/benchmarks.md, eighth stop);
# 500 is what was measured
HANDOFF = 0
PAUSE = 0.002  # seconds the session waits at a hand-off once the loop runs (it takes and writes meanwhile)
HANDOFF_WAIT = 0.1  # at most this long in all: a loop busy elsewhere does not hold the session up


class _Watched(list):  # type: ignore[type-arg]
    """The session's decisions, handing the GIL to the loop every `HANDOFF` appended (see the module's
    docstring).  The session appends (``append``, ``extend``: what it uses) in its thread; the loop reads."""

    __slots__ = ("_stream", "_next")
    _stream: BindStream | None  # None once the actions ended (`BindStream._detach`: no cycle left to the collector)
    _next: int

    def append(self, d: Any) -> None:
        list.append(self, d)
        if len(self) >= self._next:
            self._handoff()

    def extend(self, ds: Any) -> None:
        list.extend(self, ds)
        if len(self) >= self._next:
            self._handoff()

    def _handoff(self) -> None:
        self._next = len(self) + HANDOFF
        if self._stream is not None:
            self._stream.handoff()


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
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()  # a hand-off came, or the actions ended: look now
        self._handed = False  # a hand-off came since the last look: the session is paused, take everything

    def opened(self, ssn: Any) -> None:
        """Called in the session's thread as it opens (`run_actions`' ``opened``): its list of decisions,
        empty yet, becomes one that hands off (`_Watched`, when `HANDOFF` is set), and the session is followed."""
        if HANDOFF > 0:
            watched = _Watched(ssn.decisions)
            watched._stream, watched._next = self, HANDOFF
            ssn.decisions = watched
        self.ssn = ssn

    def handoff(self) -> None:
        """In the session's thread: wake the loop and wait for it (`PAUSE` of its time, `HANDOFF_WAIT` at most)."""
        loop = self._loop
        if loop is None or self._done.is_set():
            return
        resume = threading.Event()
        try:
            loop.call_soon_threadsafe(self._handed_over, resume)
        except RuntimeError:  # the loop is closed: nothing to hand over to
            return
        resume.wait(HANDOFF_WAIT)

    def _handed_over(self, resume: threading.Event) -> None:
        """In the loop, at a hand-off: look at once, and let the session go on `PAUSE` seconds from now."""
        self._handed = True
        self._wake.set()
        assert self._loop is not None
        self._loop.call_later(PAUSE, resume.set)

    def _detach(self) -> None:
        """The actions ended: the session's list lets go of the stream (the session and its list would
        otherwise hold each other, through the stream, until the collector came)."""
        decisions = getattr(self.ssn, "decisions", None)
        if isinstance(decisions, _Watched):
            decisions._stream = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._follow())

    async def _follow(self) -> None:
        while not self._done.is_set():
            handed, self._handed = self._handed, False
            if await self._take(0 if handed else MIN_CHUNK) or self._handed or self._done.is_set():
                continue  # (a hand-off or the actions' end came while it wrote: look again at once)
            self._wake.clear()
            try:  # (woken at once at a hand-off, and when the actions end: a cycle never waits out a pause)
                await asyncio.wait_for(self._wake.wait(), POLL)
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
        self._wake.set()
        self._detach()
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
        self._wake.set()
        self._detach()
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
