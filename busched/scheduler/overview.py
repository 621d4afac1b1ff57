"""What the status page shows (`busched.web.status`), as one plain JSON-able dict: `build`.

The page is a view of parts that already exist, so the figures agree with the other ways of looking
at a scheduler: the rows of `busched get` (`Queries.view`), the per-queue deserved, allocated and
share the last cycle computed for Volcano's metrics (`volcano_metrics.last_queues`), the Unschedulable
condition the gang plugin wrote on each job that could not be placed (Volcano's reason code and its
aggregated node reasons), and a small bounded ring of the last cycles (`note`, called by
`Scheduler.run_once`).  Idle cycles that were skipped (`QuietCycles`) are folded into one row per run
of them, so a quiet hour does not push the cycles that decided something out of the ring.

The first `EXPLAIN_JOBS` pending jobs also get `busched.scheduler.explain`'s stable reason code
(``QueueOverused``, ``NodeTooSmall``...), which names the cause more precisely than Volcano's
condition does (a gang refused by proportion before any node was tried has no node reasons at all).
Explaining opens a session on a private copy of the cache, so an answer is kept until the cache
changes (its ``generation``) and only a few jobs are explained per page.

Nothing here reads the wall clock: a cycle's time is its report's ``now`` (read once at the cycle's
start), and the explanations are computed at the last cycle's ``now``.  `build` takes the cycle
lock, as ``busched explain`` does: the node rows take a snapshot of the cache, which must not happen
while a cycle's session runs in its worker thread.  Long lists are cut at `MAX_ROWS` (the page says
how many more there are; ``busched get`` lists them all).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Mapping
from typing import Any

from busched.scheduler import explain, volcano_metrics

__all__ = ["RECENT_CYCLES", "MAX_ROWS", "EXPLAIN_JOBS", "ROLE", "role", "note", "recent", "build"]

log = logging.getLogger("busched.scheduler")

RECENT_CYCLES = 20
MAX_ROWS = 200
EXPLAIN_JOBS = 5
ROLE = "leader (single scheduler, no election)"


def role(sched: Any) -> str:
    """Leader or standby, from the scheduler's election (`busched.scheduler.election`): without one
    (``--lease 0``, in-process) it is `ROLE`; otherwise the role, the shard and the epoch."""
    election = getattr(sched, "election", None)
    if election is None or not election.enabled:
        return ROLE
    where = f"shard {election.shard}, epoch {election.epoch}"
    if election.role == "standby" and getattr(sched, "ready", False):
        where += "; caught up, following the stream, not scheduling"
    return f"{election.role} ({where})"


class _Ring:
    __slots__ = ("cycles", "explained")

    def __init__(self) -> None:
        self.cycles: deque[dict[str, Any]] = deque(maxlen=RECENT_CYCLES)
        self.explained: dict[str, tuple[int, str, str]] = {}  # job -> (cache generation, code, message)


def _ring(sched: Any) -> _Ring:
    ring = sched.__dict__.get("_overview_ring")
    if ring is None:
        ring = sched._overview_ring = _Ring()
    return ring


def note(sched: Any, report: Any, ssn: Any = None) -> None:
    """Remember one cycle: its number, time (``report.now``), seconds, seconds per action (the session's
    ``timings``), binds, evicts, releases, whether it was skipped and its error.  A skipped cycle after
    a skipped cycle extends that row (``cycle`` .. ``last``) instead of adding one."""
    cycles = _ring(sched).cycles
    if report.skipped and cycles and cycles[-1]["skipped"]:
        row = cycles[-1]
        row["last"], row["time"], row["count"] = report.cycle, report.now, row["count"] + 1
        return
    timings = getattr(ssn, "timings", None) if ssn is not None else None
    actions = {name: s for name, s in timings["actions"]} if timings else {}
    cycles.append({"cycle": report.cycle, "last": report.cycle, "count": 1, "time": report.now,
                   "seconds": report.seconds, "open": timings["open"] if timings else 0.0, "actions": actions,
                   "binds": len(report.binds), "evicts": len(report.evicts), "released": len(report.released),
                   "skipped": report.skipped, "error": report.error})


def recent(sched: Any) -> list[dict[str, Any]]:
    """The last cycles' rows, newest first (copies)."""
    return [dict(row, actions=dict(row["actions"])) for row in reversed(_ring(sched).cycles)]


