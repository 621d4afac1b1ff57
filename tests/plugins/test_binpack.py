"""binpack: Volcano's best-fit node score with per-resource weights."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from busched.api.objects import ClusterSpec
from busched.builtin import open_session
from busched.cache.cache import Cache
from busched.framework import points
from busched.framework.config import parse_config
from busched.framework.session import Session
from busched.plugins.binpack import BinpackPlugin, BinpackWeights, resource_binpack_score


def session(cluster: dict[str, Any], plugins: list[dict[str, Any]]) -> Session:
    cache = Cache()
    cache.load(msgspec.convert(cluster, ClusterSpec))
    return open_session(cache.snapshot(), parse_config({"actions": "", "tiers": [{"plugins": plugins}]}))


def cluster(node_alloc: dict[str, Any], used: dict[str, Any], req: dict[str, Any]) -> dict[str, Any]:
    return {
        "queues": [{"name": "q"}],
        "nodes": [{"name": "n1", "allocatable": node_alloc}],
        "jobs": [{"name": "j", "namespace": "ns", "queue": "q", "phase": "Running"}],
        "tasks": [
            {"name": "running", "namespace": "ns", "job": "j", "node": "n1", "phase": "Running", "requests": used},
            {"name": "pending", "namespace": "ns", "job": "j", "requests": req},
        ],
    }


def score(ssn: Session, task: str = "ns-pending", node: str = "n1") -> float:
    t = ssn.jobs["ns/j"].tasks[task]
    return ssn.node_order_fn(t, ssn.nodes[node])


def test_weights_default_to_one_and_ignore_non_integers():
    w = BinpackWeights({"binpack.cpu": "3", "binpack.memory": -2, "binpack.weight": 2.5})
    assert (w.weight, w.cpu, w.memory) == (1, 1, 1)
    assert w.resources == {"cpu": 1, "memory": 1}


def test_weights_for_extra_resources():
    w = BinpackWeights({"binpack.weight": 10, "binpack.cpu": 2, "binpack.memory": 3,
                        "binpack.resources": "nvidia.com/gpu, example.com/foo ,",
                        "binpack.resources.nvidia.com/gpu": 7, "binpack.resources.example.com/foo": -1})
    assert w.weight == 10
    assert w.resources == {"nvidia.com/gpu": 7, "example.com/foo": 1, "cpu": 2, "memory": 3}


def test_resource_score_edges():
    assert resource_binpack_score(1, 0, 0, 5) == 0.0  # no capacity
    assert resource_binpack_score(1, 4, 0, 0) == 0.0  # no weight
    assert resource_binpack_score(3, 4, 2, 1) is None  # overflow
    assert resource_binpack_score(1, 4, 1, 2) == pytest.approx(1.0)


def test_default_weights_score_mean_fill_times_100():
    ssn = session(cluster({"cpu": "4", "memory": "8Gi"}, {"cpu": "1", "memory": "2Gi"},
                          {"cpu": "1", "memory": "2Gi"}), [{"name": "binpack"}])
    # cpu (1+1)/4 = 0.5, memory (2+2)/8 = 0.5 -> mean 0.5 -> 50
    assert score(ssn) == pytest.approx(50.0)


def test_weighted_resources_and_plugin_weight():
    ssn = session(cluster({"cpu": "4", "memory": "8Gi"}, {"cpu": "3"}, {"cpu": "1", "memory": "4Gi"}),
                  [{"name": "binpack", "arguments": {"binpack.weight": 2, "binpack.cpu": 3, "binpack.memory": 1}}])
    # cpu (3+1)/4 = 1.0 * 3, memory 4/8 = 0.5 * 1 -> 3.5 / 4 = 0.875 -> * 100 * 2
    assert score(ssn) == pytest.approx(175.0)


def test_unlisted_scalar_is_ignored_and_listed_one_counts():
    alloc = {"cpu": "4", "memory": "4Gi", "nvidia.com/gpu": "4"}
    req = {"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": "1"}
    plain = session(cluster(alloc, {}, req), [{"name": "binpack"}])
    assert score(plain) == pytest.approx(50.0)  # gpu ignored: cpu .5, memory .5
    gpu = session(cluster(alloc, {}, req), [{"name": "binpack", "arguments": {
        "binpack.resources": "nvidia.com/gpu", "binpack.resources.nvidia.com/gpu": 2}}])
    # (0.5 + 0.5 + 0.25 * 2) / 4 = 0.375
    assert score(gpu) == pytest.approx(37.5)


def test_overflow_on_any_resource_scores_zero():
    ssn = session(cluster({"cpu": "4", "memory": "4Gi"}, {"cpu": "3"}, {"cpu": "2", "memory": "1Gi"}),
                  [{"name": "binpack"}])
    assert score(ssn) == 0.0


def test_zero_weight_registers_no_node_order():
    ssn = session(cluster({"cpu": "4"}, {}, {"cpu": "1"}), [{"name": "binpack", "arguments": {"binpack.weight": 0}}])
    assert not ssn.has(points.NODE_ORDER)
    on = session(cluster({"cpu": "4"}, {}, {"cpu": "1"}), [{"name": "binpack"}])
    assert on.has(points.NODE_ORDER)


def test_node_order_switch_off_disables_scoring():
    ssn = session(cluster({"cpu": "4", "memory": "4Gi"}, {}, {"cpu": "1", "memory": "1Gi"}),
                  [{"name": "binpack", "enableNodeOrder": False}])
    assert score(ssn) == 0.0
    assert isinstance(ssn.plugins["binpack"], BinpackPlugin)
