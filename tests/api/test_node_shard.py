"""NodeShardSpec: its shape and bounds, `build.validate`, its members, and the cache's snapshot of the shard a
scheduler runs as (`Cache.own_shard`)."""

from __future__ import annotations

import msgspec
import pytest

from busched.api import build
from busched.api.objects import ClusterSpec, NodeShardSpec, NodeSpec
from busched.cache.cache import Cache


def shard(**kw: object) -> NodeShardSpec:
    return msgspec.convert({"name": "s1", **kw}, NodeShardSpec)


NODES = [NodeSpec(name="a", labels={"pool": "gpu"}), NodeSpec(name="b", labels={"pool": "cpu"}), NodeSpec(name="c")]


def test_members_are_the_named_nodes_and_those_the_selector_matches():
    assert build.shard_members(shard(nodesDesired=["c"]), NODES) == {"c"}
    assert build.shard_members(shard(nodeSelector={"matchLabels": {"pool": "gpu"}}), NODES) == {"a"}
    both = shard(nodesDesired=["c"], nodeSelector={"matchExpressions": [{"key": "pool", "operator": "In",
                                                                         "values": ["cpu"]}]})
    assert build.shard_members(both, NODES) == {"b", "c"}
    assert build.shard_members(shard(), NODES) == frozenset()  # neither: an empty shard
    assert build.shard_members(shard(nodeSelector={}), NODES) == {"a", "b", "c"}  # {} selects every node (k8s)


@pytest.mark.parametrize("wire, field", [
    ({"nodesDesired": "a"}, "nodesDesired"),
    ({"nodesDesired": ["x" * 1025]}, "nodesDesired"),
    ({"nodeSelector": {"matchExpressions": [{"key": "k", "operator": "Near"}]}}, "operator"),
    ({"nodeSet": ["a"]}, "nodeSet"),
])
def test_a_bad_shape_is_refused_while_decoding(wire, field):
    with pytest.raises(msgspec.ValidationError, match=field):
        shard(**wire)


def test_validate_refuses_what_kubernetes_refuses():
    build.validate("nodeShard", shard(nodesDesired=["a"]))
    with pytest.raises(build.SpecError, match="nodeShard s1: nodeSelector"):
        build.validate("nodeShard", shard(nodeSelector={"matchExpressions": [{"key": "k", "operator": "In"}]}))
    with pytest.raises(build.SpecError, match="name"):
        build.validate("nodeShard", NodeShardSpec(name=""))


def test_a_cluster_file_carries_node_shards():
    c = msgspec.yaml.decode(b"nodeShards:\n- name: s1\n  nodesDesired: [a, b]\n", type=ClusterSpec)
    assert c.node_shards == [NodeShardSpec(name="s1", nodes_desired=["a", "b"])]


def test_the_snapshot_shard_follows_the_node_shard_and_the_nodes():
    cache = Cache()
    cache.load(ClusterSpec(nodes=NODES))
    assert cache.snapshot().shard.mode == ""  # no --shard: every node, as before
    cache.own_shard = ("s1", "soft")
    assert cache.snapshot().shard.nodes == frozenset()  # not applied yet: owns no node (as Volcano)
    cache.upsert("nodeShard", shard(nodeSelector={"matchLabels": {"pool": "gpu"}}))
    snap = cache.snapshot()
    assert (snap.shard.name, snap.shard.mode, snap.shard.nodes) == ("s1", "soft", {"a"})
    cache.upsert("node", NodeSpec(name="d", labels={"pool": "gpu"}))  # a node joins by its labels
    assert cache.snapshot().shard.nodes == {"a", "d"}
    cache.upsert("node", NodeSpec(name="a", labels={"pool": "cpu"}))  # and leaves by them
    assert cache.snapshot().shard.nodes == {"d"}
    cache.delete("nodeShard", "s1")
    assert cache.snapshot().shard.nodes == frozenset()
    with pytest.raises(build.SpecError):
        cache.upsert("nodeShard", shard(nodeSelector={"matchExpressions": [{"key": "k", "operator": "Exists",
                                                                            "values": ["v"]}]}))
