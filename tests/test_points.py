"""The points table (busched.framework.points) and each combine policy of busched.framework.tiers."""

from __future__ import annotations

from typing import Any

import pytest

from busched.api.fit import Code, FitError, Status
from busched.api.snapshot import ClusterSnapshot
from busched.framework import points
from busched.framework import tiers as tw
from busched.framework.config import DEFAULT_CONFIG, SWITCHES, load_config
from busched.framework.hooks import UnknownPoint
from busched.framework.points import Point
from busched.framework.session import Session

# the YAML switches Volcano's configuration has, as this scheduler accepted them before the table
VOLCANO_SWITCHES = {
    "enableJobOrder": "job_order", "enableHierarchy": "hierarchy", "enableJobReady": "job_ready",
    "enableJobPipelined": "job_pipelined", "enableTaskOrder": "task_order", "enablePreemptable": "preemptable",
    "enableReclaimable": "reclaimable", "enablePreemptive": "preemptive", "enableQueueOrder": "queue_order",
    "enabledClusterOrder": "cluster_order", "enablePredicate": "predicate", "enableBestNode": "best_node",
    "enableNodeOrder": "node_order", "enableTargetJob": "target_job", "enableReservedNodes": "reserved_nodes",
    "enableJobEnqueued": "job_enqueued", "enabledVictim": "victim", "enableJobStarving": "job_starving",
    "enabledOverused": "overused", "enabledAllocatable": "allocatable", "enabledHyperNodeOrder": "hyper_node_order",
    "enabledSubJobReady": "sub_job_ready", "enabledSubJobPipelined": "sub_job_pipelined",
    "enabledSubJobOrder": "sub_job_order", "enabledHyperNodeGradient": "hyper_node_gradient",
}

CONF = """
actions: ""
tiers:
- plugins:
  - name: a
  - name: b
    enableJobReady: false
- plugins:
  - name: c
"""


def ssn() -> Session:
    return Session(ClusterSnapshot(), load_config(CONF))


# -- the table ------------------------------------------------------------------------------------
def test_every_point_once_with_a_known_switch_and_a_tiers_policy() -> None:
    names = [p.name for p in points.POINTS]
    assert len(names) == len(set(names))
    by_constant = {v for k, v in vars(points).items() if k.isupper() and isinstance(v, Point)}
    assert by_constant == set(points.POINTS)  # every typed key is in the table, and only those
    for p in points.POINTS:
        assert getattr(points, p.name.upper()) is p
        assert p.switch is None or p.switch in SWITCHES.values()
        assert p.yaml is None or SWITCHES[p.yaml] == p.switch
        assert p.combine.__module__ == tw.__name__ and p.combine.__name__ in tw.__all__


def test_every_switch_gates_a_point_or_is_listed_apart() -> None:
    gating = {p.yaml for p in points.POINTS if p.yaml is not None}
    for key in SWITCHES:
        assert (key in gating) != (key in points.OTHER_SWITCHES), key
    assert SWITCHES == VOLCANO_SWITCHES  # the same YAML keys as before, the same attribute names


def test_switch_names_derive_from_yaml_keys() -> None:
    assert points.switch_name("enabledHyperNodeGradient") == "hyper_node_gradient"
    assert points.switch_name("enableJobOrder") == "job_order"
    assert points.switch_name("enabledVictim") == "victim"


def test_removed_points_are_gone_but_their_switches_still_load() -> None:
    names = {p.name for p in points.POINTS}
    assert not names & {"cluster_order", "best_node", "node_map", "node_reduce", "target_job", "reserved_nodes"}
    conf = load_config(CONF.replace("  - name: c", "  - name: c\n    enableBestNode: false\n"
                                                   "    enableTargetJob: true\n    enableReservedNodes: true"))
    assert not conf.tiers[1].plugins[0].enabled("best_node")


def test_unknown_point_refused() -> None:
    s = ssn()
    with pytest.raises(UnknownPoint):
        s.add_fn("job_order", "a", lambda l, r: 0)  # type: ignore[call-overload,arg-type,misc]
    with pytest.raises(UnknownPoint):
        s.add_fn(Point("job_order", yaml="enableJobOrder", combine=tw.first_decision), "a", lambda l, r: 0)


