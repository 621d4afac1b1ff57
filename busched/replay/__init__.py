"""Replay: the live scheduler as a function of its stream (issue 11, items 5 and 6; docs/bus.md, "History").

`replay` takes the state stream's messages (every message, in sequence order, not the last per
subject) and the cycle records (`busched.bus.messages.CycleRecord`), and rebuilds the scheduler's
cache message by message with the scheduler's own code: a `Scheduler` on a bus that sends nothing,
fed through `Scheduler.handle_state_batch`.  At each recorded cycle it first brings the cache where
the live cycle's snapshot stood:

1. every message up to the record's ``seq`` (the last one the live cycle had applied);
2. the scheduler's own binding records up to ``own`` (live, a record counts when written, before
   the stream hands it back): binding-subject messages in ``(seq, own]`` written by the record's boot;
3. what is not on the stream, as recorded: the nodes whose agent was not alive, the exclusions of
   refused nodes (the ``busched-agent-feedback`` plugin), the tasks under the backoff gate.

It then runs the cycle (`run_actions`) with the recorded ``now``, seed and configuration (or
``config``, a what-if) and compares its decisions (binds, evicts, pipelined, podgroup phases that
changed) with the recorded ones.  Podgroup statuses are the replayer's own, as they are the live
scheduler's: once a boot has run a cycle, its podgroup records on the stream are echoes and are not
read back (a new boot reads them, as its catch-up does).

Limits of exactness (see docs/bus.md): the stream must still hold every message below the last
replayed cycle (the state stream keeps ``state_history`` messages per subject and purges deleted
objects; a cycle with missing sequences below it is counted ``incomplete``); cycles that decided
nothing are not recorded, so anything a plugin carries from one session to the next is not
replayed; another scheduler's binding records between ``seq`` and ``own`` are read at their place.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from busched.bus import messages as m
from busched.bus import subjects as S

__all__ = ["replay", "Replayer", "ReplayResult", "decode_records"]

INF = float("inf")
_BINDING = f"{S.STATE_PREFIX}.binding."
_PODGROUP = f"{S.STATE_PREFIX}.podgroup."


class _Silent:
    """A bus that is never reached: the replayer writes nothing (its outbox is never flushed)."""

    connection_listeners: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        async def nothing(*a: Any, **kw: Any) -> Any:
            return None

        return nothing


@dataclass
class ReplayResult:
    cycles: int = 0
    identical: int = 0
    different: int = 0
    incomplete: int = 0
    events: int = 0
    seconds: float = 0.0
    boots: list[str] = field(default_factory=list)
    diffs: list[dict[str, Any]] = field(default_factory=list)
    placed: dict[str, int] = field(default_factory=lambda: {"recorded": 0, "replayed": 0})
    evicted: dict[str, int] = field(default_factory=lambda: {"recorded": 0, "replayed": 0})
    missing_configs: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"cycles": self.cycles, "identical": self.identical, "different": self.different,
                "incomplete": self.incomplete, "events": self.events, "seconds": round(self.seconds, 3),
                "events_per_second": round(self.events / self.seconds) if self.seconds else 0,
                "boots": self.boots, "placed": self.placed, "evicted": self.evicted,
                "missing_configs": self.missing_configs, "diffs": self.diffs}


def decode_records(items: Iterable[bytes]) -> list[m.CycleRecord]:
    out = []
    for data in items:
        msg = m.decode(data)
        if isinstance(msg, m.CycleRecord):
            out.append(msg)
    return out


def _parse_range(cycles: str | None) -> tuple[int, int]:
    """``A..B``, ``A..``, ``..B`` or ``N``: the cycle numbers to compare."""
    big = 2**63
    if not cycles:
        return 0, big
    if ".." in cycles:
        a, b = cycles.split("..", 1)
        return (int(a) if a else 0), (int(b) if b else big)
    return int(cycles), int(cycles)


def _diff(rec: m.CycleRecord, binds: list[tuple[str, str]], evicts: list[tuple[str, str, str]],
          pipelined: list[tuple[str, str]], phases: list[tuple[str, str]]) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    want, got = {t: n for t, n in rec.binds}, dict(binds)
    added = sorted([t, n] for t, n in got.items() if t not in want)
    missing = sorted([t, n] for t, n in want.items() if t not in got)
    moved = sorted([t, want[t], n] for t, n in got.items() if t in want and want[t] != n)
    if added or missing or moved:
        out["binds"] = {"added": added, "missing": missing, "moved": moved}
    we, ge = {tuple(e) for e in rec.evicts}, set(evicts)
    if we != ge:
        out["evicts"] = {"added": sorted(map(list, ge - we)), "missing": sorted(map(list, we - ge))}
    wp, gp = {tuple(p) for p in rec.pipelined}, set(pipelined)
    if wp != gp:
        out["pipelined"] = {"added": sorted(map(list, gp - wp)), "missing": sorted(map(list, wp - gp))}
    wph, gph = {tuple(p) for p in rec.phases}, set(phases)
    if wph != gph:
        out["phases"] = {"added": sorted(map(list, gph - wph)), "missing": sorted(map(list, wph - gph))}
    if not out:
        return None
    return {"boot": rec.boot, "cycle": rec.n, **out}


class Replayer:
    """The replaying scheduler, one recorded cycle at a time: `advance` brings its cache where the live
    cycle's snapshot stood (steps 1-3 above) and returns the configuration and plugins the cycle runs
    with; `run` runs it and returns its decisions.  `replay` compares them; `busched.replay.export`
    writes the state `advance` left as a scenario."""

    def __init__(self, state: list[tuple[str, int, bytes]], records: list[m.CycleRecord]) -> None:
        from busched.bus.client import StreamSettings
        from busched.framework.config import DEFAULT_CONFIG, load_config
        from busched.scheduler import Scheduler, SchedulerSettings
        from busched.scheduler import history as Hs

        self.state = state
        self.configs: dict[str, Any] = {}
        for r in records:
            if r.config and r.cfg not in self.configs:
                self.configs[r.cfg] = Hs.config_from_json(r.config)
        self.sched = sched = Scheduler(_Silent(), load_config(DEFAULT_CONFIG),  # type: ignore[arg-type]
                                       SchedulerSettings(cycle_in_thread=False, manage_gc=False, purge=False,
                                                         streams=StreamSettings(history_max_age=0)),
                                       clock=lambda: 0.0)
        sched.boot = "replay"  # no record on the stream is taken for its own
        sched._caught_up = True
        self.seqs = [s for _, s, _ in state]
        self.cursor = 0
        self.boot: str | None = None
        self.pg_from_stream = True
        self.events = 0
        self.missing_configs: list[str] = []

    def advance(self, r: m.CycleRecord, config: Any = None) -> tuple[Any, Any]:
        """Bring the cache where record ``r``'s snapshot stood; ``(configuration, plugins)`` of its cycle
        (``config``: run with this instead of the recorded configuration)."""
        sched, state, seqs = self.sched, self.state, self.seqs
        if r.boot != self.boot:
            self.boot, self.pg_from_stream = r.boot, True
        # 1. the stream up to where the live snapshot stood
        end = bisect.bisect_right(seqs, r.seq)
        if end > self.cursor:
            pg = self.pg_from_stream
            sched.handle_state_batch([(subj, data, seq) for subj, seq, data in state[self.cursor:end]
                                      if pg or not subj.startswith(_PODGROUP)])
            self.events += end - self.cursor
            self.cursor = end
        # 2. our own binding records that counted at once
        if r.own > r.seq:
            own_end = bisect.bisect_right(seqs, r.own)
            mine = []
            for subj, seq, data in state[self.cursor:own_end]:
                if subj.startswith(_BINDING):
                    try:
                        rec = m.decode(data)
                    except m.DecodeError:
                        continue
                    if isinstance(rec, m.BindingRecord) and rec.writer == r.boot:
                        mine.append((subj, data, seq))
            if mine:
                sched.handle_state_batch(mine)
        # 3. what the cycle read beside the stream
        unready = set(r.unready)
        for node in sched.specs["node"]:
            lv = sched.live.get(node)
            want = "unreachable" if node in unready else "alive"
            if lv is None or lv.state != want:
                from busched.scheduler.records import NodeLive

                lv = sched.live.setdefault(node, NodeLive())
                lv.state = want
                sched.effective.refresh_node(node)
        old = set(sched.backoff_until)
        new = set(r.backoff)
        sched.backoff_until = {k: INF for k in new}
        for k in old ^ new:
            sched.effective.refresh_task(k)
        sched.excluded = {t: {n: INF for n in nodes} for t, nodes in r.excl.items()}
        sched.cache.own_shard = (r.shard, r.shard_mode or "hard") if r.shard else None  # as the cycle owned
        cfg = config if config is not None else self.configs.get(r.cfg)
        if cfg is None:
            if r.cfg not in self.missing_configs:
                self.missing_configs.append(r.cfg)
            cfg = sched.config
        sched.config = cfg
        return sched._cycle_config()

    async def run(self, r: m.CycleRecord, run_config: Any, plugins: Any) -> tuple[list[tuple[str, str]],
                                                                                   list[tuple[str, str, str]],
                                                                                   list[tuple[str, str]],
                                                                                   list[tuple[str, str]]]:
        """Run record ``r``'s cycle over the state `advance` left: ``(binds, evicts, pipelined, phases)``."""
        from busched.builtin import finish_cycle, run_actions
        from busched.scheduler import history as Hs

        sched = self.sched
        snap = sched.snapshot()
        ssn = run_actions(snap, run_config, plugins=plugins, seed=r.seed, uid=f"{r.boot}-{r.n}", now=r.now)
        binds = [(d.task, d.node) for d in ssn.decisions if d.kind == "bind"]
        evicts = [(d.task, d.node, d.reason or "") for d in ssn.decisions if d.kind == "evict"]
        finish_cycle(ssn)
        await sched.statuses.collect(ssn)
        phases = sorted(Hs.changed_statuses(sched))
        pipelined = Hs.pipelined(ssn)
        self.pg_from_stream = False
        return binds, evicts, pipelined, phases

    def gap(self, r: m.CycleRecord) -> int:
        """Sequences below record ``r``'s cycle the stream no longer holds."""
        return r.seq - bisect.bisect_right(self.seqs, r.seq)


