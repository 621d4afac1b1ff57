"""Cycle records: what each cycle saw and decided, written to the history stream (docs/bus.md, "History").

`Scheduler.run_once` calls `inputs` just before its snapshot and `record` once the cycle's decisions
are published and its podgroup statuses collected.  A cycle is recorded when it decided something:
a bind, an evict, or a podgroup status that changed (a replay must run exactly those cycles, since
a status counts in the scheduler's cache at once).  The record is a `busched.bus.messages.CycleRecord`:

* where the cycle stood on the state stream: ``seq``, the last sequence applied before the
  snapshot (the watch applies messages synchronously, and nothing is handled between this call and
  the snapshot), and ``own``, the highest sequence of a binding record this scheduler wrote and
  knew of by then (its own records count at once, before the stream hands them back);
* what it read beside the stream: the nodes whose agent was not alive (heartbeats), the nodes each
  task is kept off after a refusal (``busched-agent-feedback``), the tasks under the backoff gate;
* ``now``, the seed, the digest of the configuration (its canonical JSON rides on the boot's first
  record, so ``busched replay`` needs nothing else);
* the session's decisions, before the loop filtered any out (deleted meanwhile, node lost meanwhile):
  ``binds``, ``evicts``, ``pipelined`` and the podgroups whose phase changed.

A record that cannot be written is logged and counted (``busched_publish_errors_total{what="history"}``);
the cycle goes on.  ``StreamSettings.history_max_age`` 0 writes none.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any, NamedTuple

from busched.api.task import TaskStatus
from busched.bus import history as H
from busched.bus import messages as m
from busched.framework.config import PluginOption, SchedulerConfig, SearchOptions, Tier

__all__ = ["CycleInputs", "inputs", "record", "config_json", "config_digest", "config_from_json"]

log = logging.getLogger("busched.scheduler")


class CycleInputs(NamedTuple):
    seq: int
    own: int
    unready: list[str]
    excl: dict[str, list[str]]
    backoff: list[str]


# -- the configuration, canonical --------------------------------------------------------------------------------------
def config_json(config: SchedulerConfig) -> str:
    """The configuration as canonical JSON (sorted keys and switches): the same text for the same policy."""
    doc = {
        "actions": list(config.actions),
        "tiers": [[{"name": p.name, "arguments": p.arguments, "switches": sorted(p.switches)} for p in t.plugins]
                  for t in config.tiers],
        "configurations": config.configurations,
        "nodeSearch": [config.node_search.min_nodes_to_find, config.node_search.min_percentage_of_nodes_to_find,
                       config.node_search.percentage_of_nodes_to_find],
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)


def config_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def config_from_json(text: str) -> SchedulerConfig:
    doc = json.loads(text)
    tiers = tuple(Tier(plugins=tuple(PluginOption(p["name"], dict(p["arguments"]), frozenset(p["switches"]))
                                     for p in t)) for t in doc["tiers"])
    a, b, c = doc["nodeSearch"]
    return SchedulerConfig(actions=tuple(doc["actions"]), tiers=tiers, configurations=dict(doc["configurations"]),
                           node_search=SearchOptions(a, b, c))


# -- the scheduler side -----------------------------------------------------------------------------------------------
def enabled(sched: Any) -> bool:
    return sched.settings.streams.history_max_age > 0


def inputs(sched: Any) -> CycleInputs | None:
    """What the cycle about to take its snapshot reads beside the state stream (None: history is off)."""
    if not enabled(sched):
        return None
    seq = sched.watch.last_seq if sched.watch is not None else 0
    own = sched.table.max_rec_seq  # kept as records are stored or heard: no pass over every binding per cycle
    unready: list[str] = []
    if sched.settings.require_heartbeat:
        live = sched.live
        unready = sorted(n for n in sched.specs["node"] if (lv := live.get(n)) is None or lv.state != "alive")
    excl = {task: sorted(nodes) for task, nodes in sorted(sched._excluded_key)}
    return CycleInputs(seq, own if own > seq else 0, unready, excl, sorted(sched.backoff_until))


def changed_statuses(sched: Any) -> list[tuple[str, str]]:
    """The podgroups whose status the cycle just changed: new entries of the status outbox since the last call
    (holding the previous ones, so a new status is never taken for an old one)."""
    prev: dict[str, Any] = getattr(sched, "_history_statuses", {})
    cur = dict(sched.statuses.waiting)
    sched._history_statuses = cur
    return [(f"{st.namespace}/{st.name}", st.phase) for subj, st in cur.items() if prev.get(subj) is not st]


def pipelined(ssn: Any) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for job in ssn.jobs.values():
        ts = job.status_index.get(TaskStatus.Pipelined)
        if ts:
            out.extend((t.key, t.node_name) for t in ts.values())
    return sorted(out)


async def record(sched: Any, inp: CycleInputs | None, ssn: Any, now: float) -> m.CycleRecord | None:
    """Write the record of the cycle that just ran, if it decided something; returns it (None: not written)."""
    if inp is None:
        return None
    phases = changed_statuses(sched)
    binds = [(d.task, d.node) for d in ssn.decisions if d.kind == "bind"]
    evicts = [(d.task, d.node, getattr(d, "reason", "") or "") for d in ssn.decisions if d.kind == "evict"]
    if not (binds or evicts or phases):
        return None
    cache = getattr(sched, "_history_config", None)
    if cache is None or cache[0] is not sched.config:
        text = config_json(sched.config)
        cache = (sched.config, text, config_digest(text))
        sched._history_config = cache
    first = not getattr(sched, "_history_sent_config", False)
    rec = m.CycleRecord(boot=sched.boot, n=sched.cycle, now=now, seq=inp.seq, own=inp.own, cfg=cache[2],
                        config=cache[1] if first else "", seed=sched.settings.seed, binds=binds, evicts=evicts,
                        pipelined=pipelined(ssn), phases=sorted(phases), unready=inp.unready, excl=inp.excl,
                        backoff=inp.backoff, shard=sched.settings.shard,
                        shard_mode=sched.settings.shard_mode if sched.settings.shard else "")
    try:
        acks = await sched.bus.publish_all([(H.cycle_subject(sched.boot), rec, None)])
        ok = bool(acks) and acks[0].ok
    except Exception as e:  # noqa: BLE001 - a lost record must not stop the scheduler
        log.warning("cycle %d: record not written: %s", sched.cycle, e)
        ok = False
    if ok:
        sched._history_sent_config = True
    else:
        sched.metrics.publish_errors.labels("history").inc()
    return rec
