"""Where an e2e run's time goes (`busched bench e2e --stages`): the scheduler's stages and each process's CPU.

The scheduler runs in the bench's process, so its stages are timed by wrapping the methods that do
them on that one instance (nothing changes for any other scheduler): each cycle that ran, its sync of
the changes into the cache (those of 5 ms or more), its snapshot and session parts (`run_actions`,
`finish_cycle`, in the worker thread), the write-ahead binding records (each chunk
from its first publish to its last acknowledgement), the decisions, and the state stream's batches
as they are ingested (the agents' results among them).  Every time is wall-clock seconds from the
publisher's first publish (the bench's clock), or seconds spent.  CPU is read from
``/proc/<pid>/stat`` (user + system) at that first publish and at the end, for the scheduler's
process, nats-server and each agent; the publisher reports its own.  The event loop's own thread: its CPU,
and how long it was kept from running while it was due (`busched.bench.e2e_loop`).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any

from busched.bench.e2e_loop import LoopStalls

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14 and 15 of stat(5))


class Stages:
    """Stage timings of one scheduler ``sched`` and the CPU of the processes ``pids`` (name -> pid)."""

    def __init__(self, sched: Any, pids: dict[str, int]) -> None:
        self.pids = pids
        self.t0 = 0.0
        self.cpu0: dict[str, float | None] = {}
        self.session: list[tuple[str, float, float]] = []  # (part, start, end)
        self.session_cpu: list[tuple[str, float, float]] = []  # (part, end, CPU seconds of the thread that ran it)
        self.records: list[tuple[float, float, int]] = []  # (start, end, binds) per write-ahead chunk
        self.decisions: list[tuple[float, float, int]] = []
        self.ingest_s = 0.0  # seconds in the state feed's batch handler
        self.ingest_msgs = 0
        self.ingest_batches = 0
        self.running: list[float] = []  # when each Running result was applied
        self.cycles: list[tuple[float, float, int]] = []  # (start, end, binds) of each cycle that ran
        self.syncs: list[tuple[float, float, int]] = []  # the changes gathered since the last cycle, into the cache
        self.podgroups: list[tuple[float, float, int]] = []  # the background writes of podgroup statuses
        self.events: list[tuple[float, float, int]] = []  # and of scheduling events
        self._stats = getattr(getattr(sched.bus, "nc", None), "stats", None)  # the connection's message counts
        self.msgs0: tuple[int, int] = (0, 0)
        self.msgs1: tuple[int, int] | None = None
        self.loop = LoopStalls(asyncio.get_running_loop())  # (built in the scheduler's event loop)
        self._wrap(sched)

    def _wrap(self, sched: Any) -> None:
        table, feed = sched.table, sched.feed
        in_cycle = sched._in_cycle

        async def timed_cycle(fn: Any, *args: Any, **kw: Any) -> Any:
            t = time.time()
            name = getattr(fn, "__name__", "?")

            def counted(*a: Any, **k: Any) -> Any:  # in the session's thread: its own CPU, not the loop's
                c = time.thread_time()
                try:
                    return fn(*a, **k)
                finally:
                    self.session_cpu.append((name, time.time(), time.thread_time() - c))

            try:
                return await in_cycle(counted, *args, **kw)
            finally:
                self.session.append((name, t, time.time()))

        sched._in_cycle = timed_cycle
        run_once, sync, snapshot = sched.run_once, sched.effective.sync_cache_yielding, sched.snapshot

        async def timed_run_once(**kw: Any) -> Any:
            t = time.time()
            report = await run_once(**kw)
            if not report.skipped:
                self.cycles.append((t, time.time(), len(report.binds)))
            return report

        async def timed_sync() -> Any:
            t = time.time()
            try:
                return await sync()
            finally:
                self.syncs.append((t, time.time(), 1))

        def timed_snapshot(*args: Any, **kw: Any) -> Any:
            t = time.time()
            try:
                return snapshot(*args, **kw)
            finally:
                self.session.append(("snapshot", t, time.time()))

        sched.run_once = timed_run_once
        sched.effective.sync_cache_yielding = timed_sync
        sched.snapshot = timed_snapshot
        table.record_binds = self._timed(table.record_binds, self.records)
        table.send_decisions = self._timed(table.send_decisions, self.decisions)
        handle = feed.handle_state_batch
        apply_result = table.apply_result

        def timed_batch(items: list[Any]) -> None:
            t = time.perf_counter()
            try:
                handle(items)
            finally:
                self.ingest_s += time.perf_counter() - t
                self.ingest_msgs += len(items)
                self.ingest_batches += 1

        def counted_result(key: str, msg: Any, seq: int = 0) -> str:
            out = apply_result(key, msg, seq)
            if out == "applied" and getattr(msg, "phase", "") == "Running":
                self.running.append(time.time())
            return out

        feed.handle_state_batch = timed_batch
        table.apply_result = counted_result
        for writer, into in ((sched.statuses, self.podgroups), (sched.sched_events, self.events)):
            writer.publish_all = self._timed(writer.publish_all, into, listed=True)

    @staticmethod
    def _timed(fn: Callable[..., Any], into: list[tuple[float, float, int]],
               listed: bool = False) -> Callable[..., Any]:
        async def timed(items: Any, *args: Any, **kw: Any) -> Any:
            if listed:
                items = list(items)
            t = time.time()
            try:
                return await fn(items, *args, **kw)
            finally:
                into.append((t, time.time(), len(items)))
        return timed

    def _msgs(self) -> tuple[int, int]:
        st = self._stats
        return (int(st["in_msgs"]), int(st["out_msgs"])) if st is not None else (0, 0)

    def start(self, t0: float) -> None:
        """The clock starts (the publisher's first publish)."""
        self.t0 = t0
        self.cpu0 = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        self.msgs0 = self._msgs()
        self.loop.start()

    def stop(self) -> None:
        """The clock stops (every task heard Running): the message counts are read here."""
        self.msgs1 = self._msgs()
        self.loop.stop()

    def report(self, publisher_cpu: float | None, publisher_cpu_at_start: float | None = None) -> dict[str, Any]:
        t0 = self.t0

        def rel(t: float) -> float:
            return round(t - t0, 3)

        cpu: dict[str, float | None] = {}
        for name, pid in self.pids.items():
            a, b = self.cpu0.get(name), cpu_seconds(pid)
            cpu[name] = round(b - a, 3) if a is not None and b is not None else None
        cpu["publisher"] = round(publisher_cpu, 3) if publisher_cpu is not None else None  # its whole process
        # and from its first publish to its last acknowledgement (the part that competes with the others)
        cpu["publisher_window"] = (round(publisher_cpu - publisher_cpu_at_start, 3)
                                   if publisher_cpu is not None and publisher_cpu_at_start is not None else None)
        def parts(name: str) -> list[tuple[float, float]]:
            return [(rel(s), rel(e)) for part, s, e in self.session if part == name and e >= t0]

        def span(rows: list[tuple[float, float, int]]) -> dict[str, Any]:
            rows = [r for r in rows if r[2] and r[1] >= t0]
            if not rows:
                return {"n": 0}
            return {"n": sum(r[2] for r in rows), "calls": len(rows), "first_start": rel(rows[0][0]),
                    "last_end": rel(rows[-1][1]), "busy_s": round(sum(e - s for s, e, _ in rows), 3)}

        running = sorted(self.running)
        msgs = self.msgs1 or self._msgs()
        return {
            "cpu_s": cpu,
            # (start, end[, binds]) of each cycle that ran in the measured window, and of its parts
            "cycles": [(rel(s), rel(e), n) for s, e, n in self.cycles if e >= t0],
            "sync": [(rel(s), rel(e)) for s, e, _ in self.syncs if e >= t0 and e - s >= 0.005],
            "snapshot": parts("snapshot"),
            "actions": parts("run_actions"),
            "close": parts("finish_cycle"),
            # CPU seconds of the session's thread in `run_actions` (the actions' wall time above also holds the
            # waits for the GIL while the event loop runs)
            "actions_cpu_s": round(sum(c for part, e, c in self.session_cpu if part == "run_actions" and e >= t0), 3),
            "records": span(self.records),
            "decisions": span(self.decisions),
            "ingest": {"s": round(self.ingest_s, 3), "messages": self.ingest_msgs, "batches": self.ingest_batches},
            "running": {"n": len(running), "first": rel(running[0]) if running else None,
                        "median": rel(running[len(running) // 2]) if running else None,
                        "last": rel(running[-1]) if running else None},
            "podgroups": span(self.podgroups),
            "events": span(self.events),
            # the messages the scheduler's connection received and sent while the clock ran
            "scheduler_msgs": {"in": msgs[0] - self.msgs0[0], "out": msgs[1] - self.msgs0[1]},
            # the event loop's thread: its CPU, and how long it was kept from running (busched.bench.e2e_loop)
            "loop": self.loop.report(t0, [(s, e) for part, s, e in self.session if part == "run_actions"]),
        }
