"""A recorded cycle as a scenario file (issue 11, item 7; docs/bus.md, "History").

``busched replay SOURCE --cycle N --export FILE.yaml`` replays the records before cycle N (as
`busched.replay.replay` does, so the podgroup statuses they changed count), brings the cache where
cycle N's snapshot stood (`Replayer.advance`), and writes that cache as a scenario of the second
edition of the format (tests/conformance/FORMAT.md):

* ``now``: the record's clock (epoch seconds);
* ``cluster``: the cache's objects exactly as the session's snapshot reads them, kind by kind in the
  cache's order (the base scan order): the *effective* objects, so a task carries the node it was
  bound to, the phase its agent reported, ``deleting`` while evicted and the backoff scheduling gate;
  a job its podgroup phase and conditions; a node whose agent was not alive ``ready: false`` (busched's
  node field: the snapshot leaves such a node out, as the live cycle did);
* ``config``: the recorded configuration (every plugin switch written out, so nothing depends on
  defaults), plus the nodes each task was kept off after a refusal.  Live those are the
  ``busched-agent-feedback`` predicate plugin, which a scenario cannot name; they are written as a
  required node affinity of the task (``matchFields: metadata.name NotIn [node]``, added to each of
  its required terms), which the ``predicates`` plugin checks with the same code
  (UnschedulableAndUnresolvable).  A configuration without ``predicates`` would not see them: the
  export says so in the file's opening comment;
* ``expect``: the recorded decisions: ``binds`` (exact), ``evicted`` (exact), ``pipelined`` (per job,
  the nodes its pipelined tasks sat on) and ``jobPhase`` of the podgroups whose status the cycle changed.

A scenario runs with seed 0; a record with another seed is exported with a note in the opening comment.
"""

from __future__ import annotations

from typing import Any

import msgspec

from busched.api import objects as o
from busched.bus import messages as m
from busched.framework.config import SWITCHES, SchedulerConfig

__all__ = ["ExportError", "pick_record", "config_document", "export_cycle", "write_scenario"]

# cache kind -> the cluster block's field
_KINDS = (("node", "nodes"), ("task", "tasks"), ("job", "jobs"), ("queue", "queues"),
          ("priorityClass", "priority_classes"), ("hyperNode", "hyper_nodes"),
          ("resourceQuota", "resource_quotas"), ("podDisruptionBudget", "pod_disruption_budgets"))


class ExportError(ValueError):
    """A cycle that cannot be exported (not recorded, ambiguous); the message says why."""


def pick_record(records: list[m.CycleRecord], cycle: str) -> int:
    """The index of the record ``cycle`` names: ``N`` (one boot's cycle N) or ``BOOT:N``."""
    boot, _, n = cycle.rpartition(":")
    try:
        num = int(n)
    except ValueError:
        raise ExportError(f"--cycle {cycle!r}: expected N or BOOT:N") from None
    hits = [i for i, r in enumerate(records) if r.n == num and (not boot or r.boot == boot)]
    if not hits:
        near = sorted({r.n for r in records if not boot or r.boot == boot})
        raise ExportError(f"cycle {cycle} was not recorded (a cycle that decided nothing writes no record); "
                          f"recorded: {near[:10]}{' ...' if len(near) > 10 else ''}")
    if len(hits) > 1:
        boots = ", ".join(f"{records[i].boot}:{num}" for i in hits)
        raise ExportError(f"cycle {num} was recorded by several boots: name one ({boots})")
    return hits[0]


def config_document(config: SchedulerConfig) -> dict[str, Any]:
    """A configuration as the scenario's ``config`` block, every switch written out."""
    names = {attr: yaml for yaml, attr in SWITCHES.items()}
    tiers = []
    for t in config.tiers:
        plugins = []
        for p in t.plugins:
            doc: dict[str, Any] = {"name": p.name}
            if p.arguments:
                doc["arguments"] = dict(p.arguments)
            for attr, yaml in names.items():
                doc[yaml] = attr in p.switches
            plugins.append(doc)
        tiers.append({"plugins": plugins})
    out: dict[str, Any] = {"actions": ", ".join(config.actions), "tiers": tiers}
    if config.configurations:
        out["configurations"] = [{"name": k, "arguments": dict(v)} for k, v in config.configurations.items()]
    ns = config.node_search
    out["nodeSearch"] = {"minimumFeasibleNodes": ns.min_nodes_to_find,
                         "minimumPercentageNodesToFind": ns.min_percentage_of_nodes_to_find,
                         "percentageNodesToFind": ns.percentage_of_nodes_to_find}
    return out


