"""Load a scenario file, run one cycle, report decisions, compare with ``expect``.

The file format is tests/conformance/FORMAT.md (the repository's copy of
../shared/conformance/FORMAT.md).  The cluster block enters an empty `Cache` as
events (nodes, tasks, jobs, queues, priority classes), one snapshot is taken,
one session runs ``config.actions`` and closes.  The report is a plain dict with
every key of FORMAT's output, in a stable order, so the same file gives
byte-identical JSON on every run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from busched.api.build import SpecError
from busched.api.fit import FitError
from busched.api.objects import ClusterSpec
from busched.api.snapshot import Shard
from busched.api.task import TaskStatus
from busched.api.timestamp import TimeError, parse_time
from busched.builtin import run_cycle
from busched.cache.cache import Cache
from busched.framework.config import ConfigError, SchedulerConfig, parse_config
from busched.framework.nodeselect import prioritize_nodes
from busched.framework.registry import Registry
from busched.framework.session import Session

__all__ = ["ScenarioError", "Scenario", "load_scenario", "run_scenario", "check_report"]


class ScenarioError(ValueError):
    """A scenario file that cannot be run; the message names the file and the field."""


@dataclass
class Scenario:
    path: str
    name: str
    config: SchedulerConfig
    cluster: ClusterSpec
    shard: Shard
    expect: dict[str, Any] = field(default_factory=dict)
    now: float = 0.0  # the session's clock (epoch seconds): the file's `now`, else the epoch


def _registries() -> tuple[Registry, Registry]:
    from busched.actions import ACTIONS
    from busched.plugins import PLUGINS

    try:
        from busched.scenario import testplugins
        extra = testplugins.TEST_PLUGINS
    except ImportError:  # pragma: no cover - the test-only plugins module is optional
        extra = {}
    return PLUGINS.with_entries(extra), ACTIONS


def load_scenario(path: str | Path) -> Scenario:
    p = str(path)
    try:
        doc = msgspec.yaml.decode(Path(path).read_bytes())
    except (OSError, msgspec.DecodeError) as e:
        raise ScenarioError(f"{p}: cannot read YAML: {e}") from None
    if not isinstance(doc, dict):
        raise ScenarioError(f"{p}: a scenario is a mapping")
    plugins, actions = _registries()
    try:
        config = parse_config(doc.get("config") or {}, known_actions=actions, known_plugins=plugins,
                              where="config")
    except ConfigError as e:
        raise ScenarioError(f"{p}: {e}") from None
    try:
        cluster = msgspec.convert(doc.get("cluster") or {}, ClusterSpec)
    except msgspec.ValidationError as e:
        raise ScenarioError(f"{p}: {str(e).replace('$.', 'cluster.')}") from None
    sh = doc.get("shard") or {}
    if not isinstance(sh, dict) or sh.get("mode", "") not in ("", "hard", "soft", "none"):
        raise ScenarioError(f"{p}: shard.mode: expected hard or soft")
    shard = Shard(mode="" if sh.get("mode") in (None, "none") else sh.get("mode", ""), name=sh.get("name", ""),
                  nodes=frozenset(sh.get("nodes") or []))
    expect = doc.get("expect") or {}
    if not isinstance(expect, dict):
        raise ScenarioError(f"{p}: expect: a mapping")
    try:
        now = parse_time(doc.get("now"), "now")
    except TimeError as e:
        raise ScenarioError(f"{p}: {e}") from None
    return Scenario(p, str(doc.get("name", p)), config, cluster, shard, expect, now)


def _report(ssn: Session, extra: dict[str, Any]) -> dict[str, Any]:
    binds: dict[str, str] = {}
    evicted: list[str] = []
    for d in ssn.decisions:
        if d.kind == "bind":
            binds[d.task] = d.node
        elif d.kind == "evict":
            evicted.append(d.task)
    pipelined: dict[str, dict[str, str]] = {}
    counts: dict[str, dict[str, int]] = {}
    phases: dict[str, str] = {}
    for uid in sorted(ssn.jobs):
        job = ssn.jobs[uid]
        phases[uid] = job.phase
        c = {s.name: len(ts) for s, ts in sorted(job.status_index.items()) if ts}
        counts[uid] = c
        pl = {t.key: t.node_name for t in job.tasks_in(TaskStatus.Pipelined)}
        if pl:
            pipelined[uid] = dict(sorted(pl.items()))
    return {
        "binds": dict(sorted(binds.items())),
        "evicted": sorted(evicted),
        "pipelined": pipelined,
        "jobPhase": phases,
        "taskStatusCounts": counts,
        "nodeScores": extra.get("nodeScores", {}),
        "predicateStatus": extra.get("predicateStatus", {}),
        "jobEnqueueable": extra.get("jobEnqueueable", {}),
        "bindsPerHyperNode": _binds_per_hypernode(ssn, binds),
    }


def _binds_per_hypernode(ssn: Session, binds: dict[str, str]) -> dict[str, int]:
    """Bound tasks counted by the lowest-tier hypernode holding their node ("" for none)."""
    out: dict[str, int] = {}
    for node in binds.values():
        hn = ssn.topology.holding(node)
        out[hn] = out.get(hn, 0) + 1
    return dict(sorted(out.items()))


PROBED = frozenset({TaskStatus.Pending, TaskStatus.Pipelined, TaskStatus.Allocated, TaskStatus.Binding,
                    TaskStatus.Bound})


def _probe(ssn: Session, extra: dict[str, Any]) -> None:
    """Scores, predicate codes and enqueue votes, read after the actions ran, before close."""
    scores: dict[str, dict[str, float]] = {}
    preds: dict[str, dict[str, str]] = {}
    for uid in sorted(ssn.jobs):
        job = ssn.jobs[uid]
        for t in sorted(job.tasks.values(), key=lambda t: t.key):
            # Every task not yet running: unbound ones, and bound ones not yet started (Volcano's
            # plugin tests score those too).
            if t.status not in PROBED:
                continue
            by_node: dict[str, float] = {}
            for s, ns in prioritize_nodes(ssn, t, ssn.node_list).items():
                for n in ns:
                    by_node[n.name] = s
            scores[t.key] = {n.name: by_node.get(n.name, 0.0) for n in ssn.node_list}
            codes = {}
            for n in ssn.node_list:
                try:
                    ssn.predicate_fn(t, n)
                    codes[n.name] = "Success"
                except FitError as e:
                    codes[n.name] = e.code.name
            preds[t.key] = codes
    extra["nodeScores"] = scores
    extra["predicateStatus"] = preds
    extra["jobEnqueueable"] = {uid: bool(ssn.job_enqueueable(ssn.jobs[uid])) for uid in sorted(ssn.jobs)}


def run_scenario(sc: Scenario, *, seed: int = 0) -> dict[str, Any]:
    plugins, actions = _registries()
    cache = Cache()
    try:
        cache.load(sc.cluster)
    except SpecError as e:
        raise ScenarioError(f"{sc.path}: cluster: {e}") from None
    cache.shard = sc.shard
    extra: dict[str, Any] = {}
    ssn = run_cycle(cache.snapshot(), sc.config, plugins=plugins, actions=actions, seed=seed, now=sc.now,
                    before_close=lambda s: _probe(s, extra))
    return _report(ssn, extra)


def check_report(report: dict[str, Any], expect: dict[str, Any]) -> list[str]:
    """Every way the report differs from ``expect`` (empty when it matches)."""
    miss: list[str] = []
    binds = report["binds"]
    minimal = bool(expect.get("minimalBindCheck"))
    if "binds" in expect and not minimal:
        want = expect["binds"] or {}
        if binds != want:
            miss.append(f"binds: want {want}, got {binds}")
    if "bindsCount" in expect and len(binds) != expect["bindsCount"]:
        miss.append(f"bindsCount: want {expect['bindsCount']}, got {len(binds)}")
    if "evicted" in expect and sorted(expect["evicted"] or []) != report["evicted"]:
        miss.append(f"evicted: want {sorted(expect['evicted'] or [])}, got {report['evicted']}")
    if "evictCount" in expect and len(report["evicted"]) != expect["evictCount"]:
        miss.append(f"evictCount: want {expect['evictCount']}, got {len(report['evicted'])}")
    for job, nodes in (expect.get("pipelined") or {}).items():
        got = report["pipelined"].get(job, {})
        if not got:
            miss.append(f"pipelined[{job}]: want tasks pipelined on {nodes}, got none")
        bad = {t: n for t, n in got.items() if n not in nodes}
        if bad:
            miss.append(f"pipelined[{job}]: tasks on nodes outside {nodes}: {bad}")
    for job, phase in (expect.get("jobPhase") or {}).items():
        if report["jobPhase"].get(job) != phase:
            miss.append(f"jobPhase[{job}]: want {phase}, got {report['jobPhase'].get(job)}")
    for job, want in (expect.get("taskStatusCounts") or {}).items():
        got = report["taskStatusCounts"].get(job, {})
        if {k: v for k, v in got.items() if v} != {k: v for k, v in want.items() if v}:
            miss.append(f"taskStatusCounts[{job}]: want {want}, got {got}")
    for task, want in (expect.get("nodeScores") or {}).items():
        got = report["nodeScores"].get(task)
        if got is None:
            miss.append(f"nodeScores[{task}]: no scores (task has a node?)")
            continue
        for node, score in want.items():
            g = got.get(node)
            if g is None or not math.isclose(g, float(score), abs_tol=1e-6):
                miss.append(f"nodeScores[{task}][{node}]: want {score}, got {g}")
    for task, want in (expect.get("predicateStatus") or {}).items():
        got = report["predicateStatus"].get(task, {})
        for node, code in want.items():
            if got.get(node) != code:
                miss.append(f"predicateStatus[{task}][{node}]: want {code}, got {got.get(node)}")
    for job, want in (expect.get("jobEnqueueable") or {}).items():
        if report["jobEnqueueable"].get(job) != want:
            miss.append(f"jobEnqueueable[{job}]: want {want}, got {report['jobEnqueueable'].get(job)}")
    if "bindsPerHyperNode" in expect:
        want_bph = expect["bindsPerHyperNode"] or {}
        group_by = want_bph.get("groupBy", "lowestTier")
        if group_by != "lowestTier":
            miss.append(f"bindsPerHyperNode.groupBy: unsupported {group_by!r} (only lowestTier)")
        else:
            got_counts = sorted(report["bindsPerHyperNode"].values())
            want_counts = sorted(int(c) for c in want_bph.get("sortedCounts") or [])
            if got_counts != want_counts:
                miss.append(f"bindsPerHyperNode: want sorted counts {want_counts}, got {got_counts} "
                            f"({report['bindsPerHyperNode']})")
    return miss
