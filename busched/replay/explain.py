"""`busched explain NS/NAME --cycle N`: why a task or a job was (not) placed, on a record (issue 11, item 8).

The state before the recorded cycle N is rebuilt as ``busched replay --cycle N --export`` rebuilds it
(`busched.replay.export`): every earlier record's cycle is replayed (the podgroup statuses they changed
count), then `Replayer.advance` brings the cache where cycle N's snapshot stood, with the record's
inputs beyond the stream (unready nodes, exclusions after a refusal, backoff).  On that state the live
analysis runs unchanged (`busched.scheduler.explain.gather_at`, then `explain`), with the record's
``now``, seed and configuration.  The exclusions and the backoff a record carries say which tasks and
nodes, not for how long: their time left is unknown (``math.inf``).

The answer has the live keys (``reason``, ``message``, ``nodes``, ``scores``, ``task``/``job``/``node``)
plus ``cycle`` (its number) and ``boot`` (the scheduler boot that ran it).
"""

from __future__ import annotations

import math
from typing import Any

from busched.bus import messages as m

__all__ = ["explain_cycle"]


async def explain_cycle(state: list[tuple[str, int, bytes]], records: list[m.CycleRecord], name: str,
                        cycle: str) -> dict[str, Any]:
    """Explain ``name`` (a task, else a job: "ns/name") on the state before the recorded cycle ``cycle`` (``N`` or
    ``BOOT:N``).  Raises `busched.replay.export.ExportError` for a cycle that cannot be rebuilt and KeyError for a
    name that is neither a task nor a job at that moment."""
    from busched.replay import Replayer
    from busched.replay.export import ExportError, pick_record
    from busched.scheduler import explain as X

    idx = pick_record(records, cycle)
    rp = Replayer(state, records)
    for r in records[:idx]:  # as the export: every earlier cycle, for the podgroup statuses they changed
        await rp.run(r, *rp.advance(r))
    rec = records[idx]
    rp.advance(rec)
    config = rp.configs.get(rec.cfg)
    if config is None:
        raise ExportError(f"cycle {cycle}: its configuration ({rec.cfg}) is not in the records "
                          "(it rides on its boot's first record)")
    sched = rp.sched
    if name not in sched.specs["task"] and name not in sched.specs["job"]:
        raise KeyError(f"no task or job {name!r} before cycle {rec.boot}:{rec.n}")
    inp = X.gather_at(sched, name, now=rec.now, seed=rec.seed, config=config,
                      excluded={t: dict.fromkeys(nodes, math.inf) for t, nodes in rec.excl.items()},
                      backoff=dict.fromkeys(rec.backoff, math.inf))
    out = X.explain(inp, name)
    out["cycle"], out["boot"] = rec.n, rec.boot
    return out