def _exclude(task: dict[str, Any], nodes: list[str]) -> None:
    """Keep ``task`` (its wire form) off ``nodes``: ``metadata.name NotIn`` in each required term."""
    fields = [{"key": "metadata.name", "operator": "NotIn", "values": [n]} for n in nodes]
    na = task.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    req = na.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = req.get("nodeSelectorTerms") or []
    if not terms:
        req["nodeSelectorTerms"] = [{"matchFields": fields}]
        return
    for term in terms:
        if term.get("matchExpressions") or term.get("matchFields"):  # an empty term selects nothing: leave it
            term["matchFields"] = [*(term.get("matchFields") or []), *fields]


async def export_cycle(state: list[tuple[str, int, bytes]], records: list[m.CycleRecord], cycle: str, *,
                       source: str = "") -> tuple[dict[str, Any], list[str]]:
    """``(scenario document, notes)`` for the state before the recorded cycle ``cycle`` (N or BOOT:N)."""
    from busched.replay import Replayer

    idx = pick_record(records, cycle)
    rp = Replayer(state, records)
    for r in records[:idx]:  # every earlier cycle: the podgroup statuses they changed count
        await rp.run(r, *rp.advance(r))
    rec = records[idx]
    rp.advance(rec)
    sched = rp.sched
    sched.sync_cache()
    config = rp.configs.get(rec.cfg)
    notes: list[str] = []
    if config is None:
        raise ExportError(f"cycle {cycle}: its configuration ({rec.cfg}) is not in the records "
                          "(it rides on its boot's first record)")
    objects = sched.cache.objects
    fields: dict[str, list[Any]] = {
        field: [msgspec.convert(v, o.PodDisruptionBudgetSpec) if kind == "podDisruptionBudget" else v
                for v in objects[kind].values()] for kind, field in _KINDS}
    cluster = o.ClusterSpec(**fields)
    doc_cluster = msgspec.to_builtins(cluster)
    if rec.excl:
        tasks = {f"{t.get('namespace', 'default')}/{t['name']}": t for t in doc_cluster.get("tasks", [])}
        for key, nodes in sorted(rec.excl.items()):
            if key in tasks:
                _exclude(tasks[key], list(nodes))
        if not any(p.name == "predicates" for t in config.tiers for p in t.plugins):
            notes.append("the nodes tasks were kept off after a refusal are written as node affinity, which "
                         "only the predicates plugin checks: this configuration has none, so expect may differ")
    if rec.seed:
        notes.append(f"the live cycle ran with seed {rec.seed}; a scenario runs with seed 0")
    jobs_of = {k: f"{t.namespace}/{t.job}" for k, t in objects["task"].items() if t.job}
    pipelined: dict[str, list[str]] = {}
    for task, node in rec.pipelined:
        nodes = pipelined.setdefault(jobs_of.get(task, ""), [])
        if node not in nodes:
            nodes.append(node)
    expect: dict[str, Any] = {"binds": dict(sorted((t, n) for t, n in rec.binds)),
                              "evicted": sorted(t for t, _, _ in rec.evicts)}
    if pipelined:
        expect["pipelined"] = {j: sorted(ns) for j, ns in sorted(pipelined.items())}
    if rec.phases:
        expect["jobPhase"] = dict(sorted((j, p) for j, p in rec.phases))
    doc = {"name": f"recorded cycle {rec.boot}:{rec.n}",
           "source": f"busched replay {source} --cycle {rec.boot}:{rec.n} --export".replace("  ", " "),
           "now": rec.now, "config": config_document(config), "cluster": doc_cluster, "expect": expect}
    return doc, notes


def write_scenario(doc: dict[str, Any], notes: list[str], path: str) -> None:
    head = ["# A recorded cycle, exported by `busched replay --export` (docs/bus.md, \"History\")."]
    head += [f"# note: {n}" for n in notes]
    with open(path, "wb") as f:
        f.write(("\n".join(head) + "\n").encode())
        f.write(msgspec.yaml.encode(doc))
