"""nodegroup: queue affinity to node groups, strict mode, per-group resource limits."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from busched.api.fit import Code, FitError
from busched.api.objects import ClusterSpec
from busched.builtin import open_session
from busched.cache.cache import Cache
from busched.framework.config import parse_config
from busched.framework.session import Session
from busched.framework.statement import Statement
from busched.plugins.nodegroup import (
    ERR_AFFINITY_NOT_FOUND,
    ERR_LABEL_NOT_FOUND,
    ERR_LIMIT_EXCEEDED,
    ERR_LIMIT_INVALID,
    ERR_UNSATISFIED,
    LimitAnnotationError,
    parse_limits,
)

LABEL = "volcano.sh/nodegroup-name"
LIMITS = "volcano.sh/nodegroup-resource-limits"

AFFINITY = {
    "nodeGroupAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": ["g1", "g3"],
        "preferredDuringSchedulingIgnoredDuringExecution": ["g3"],
    },
    "nodeGroupAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": ["g2", "g4"],
        "preferredDuringSchedulingIgnoredDuringExecution": ["g4"],
    },
}


def nodes() -> list[dict[str, Any]]:
    out = [{"name": f"n{i}", "allocatable": {"cpu": "16", "memory": "64Gi"}, "labels": {LABEL: f"g{i}"}}
           for i in range(1, 5)]
    out.append({"name": "n5", "allocatable": {"cpu": "16", "memory": "64Gi"}})
    return out


def session(queues: list[dict[str, Any]], queue: str, *, arguments: dict[str, Any] | None = None,
            hierarchy: bool = False, tasks: list[dict[str, Any]] | None = None) -> Session:
    cluster = {
        "queues": queues,
        "nodes": nodes(),
        "jobs": [{"name": "pg", "namespace": "c1", "queue": queue, "minMember": 1, "phase": "Running"}],
        "tasks": tasks or [{"name": "p", "namespace": "c1", "job": "pg", "requests": {"cpu": "2", "memory": "4Gi"}}],
    }
    cache = Cache()
    cache.load(msgspec.convert(cluster, ClusterSpec))
    plugin = {"name": "nodegroup", "enableHierarchy": hierarchy, "arguments": arguments or {}}
    return open_session(cache.snapshot(), parse_config({"actions": "", "tiers": [{"plugins": [plugin]}]}))


def pending(ssn: Session, name: str = "p"):  # noqa: ANN201
    return ssn.jobs["c1/pg"].tasks[f"c1-{name}"]


def outcome(ssn: Session, node: str, name: str = "p") -> str:
    try:
        ssn.predicate_fn(pending(ssn, name), ssn.nodes[node])
    except FitError as e:
        assert e.code == Code.UnschedulableAndUnresolvable
        return e.statuses[0].reason
    return "ok"


def scores(ssn: Session) -> dict[str, float]:
    return {n: ssn.node_order_fn(pending(ssn), ssn.nodes[n]) for n in ssn.nodes}


def test_affinity_predicate_and_scores() -> None:
    ssn = session([{"name": "q1", "affinity": AFFINITY}], "q1")
    assert {n: outcome(ssn, n) for n in ssn.nodes} == {
        "n1": "ok",                       # required
        "n2": ERR_UNSATISFIED,            # anti-required
        "n3": "ok",                       # required and preferred
        "n4": "ok",                       # anti-required, but anti-preferred lets it through
        "n5": ERR_LABEL_NOT_FOUND,        # no group (strict)
    }
    assert scores(ssn) == {"n1": 100.0, "n2": 0.0, "n3": 150.0, "n4": -1.0, "n5": 0.0}


def test_queue_without_affinity_never_lands_in_a_group() -> None:
    strict = session([{"name": "plain"}], "plain")
    assert {n: outcome(strict, n) for n in strict.nodes} == {
        "n1": ERR_AFFINITY_NOT_FOUND, "n2": ERR_AFFINITY_NOT_FOUND, "n3": ERR_AFFINITY_NOT_FOUND,
        "n4": ERR_AFFINITY_NOT_FOUND, "n5": ERR_LABEL_NOT_FOUND}
    loose = session([{"name": "plain"}], "plain", arguments={"strict": False})
    assert outcome(loose, "n5") == "ok"
    assert outcome(loose, "n1") == ERR_AFFINITY_NOT_FOUND
    # an affinity object with empty lists counts as unset too
    empty = session([{"name": "e", "affinity": {"nodeGroupAffinity": {}}}], "e", arguments={"strict": "false"})
    assert outcome(empty, "n5") == "ok"


def test_non_strict_still_rejects_ungrouped_nodes_for_queues_with_affinity() -> None:
    ssn = session([{"name": "q1", "affinity": AFFINITY}], "q1", arguments={"strict": False})
    assert outcome(ssn, "n5") == ERR_LABEL_NOT_FOUND


def test_preferred_order_scores_by_position() -> None:
    aff = {"nodeGroupAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": ["g1", "g3", "g4"]}}
    ordered = session([{"name": "q", "affinity": aff}], "q", arguments={"enablePreferredOrder": True})
    s = scores(ordered)
    assert s["n1"] == pytest.approx(50.0)
    assert s["n3"] == pytest.approx(50.0 * 2 / 3)
    assert s["n4"] == pytest.approx(50.0 / 3)
    assert s["n2"] == 0.0
    plain = session([{"name": "q", "affinity": aff}], "q")
    assert scores(plain)["n4"] == 50.0


def test_affinity_inherits_from_nearest_ancestor_only_with_hierarchy() -> None:
    queues = [
        {"name": "root", "affinity": {"nodeGroupAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": ["g2"]}}},
        {"name": "mid", "parent": "root", "affinity": AFFINITY},
        {"name": "leaf", "parent": "mid"},
        {"name": "other"},  # parent defaults to root
    ]
    ssn = session(queues, "leaf", hierarchy=True)
    assert outcome(ssn, "n1") == "ok"  # mid's affinity, not root's
    assert outcome(ssn, "n2") == ERR_UNSATISFIED
    assert scores(ssn)["n3"] == 150.0
    other = session(queues, "other", hierarchy=True)
    assert outcome(other, "n2") == "ok"
    assert outcome(other, "n1") == ERR_UNSATISFIED
    flat = session(queues, "leaf", hierarchy=False)
    assert outcome(flat, "n1") == ERR_AFFINITY_NOT_FOUND


def test_resource_limit_counts_running_and_newly_placed_tasks_in_the_group() -> None:
    aff = {"nodeGroupAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": ["g1", "g2"]}}
    queues = [{"name": "q", "affinity": aff, "annotations": {LIMITS: '{"g1": {"cpu": "3"}}'}}]
    tasks = [
        {"name": "run", "namespace": "c1", "job": "pg", "node": "n1", "phase": "Running",
         "requests": {"cpu": "1", "memory": "40Gi"}},
        {"name": "p", "namespace": "c1", "job": "pg", "requests": {"cpu": "2", "memory": "4Gi"}},
        {"name": "big", "namespace": "c1", "job": "pg", "requests": {"cpu": "3", "memory": "1Gi"}},
        {"name": "s", "namespace": "c1", "job": "pg", "requests": {"cpu": "1"}},
    ]
    ssn = session(queues, "q", tasks=tasks)
    assert outcome(ssn, "n1") == "ok"  # 1 + 2 = 3 <= 3; memory is not limited
    assert outcome(ssn, "n1", "big") == ERR_LIMIT_EXCEEDED  # 1 + 3 > 3
    assert outcome(ssn, "n2", "big") == "ok"  # no limit for g2
    assert outcome(ssn, "n1", "s") == "ok"
    stmt = Statement(ssn)
    stmt.allocate(pending(ssn, "p"), "n1")  # g1 now holds 3 cpu
    assert outcome(ssn, "n1", "s") == ERR_LIMIT_EXCEEDED
    assert outcome(ssn, "n2", "s") == "ok"
    stmt.discard()  # deallocation gives the room back
    assert outcome(ssn, "n1", "s") == "ok"


def test_invalid_limit_annotation_rejects_every_node() -> None:
    aff = {"nodeGroupAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": ["g1"]}}
    ssn = session([{"name": "q", "affinity": aff, "annotations": {LIMITS: '{"g1": {"cpu": '}}], "q")
    assert {outcome(ssn, n) for n in ssn.nodes} == {ERR_LIMIT_INVALID}


def test_parse_limits() -> None:
    limits = parse_limits({LIMITS: '{"g1": {"cpu": "1500m", "nvidia.com/gpu": 2}, "g2": null}'})
    assert limits["g1"].resource.cpu == 1500
    assert limits["g1"].resource.scalars["nvidia.com/gpu"] == 2000
    assert limits["g1"].names == {"cpu", "nvidia.com/gpu"}
    assert limits["g2"].names == frozenset()
    assert parse_limits({}) == {}
    with pytest.raises(LimitAnnotationError):
        parse_limits({LIMITS: '{"g1": {"cpu": "lots"}}'})
    with pytest.raises(LimitAnnotationError):
        parse_limits({LIMITS: '["g1"]'})