def test_default_plugins_register_on_table_points_only() -> None:
    from busched.builtin import open_session  # (the framework's own takes the plugin registry)

    s = open_session(ClusterSnapshot(), load_config(DEFAULT_CONFIG))
    assert s.has(points.JOB_ORDER) and s.has(points.PREDICATE) and s.has(points.NODE_ORDER)
    assert set(s.hooks.fns) == set(points.POINTS)


# -- resolution and twins -----------------------------------------------------------------------------
def test_freeze_resolves_and_a_later_registration_is_seen() -> None:
    s = ssn()
    s.add_fn(points.JOB_READY, "c", lambda j: False)
    s.freeze()
    assert [[n for n, _ in row] for row in s.hooks.callbacks(points.JOB_READY)] == [[], ["c"]]
    s.add_fn(points.JOB_READY, "a", lambda j: True)
    assert [[n for n, _ in row] for row in s.hooks.callbacks(points.JOB_READY)] == [["a"], ["c"]]


def test_twins_by_plugin_and_the_allocate_predicate_only() -> None:
    s = ssn()

    def pred(task: Any, node: Any) -> None:
        pass

    def twin(task: Any, arrays: Any, rows: Any) -> Any:
        return None

    s.add_fn(points.PREDICATE, "a", pred, twin=twin)
    s.add_fn(points.PREDICATE, "c", pred)
    assert [(n, t) for n, _, t in s.hooks.with_twins(points.PREDICATE)] == [("a", twin), ("c", None)]
    assert s.predicate_twins(s.predicate_for_allocate) is None  # c has no twin
    s.add_fn(points.PREDICATE, "c", pred, twin=twin)
    assert s.predicate_twins(s.predicate_for_allocate) == [twin, twin]
    assert s.predicate_twins(s.predicate_for_preempt) is None  # keeps other codes: no twin answers for it
    s.add_fn(points.PREDICATE, "c", pred)  # registered again without a twin: the twin is gone
    assert s.predicate_twins(s.predicate_for_allocate) is None


# -- combine policies -----------------------------------------------------------------------------------
def tiers(*rows: list[Any]) -> tw.Tiers:
    return [[(f"p{i}{j}", fn) for j, fn in enumerate(row)] for i, row in enumerate(rows)]


def test_first_decision() -> None:
    assert tw.first_decision(tiers([lambda a, b: 0], [lambda a, b: -1, lambda a, b: 1]), 1, 2) == -1
    assert tw.first_decision(tiers([], [lambda a, b: 0]), 1, 2) == 0


def test_all_pass_and_any_true() -> None:
    asked: list[int] = []
    no = tiers([lambda x: asked.append(1) or False], [lambda x: asked.append(2) or True])
    assert not tw.all_pass(no, 0) and asked == [1]  # the first no ends it
    assert tw.all_pass(tiers([], []), 0)
    assert tw.any_true(tiers([lambda x: False], [lambda x: True]), 0)
    assert not tw.any_true(tiers([]), 0)


def test_vote_abstain_permit_reject() -> None:
    assert tw.vote(tiers([lambda x: 0]), 0)  # all abstain: yes
    assert not tw.vote(tiers([lambda x: 1, lambda x: -1]), 0)  # a reject in the permitting tier wins
    assert tw.vote(tiers([lambda x: 1], [lambda x: -1]), 0)  # a permit ends its tier's walk
    assert not tw.vote(tiers([lambda x: 0], [lambda x: -1]), 0)


def test_starving_vote_first_tier_with_any() -> None:
    assert not tw.starving_vote(tiers([], []), 0)
    assert tw.starving_vote(tiers([], [lambda x: True], [lambda x: False]), 0)
    assert not tw.starving_vote(tiers([lambda x: True, lambda x: False]), 0)


class T:
    def __init__(self, uid: str) -> None:
        self.uid = uid


