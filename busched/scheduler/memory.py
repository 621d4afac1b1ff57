"""When the scheduler's process collects garbage: between cycles, not in the middle of the traffic.

Left to itself, CPython's collector runs whenever enough container objects were allocated, and
a full collection (every object alive) whenever the long-lived ones grew by a quarter.  A
scheduler's process grows in bursts (a catch-up, thousands of jobs applied at once) and each cycle
leaves a session's worth of garbage in reference cycles, so full collections of the whole cluster
(hundreds of milliseconds at 10,000 tasks) came several times a run, at whatever moment the
allocation counter tipped: in the middle of applying agents' results, or of publishing binds.
(The loop now releases each session once read, `Session.release`: a finished session and its big
structures are freed by reference counting, so what is left for the collector is small.  The
young-object count below does not see a session's size, a 50,000-entry map being one object: a
session left in cycles could pile up for many cycles before a collection came.)

`CollectorPolicy`, while `Scheduler.run_forever` runs, turns automatic collection off and instead:

* after each cycle collects the young objects, which frees the cycle's garbage, and moves what
  survived into the permanent generation (`gc.freeze`): the cluster's specs and cache are not
  traversed again by every later collection.  After a cycle that bound tasks the collection waits
  for the end of the next cycle (at most), so the agents' answers to those binds, arriving right
  then, are not kept waiting behind it;
* when the permanent generation has doubled since the last full collection, unfreezes it and
  collects everything once, so garbage that became unreachable after it was frozen (a deleted
  task's cached objects, say) is freed after a bounded delay: at most as much as was alive then.

The collector's state is restored when `run_forever` returns.  `busched.framework.cycle.paused_gc`
(a pause around a cycle's build) finds the collector already off and leaves it so.
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger("busched.scheduler")

YOUNG_MIN = 10_000  # fewer new container objects than this since the last collection: not worth one


class CollectorPolicy:
    def __init__(self) -> None:
        self.active = False
        self._full_at = 0  # the size of the permanent generation after the last full collection
        self._deferred = False  # the last cycle's collection was put off
        self.young = 0  # collections made, for tests and logs
        self.full = 0
        self.seconds = 0.0

    # the collector is the process's: with several schedulers in one process (tests), the first to enter
    # saves its state and the last to leave restores it
    _holders = 0
    _was_enabled = False

    def enter(self) -> None:
        """Take over from the automatic collector."""
        if self.active:
            return
        self.active = True
        if CollectorPolicy._holders == 0:
            CollectorPolicy._was_enabled = gc.isenabled()
        CollectorPolicy._holders += 1
        gc.disable()
        gc.freeze()  # what start() built (a catch-up, maybe large) is long-lived: no collection now
        self._full_at = gc.get_freeze_count()

    def exit(self) -> None:
        """Give collection back to the automatic collector (and everything frozen back to it)."""
        if not self.active:
            return
        self.active = False
        CollectorPolicy._holders -= 1
        if CollectorPolicy._holders == 0:
            gc.unfreeze()
            if CollectorPolicy._was_enabled:
                gc.enable()

    def after_cycle(self, *, defer: bool = False) -> None:
        """Collect the young objects (and, when due, everything); a no-op unless active.  ``defer``: not now
        (a cycle's binds are out and their answers about to arrive), unless the last one was deferred too."""
        if not self.active or gc.get_count()[0] < YOUNG_MIN:
            return
        if defer and not self._deferred:
            self._deferred = True
            return
        self._deferred = False
        t = time.perf_counter()
        full = gc.get_freeze_count() >= 2 * max(self._full_at, YOUNG_MIN)
        if full:
            self._collect_full()
        else:
            gc.collect(1)
            gc.freeze()
            self.young += 1
        took = time.perf_counter() - t
        self.seconds += took
        log.debug("%s collection in %.3fs; %d objects frozen", "full" if full else "young", took,
                  gc.get_freeze_count())

    def _collect_full(self) -> None:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self._full_at = gc.get_freeze_count()
        self.full += 1
