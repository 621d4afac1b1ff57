"""cdp: cooldown protection by the session clock (label before annotation, Go durations, the edge)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from busched.actions import ACTIONS
from busched.api.objects import ClusterSpec, JobSpec, NodeSpec, QueueSpec, TaskSpec
from busched.builtin import open_session
from busched.cache.cache import Cache
from busched.framework.config import load_config
from busched.framework.session import Session
from busched.plugins.cdp import COOLDOWN_TIME_KEY, cooldown_of

NOW = 1_772_360_220.0  # 2026-03-01T10:17:00Z
KEY = COOLDOWN_TIME_KEY

CONF = """actions: "{actions}"
tiers:
- plugins:
  - name: cdp
    enablePreemptable: {preemptable}
    enableReclaimable: {reclaimable}
  - name: gang
    enablePreemptable: false
    enableReclaimable: false
    enableJobOrder: false
    enableJobReady: false
    enableJobPipelined: false
"""


def pod(name: str, started: float | None = None, ann: str | None = None, label: str | None = None,
        phase: str = "Running", **kw: Any) -> dict[str, Any]:
    t: dict[str, Any] = {"name": name, "namespace": "c1", "job": "run", "node": "n1", "phase": phase,
                         "requests": {"cpu": "1", "memory": "1Gi"},
                         "labels": {"volcano.sh/preemptable": "true"}, "annotations": {}, **kw}
    if started is not None:
        t["startTime"] = started
    if ann is not None:
        t["annotations"][KEY] = ann
    if label is not None:
        t["labels"][KEY] = label
    return t


def open_with(pods: list[dict[str, Any]], actions: str = "", preemptable: bool = True, reclaimable: bool = True,
              now: float = NOW, queues: tuple[str, ...] = ("q1",), preemptor_queue: str = "q1") -> Session:
    spec = ClusterSpec(
        nodes=[NodeSpec(name="n1", allocatable={"cpu": str(len(pods)), "memory": f"{len(pods)}Gi", "pods": 110})],
        tasks=[msgspec.convert(t, TaskSpec) for t in pods]
        + [msgspec.convert({"name": "preemptor", "namespace": "c1", "job": "want", "phase": "Pending",
                            "requests": {"cpu": "2", "memory": "2Gi"}}, TaskSpec)],
        jobs=[JobSpec(name="run", namespace="c1", queue=queues[0], phase="Running"),
              JobSpec(name="want", namespace="c1", queue=preemptor_queue, min_member=1, phase="Inqueue")],
        queues=[QueueSpec(name=q) for q in queues])
    c = Cache()
    c.load(spec)
    conf = CONF.format(actions=actions, preemptable=str(preemptable).lower(), reclaimable=str(reclaimable).lower())
    return open_session(c.snapshot(), load_config(conf), now=now)


def victims(ssn: Session, fn: str = "preemptable") -> list[str]:
    run = ssn.jobs["c1/run"]
    preemptor = ssn.jobs["c1/want"].tasks["c1-preemptor"]
    candidates = sorted(run.tasks.values(), key=lambda t: t.name)
    return [t.name for t in getattr(ssn, fn)(preemptor, candidates)]


@pytest.mark.parametrize("fn", ["preemptable", "reclaimable"])
def test_volcano_case(fn):
    ssn = open_with([pod("p1", NOW - 100, "600s"), pod("p2", NOW - 100, "600abcde"),
                     pod("p3", NOW - 800, "600s")])
    assert victims(ssn, fn) == ["p2", "p3"]


@pytest.mark.parametrize("elapsed,protected", [(599, True), (599.999, True), (600, False), (601, False)])
def test_cooldown_exactly_elapsed_is_a_victim(elapsed, protected):
    ssn = open_with([pod("p1", NOW - elapsed, "10m")])
    assert victims(ssn) == ([] if protected else ["p1"])


def test_label_wins_over_annotation():
    ssn = open_with([pod("p1", NOW - 100, ann="1s", label="1h"), pod("p2", NOW - 100, ann="1h", label="bad")])
    # p1: the label (1h) protects it; p2: the label does not parse, and the annotation is not read then
    assert victims(ssn) == ["p2"]


@pytest.mark.parametrize("text,seconds", [
    ("600s", 600.0), ("10m", 600.0), ("1h30m", 5400.0), ("1.5h", 5400.0), ("0", 0.0), ("-5s", -5.0),
    ("300ms", 0.3), ("600", None), ("600abcde", None), ("", None), (" 600s", None), ("10 m", None),
])
def test_go_durations(text, seconds):
    ssn = open_with([pod("p1", NOW, ann=text)])
    assert cooldown_of(ssn.jobs["c1/run"].tasks["c1-p1"]) == (None if seconds is None else pytest.approx(seconds))


def test_without_cooldown_start_or_running_there_is_no_protection():
    ssn = open_with([
        pod("p1", NOW - 1),                          # no cooldown
        pod("p2", None, "1h"),                       # start time not known
        pod("p3", NOW - 1, "1h", phase="Pending"),   # Bound, not Running
        pod("p4", NOW - 1, "1h"),                    # protected
    ])
    assert victims(ssn) == ["p1", "p2", "p3"]


def test_switches_gate_each_point():
    pods = [pod("p1", NOW - 1, "1h"), pod("p2", NOW - 3600, "1h")]
    # with the point off no plugin votes, and the session gives no victims at all
    assert victims(open_with(pods, preemptable=False), "preemptable") == []
    assert victims(open_with(pods, preemptable=False), "reclaimable") == ["p2"]
    assert victims(open_with(pods, reclaimable=False), "reclaimable") == []
    assert victims(open_with(pods, reclaimable=False), "preemptable") == ["p2"]


def test_the_clock_moves_protection():
    pods = [pod("p1", NOW, "10m"), pod("p2", NOW - 300, "10m")]
    assert victims(open_with(pods, now=NOW)) == []
    assert victims(open_with(pods, now=NOW + 300)) == ["p2"]
    assert victims(open_with(pods, now=NOW + 600)) == ["p1", "p2"]


def test_preempt_evicts_only_cooled_down_tasks():
    conf_pods = [pod("young", NOW - 10, "600s", created="2026-03-01T10:16:00Z"),
                 pod("old1", NOW - 900, "600s", created="2026-03-01T10:00:00Z"),
                 pod("old2", NOW - 900, "600s", created="2026-03-01T10:01:00Z")]
    ssn = open_with(conf_pods, actions="preempt")
    ssn.jobs["c1/want"].min_available = 1
    ACTIONS["preempt"]().execute(ssn)
    evicted = sorted(d.task for d in ssn.decisions if d.kind == "evict")
    assert evicted == ["c1/old1", "c1/old2"]
