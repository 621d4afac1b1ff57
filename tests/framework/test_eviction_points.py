"""The extension points the gang actions and topology-aware preemption's dry run call:
unified_evictable (no switch; Volcano's intersection per tier) and the simulate points
(add/remove gated by the preemptable or allocatable switch, as Volcano's session_plugins.go)."""

from __future__ import annotations

import msgspec
import pytest

from busched.actions.preempt import PreemptAction
from busched.framework import points
from busched.framework.config import load_config
from busched.framework.points import EVICT_GANG_PREEMPT, EvictionContext
from tests.actions.evict_helpers import PREEMPT_TIER, config, evicted, job, node, pending, running, session, spec

PCS = [{"name": "high", "value": 1000}, {"name": "low", "value": 10}]


def _cluster():
    return spec([node("n1", "2")],
                [running("a", "pg-low", "n1", "1"), running("b", "pg-low", "n1", "1"), pending("p", "pg-high", "2")],
                [job("pg-low", 0, phase="Running", priorityClassName="low"),
                 job("pg-high", 1, priorityClassName="high")], priority_classes=PCS)


def _voter(name, keep, abstain=False):
    class Voter:
        def __init__(self, arguments):
            self.name = name

        def on_session_open(self, ssn):
            ssn.add_fn(points.UNIFIED_EVICTABLE, name,
                       lambda ctx, cands: ([c for c in cands if c.name in keep], 0 if abstain else 1))

    return Voter


def _ask(tiers, extra):
    # no switch is named: unified_evictable reads none
    doc = {"actions": "gangpreempt", "tiers": [{"plugins": [{"name": n} for n in row]} for row in tiers]}
    ssn = session(_cluster(), load_config(msgspec.yaml.encode(doc)), extra)
    cands = [t for t in ssn.jobs["c1/pg-low"].tasks.values()]
    return sorted(t.name for t in ssn.unified_evictable(EvictionContext(EVICT_GANG_PREEMPT, ssn.jobs["c1/pg-high"]),
                                                          cands))


def test_unified_evictable_intersects_voters_of_a_tier_and_ignores_abstainers():
    extra = {"x": _voter("x", {"a", "b"}), "y": _voter("y", {"b"}), "z": _voter("z", set(), abstain=True)}
    assert _ask([["x", "y", "z"]], extra) == ["b"]


def test_unified_evictable_empty_tier_falls_to_the_next():
    extra = {"x": _voter("x", set()), "y": _voter("y", {"a"})}
    assert _ask([["x"], ["y"]], extra) == ["a"]
    assert _ask([["y"], ["x"]], extra) == ["a"]  # the first tier with victims decides


class Recorder:
    calls: list[tuple[str, str]] = []

    def __init__(self, arguments):
        self.name = "recorder"
        Recorder.calls = []

    def on_session_open(self, ssn):
        for point, tag in ((points.SIMULATE_REMOVE_TASK, "remove"), (points.SIMULATE_ADD_TASK, "add")):
            ssn.add_fn(point, self.name, lambda pre, t, n, tag=tag: Recorder.calls.append((tag, t.name)))


@pytest.mark.parametrize(("switches", "called"), [({}, False), ({"enablePreemptable": True}, True),
                                                  ({"enabledAllocatable": True}, True)])
def test_simulate_add_remove_heard_only_with_preemptable_or_allocatable(switches, called):
    tier = [*PREEMPT_TIER, {"name": "recorder", **switches}]
    ssn = session(_cluster(), config("preempt", tier, {"preempt": {"enableTopologyAwarePreemption": True}}),
                  {"recorder": Recorder})
    PreemptAction().execute(ssn)
    assert evicted(ssn) == ["c1/a", "c1/b"]
    if called:
        # victim order b, a: both removed until p fits; each given back (most important first) and,
        # not fitting without it, removed again; the dry run's end gives both back
        assert Recorder.calls == [("remove", "b"), ("remove", "a"),
                                  ("add", "a"), ("remove", "a"), ("add", "b"), ("remove", "b"),
                                  ("add", "b"), ("add", "a")]
    else:
        assert Recorder.calls == []


class Refuser:
    def __init__(self, arguments):
        self.name = "refuser"

    def on_session_open(self, ssn):
        def refuse(pre, t, n):
            raise RuntimeError("cannot follow")

        ssn.add_fn(points.SIMULATE_REMOVE_TASK, self.name, refuse)


def test_a_plugin_refusing_the_dry_run_drops_the_node_and_leaves_no_trace():
    tier = [*PREEMPT_TIER, {"name": "refuser", "enablePreemptable": True}]
    ssn = session(_cluster(), config("preempt", tier, {"preempt": {"enableTopologyAwarePreemption": True}}),
                  {"refuser": Refuser})
    PreemptAction().execute(ssn)
    assert evicted(ssn) == []
    assert all(t.status.name == "Running" for t in ssn.jobs["c1/pg-low"].tasks.values())