async def replay(state: list[tuple[str, int, bytes]], records: list[m.CycleRecord], *, config: Any = None,
                 cycles: str | None = None, max_diffs: int = 100) -> ReplayResult:
    """Replay ``records`` over ``state`` (``(subject, seq, data)`` in sequence order).  ``config``: a
    `SchedulerConfig` to run every cycle with instead of the recorded one (a what-if); ``cycles``:
    ``A..B``, the cycle numbers compared (every recorded cycle before B is still run, for the podgroup
    statuses it changes)."""
    t0 = time.perf_counter()
    res = ReplayResult()
    lo, hi = _parse_range(cycles)
    rp = Replayer(state, records)
    for r in records:
        if r.n > hi:
            break
        if r.boot != rp.boot:
            res.boots.append(r.boot)
        run_config, plugins = rp.advance(r, config)
        binds, evicts, pipelined, phases = await rp.run(r, run_config, plugins)
        if r.n < lo:
            continue
        res.cycles += 1
        res.placed["recorded"] += len(r.binds)
        res.placed["replayed"] += len(binds)
        res.evicted["recorded"] += len(r.evicts)
        res.evicted["replayed"] += len(evicts)
        gap = rp.gap(r)
        if gap > 0:
            res.incomplete += 1
        d = _diff(r, binds, evicts, pipelined, phases)
        if d is None:
            res.identical += 1
        else:
            res.different += 1
            if gap > 0:
                d["incomplete"] = gap
            if len(res.diffs) < max_diffs:
                res.diffs.append(d)
    res.events = rp.events
    res.missing_configs = rp.missing_configs
    res.seconds = time.perf_counter() - t0
    return res