def test_intersect_victims() -> None:
    a, b, c = T("a"), T("b"), T("c")
    # within a tier, the intersection (by uid: plugins may hand back copies); an abstainer is skipped
    got = tw.intersect_victims(tiers([lambda p, cs: ([a, b], 1), lambda p, cs: ([T("b"), c], 1),
                                      lambda p, cs: ([], 0)]), None, [a, b, c])
    assert got is not None and [v.uid for v in got] == ["b"]
    # a voter with none empties the tier, the next tier decides
    got = tw.intersect_victims(tiers([lambda p, cs: ([a], 1), lambda p, cs: ([], 1)], [lambda p, cs: ([c], 1)]),
                               None, [a, b, c])
    assert got == [c]
    # an empty intersection is no decision; nobody voting is None
    assert tw.intersect_victims(tiers([lambda p, cs: ([a], 1), lambda p, cs: ([b], 1)]), None, [a, b]) is None
    assert tw.intersect_victims(tiers([lambda p, cs: ([a], 0)]), None, [a]) is None


def test_union_victims_first_tier_with_any() -> None:
    a, b = T("a"), T("b")
    assert tw.union_victims(tiers([[lambda ts: [a]], [lambda ts: [a, b]]], [[lambda ts: [T("z")]]]), []) == [a, b]
    assert tw.union_victims(tiers([[lambda ts: []]]), []) == []


def fail(plugin: str, args: tuple[Any, ...], error: Exception) -> Exception:
    return RuntimeError(f"{plugin} failed on {args}: {error}")


def test_first_failure_passes_fit_errors_and_names_a_failing_plugin() -> None:
    fe = FitError("t", "n", [Status(Code.Unschedulable, "no")])

    def raises(e: Exception) -> Any:
        def fn(*args: Any) -> None:
            raise e
        return fn

    tw.first_failure(tiers([lambda t, n: None]), fail, "t", "n")
    with pytest.raises(FitError) as got:
        tw.first_failure(tiers([lambda t, n: None], [raises(fe), raises(KeyError("x"))]), fail, "t", "n")
    assert got.value is fe
    with pytest.raises(RuntimeError, match="p01 failed"):
        tw.first_failure(tiers([lambda t, n: None, raises(KeyError("x"))]), fail, "t", "n")


def test_sums() -> None:
    assert tw.sum_scores(tiers([lambda t, n: 1.5], [lambda t, n: 2.0]), fail, "t", "n") == 3.5
    assert tw.sum_scores(tiers([]), fail, "t", "n") == 0
    assert tw.sum_maps(tiers([lambda t, ns: {"x": 1.0}], [lambda t, ns: {"x": 2.0, "y": 1.0}]), fail, "t", []) == \
        {"x": 3.0, "y": 1.0}
    with pytest.raises(RuntimeError, match="p10 failed"):
        tw.sum_scores(tiers([lambda t, n: 1.0], [lambda t, n: {}["x"]]), fail, "t", "n")


def test_first_invalid_call_all_first_plugin_by_plugin() -> None:
    ok, bad = points.ValidateResult(True), points.ValidateResult(False, "r")
    assert tw.first_invalid(tiers([lambda j: None, lambda j: ok], [lambda j: bad]), 0) is bad
    assert tw.first_invalid(tiers([lambda j: ok]), 0) is None
    heard: list[int] = []
    tw.call_all(tiers([lambda j: heard.append(1)], [lambda j: heard.append(2)]), 0)
    assert heard == [1, 2]
    assert tw.first_plugin(tiers([], [lambda *a: "first"], [lambda *a: "second"]), "default", 0) == "first"
    assert tw.first_plugin(tiers([]), "default", 0) == "default"
    assert tw.by_plugin(tiers([lambda x: 1], [lambda x: 2]), 0) == {"p00": 1, "p10": 2}


def test_session_dispatchers_use_their_points_policy() -> None:
    s = ssn()
    s.add_fn(points.JOB_VALID, "a", lambda j: points.ValidateResult(False, "gang"))
    vr = s.job_valid(None)  # type: ignore[arg-type]
    assert vr is not None and vr.reason == "gang"
    s.add_fn(points.HYPER_NODE_GRADIENT_FOR_JOB, "c", lambda j, hn, purpose: [[hn, purpose]])
    assert s.hyper_node_gradient_for_job_fn(None, "hn", "x") == [["hn", "x"]]  # type: ignore[arg-type]
    assert s.hyper_node_gradient_for_sub_job_fn(None, "hn") == [["hn"]]  # type: ignore[arg-type]