async def build(sched: Any, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Everything the status page shows.  ``config``: what the command knows of the configuration file
    (``file``, ``error``: why the last read was refused, "" when it was applied; `cli.reload`), or
    None for a scheduler that has no file."""
    async with sched.queries.lock:  # no cycle meanwhile: the node rows take a snapshot
        queues = sched.view("queues")
        jobs = sched.view("jobs")
        nodes = sched.view("nodes")
    pending = _pending(jobs)
    await _explain(sched, pending[:EXPLAIN_JOBS])
    return {
        "role": role(sched),
        "ready": bool(sched.ready),
        "cycle": sched.cycle,
        "config": _config(sched, config),
        "queues": _queues(sched, queues, jobs),
        **_cut("pending", pending),
        **_cut("nodes", [{"name": n["name"], "state": n["state"], "ready": n["ready"], "tasks": n["tasks"],
                          "allocatable": n["allocatable"], "used": n["used"], "refused": n["refused"]}
                         for n in sorted(nodes, key=lambda n: n["name"])]),
        "cycles": recent(sched),
    }


def _config(sched: Any, config: Mapping[str, Any] | None) -> dict[str, Any]:
    error = str(config.get("error", "")) if config else ""
    return {"file": str(config.get("file", "")) if config else "", "loaded": not error, "error": error,
            "actions": list(sched.config.actions), "warnings": list(sched.config.warnings)}


def _queues(sched: Any, queues: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    phases: dict[str, dict[str, int]] = {}
    for j in jobs:
        by_phase = phases.setdefault(j["queue"], {})
        by_phase[j["phase"]] = by_phase.get(j["phase"], 0) + 1
    figures = volcano_metrics.last_queues(sched)
    out = []
    for q in sorted(queues, key=lambda q: q["name"]):
        f = figures.get(q["name"], {})
        out.append({"name": q["name"], "state": q["state"], "weight": q["weight"],
                    "deserved": f.get("deserved"), "allocated": f.get("allocated"), "share": f.get("share"),
                    "capability": q["capability"], "jobs": phases.get(q["name"], {}), "refused": q["refused"]})
    return out


def _pending(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Jobs not (all) placed: with Pending tasks, or Pending themselves (not enqueued), and why: their
    Unschedulable condition (Volcano's reason code and aggregated reasons)."""
    out = []
    for j in jobs:
        tasks = j["tasks"]
        if not tasks.get("Pending") and j["phase"] != "Pending":  # (an Inqueue job may be all placed)
            continue
        cond = next((c for c in j["conditions"]
                     if c.get("type") == "Unschedulable" and c.get("status", "True") == "True"), None)
        reason, message = (cond.get("reason", ""), cond.get("message", "")) if cond else ("", "")
        if not reason and j["refused"]:  # its last change was refused at the edge: the scheduler has the old one
            reason, message = "Refused", j["refused"]
        out.append({"namespace": j["namespace"], "name": j["name"], "queue": j["queue"], "phase": j["phase"],
                    "minMember": j["minMember"], "pending": tasks.get("Pending", 0), "tasks": sum(tasks.values()),
                    "code": "", "explanation": "", "reason": reason, "message": message})
    return sorted(out, key=lambda j: (j["namespace"], j["name"]))


async def _explain(sched: Any, rows: list[dict[str, Any]]) -> None:
    """Fill ``code`` and ``explanation`` of ``rows`` (`busched.scheduler.explain`), from the answers kept
    while the cache has not changed; the others are computed as ``busched explain`` does, at the last
    cycle's time."""
    ring = _ring(sched)
    kept, ring.explained = ring.explained, {}
    last = ring.cycles[-1]["time"] if ring.cycles else 0.0
    for row in rows:
        key = f"{row['namespace']}/{row['name']}"
        generation = sched.cache.generation
        hit = kept.get(key)
        if hit is None or hit[0] != generation:
            try:
                async with sched.queries.lock:
                    inp = explain.gather(sched, key, now=last)
                    generation = sched.cache.generation  # (gathering brings the cache up to date)
                answer = (await asyncio.to_thread(explain.explain, inp, key) if sched.settings.cycle_in_thread
                          else explain.explain(inp, key))
            except Exception:  # noqa: BLE001 - the page shows the rest; `busched explain` gives the error
                log.exception("status page: cannot explain %s", key)
                continue
            hit = (generation, answer["reason"], answer["message"])
        ring.explained[key] = hit
        row["code"], row["explanation"] = hit[1], hit[2]


def _cut(key: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {key: rows[:MAX_ROWS], f"{key}_more": max(0, len(rows) - MAX_ROWS)}
