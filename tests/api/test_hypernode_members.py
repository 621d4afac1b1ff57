"""Hypernode members of Volcano's shape: checked at the edge, resolved against the cache's nodes.

The selector cases are Volcano's (pkg/util/hypernode/member_selector_test.go TestGetMembers,
pkg/scheduler/cache/event_handlers_test.go TestSchedulerCache_SyncHyperNode); the cluster-level
ones run as scenarios in tests/scenarios/hypernode-members/.
"""

from __future__ import annotations

import msgspec
import pytest

from busched.api import build, limits
from busched.api import objects as o
from busched.cache.cache import Cache
from busched.framework.hypernodes import build_topology


def _hn(doc: str) -> o.HyperNodeSpec:
    return msgspec.yaml.decode(doc, type=o.HyperNodeSpec)


NODES = [o.NodeSpec(name="worker-1", labels={"role": "worker"}),
         o.NodeSpec(name="worker-2", labels={"role": "worker"}),
         o.NodeSpec(name="control-plane-1", labels={"role": "control-plane"})]


@pytest.mark.parametrize("selector, want", [
    ("{exactMatch: {name: worker-1}}", ["worker-1"]),
    ("{regexMatch: {pattern: '^worker-'}}", ["worker-1", "worker-2"]),
    ("{labelMatch: {matchLabels: {role: worker}}}", ["worker-1", "worker-2"]),
    ("{labelMatch: {}}", []),  # an empty labelMatch selects no node
    ("{regexMatch: {pattern: 'plane'}}", ["control-plane-1"]),  # Go's MatchString: anywhere in the name
    ("{labelMatch: {matchExpressions: [{key: role, operator: NotIn, values: [worker]}]}}", ["control-plane-1"]),
])
def test_get_members(selector, want):
    spec = _hn(f"{{name: s0, members: [{{type: Node, selector: {selector}}}]}}")
    assert build.hyper_node(spec, NODES).node_members == want


def test_a_hypernode_member_is_an_exact_name_only():
    """Volcano's scheduler takes a HyperNode member by exactMatch; one by pattern holds nothing."""
    spec = _hn("{name: s2, tier: 2, members: [{type: HyperNode, selector: {exactMatch: {name: s0}}},"
               " {type: HyperNode, selector: {regexMatch: {pattern: worker}}}]}")
    h = build.hyper_node(spec, NODES)
    assert (h.hypernode_members, h.node_members, h.members) == (["s0"], [], [])


def test_plain_names_still_work_beside_typed_members():
    spec = _hn("{name: s0, members: [n1, {type: Node, selector: {exactMatch: {name: n2}}}]}")
    topo = build_topology([build.hyper_node(spec)], [build.node_info(o.NodeSpec(name=n), i)
                                                     for i, n in enumerate(["n1", "n2", "n3"])])
    assert topo.real_nodes_set["s0"] == {"n1", "n2"}


@pytest.mark.parametrize("selector, words", [
    ("{regexMatch: {pattern: '['}}", "members[0]: selector.regexMatch.pattern"),
    ("{regexMatch: {pattern: '(a)\\1'}}", "RE2"),  # a backreference: Go's regexp refuses it too
    ("{regexMatch: {pattern: '(?=x)'}}", "RE2"),  # a lookahead
    ("{regexMatch: {pattern: ''}}", "selector.regexMatch.pattern: empty"),
    ("{exactMatch: {name: ''}}", "selector.exactMatch.name: empty"),
    ("{}", "exactly one of exactMatch, regexMatch or labelMatch (given: none)"),
    ("{exactMatch: {name: a}, regexMatch: {pattern: a}}", "(given: exactMatch, regexMatch)"),
])
def test_a_bad_member_is_refused_naming_the_hypernode_and_the_field(selector, words):
    spec = _hn(f"{{name: bad, members: [n0, {{type: Node, selector: {selector}}}]}}".replace("[n0, ", "["))
    with pytest.raises(build.SpecError) as e:
        build.validate("hyperNode", spec)  # what `busched apply` runs
    assert str(e.value).startswith("hyperNode bad: members[0]") and words in str(e.value)
    with pytest.raises(build.SpecError):
        Cache().upsert("hyperNode", spec)  # and the scheduler's cache


def test_bounded_at_decode():
    long = "a" * (limits.MAX_PATTERN + 1)
    with pytest.raises(msgspec.ValidationError, match="regexMatch.pattern"):
        _hn(f"{{name: s, members: [{{type: Node, selector: {{regexMatch: {{pattern: {long}}}}}}}]}}")
    with pytest.raises(msgspec.ValidationError, match="type"):
        _hn("{name: s, members: [{type: Pod, selector: {exactMatch: {name: x}}}]}")


def test_a_backtracking_pattern_matches_as_re2_does():
    """(a+)+$ backtracks exponentially in Python's re; RE2 answers at once (and the same)."""
    spec = _hn("{name: s, members: [{type: Node, selector: {regexMatch: {pattern: '^(a+)+$'}}}]}")
    nodes = [o.NodeSpec(name="a" * 60 + "b"), o.NodeSpec(name="a" * 60)]
    assert build.hyper_node(spec, nodes).node_members == ["a" * 60]


def _members(cache: Cache, name: str) -> list[str]:
    return cache.snapshot().hypernodes[name].node_members


def test_nodes_join_and_leave_without_the_hypernode_applied_again():
    """TestSchedulerCache_SyncHyperNode: a node added later that a pattern or labels match joins; a
    deleted one leaves; a relabelled one moves; an exact name stays."""
    cache = Cache()
    for n in ("node-0", "node-1", "node-2"):
        cache.upsert("node", o.NodeSpec(name=n))
    cache.upsert("hyperNode", _hn("{name: s0, members: [{type: Node, selector: {exactMatch: {name: node-0}}},"
                                  " {type: Node, selector: {regexMatch: {pattern: '^prefix'}}}]}"))
    cache.upsert("hyperNode", _hn("{name: s1, members: [{type: Node,"
                                  " selector: {regexMatch: {pattern: 'node-[12]'}}}]}"))
    cache.upsert("hyperNode", _hn("{name: s2, members: [{type: Node,"
                                  " selector: {labelMatch: {matchLabels: {rack: r2}}}}]}"))
    assert (_members(cache, "s0"), _members(cache, "s1"), _members(cache, "s2")) == (
        ["node-0"], ["node-1", "node-2"], [])
    cache.upsert("node", o.NodeSpec(name="prefix-node-8"))
    cache.upsert("node", o.NodeSpec(name="node-9", labels={"rack": "r2"}))
    assert _members(cache, "s0") == ["node-0", "prefix-node-8"]
    assert _members(cache, "s2") == ["node-9"]
    cache.delete("node", "node-1")
    cache.delete("node", "node-0")
    assert _members(cache, "s1") == ["node-2"]
    assert _members(cache, "s0") == ["node-0", "prefix-node-8"]  # an exact name is kept, as Volcano keeps it
    cache.upsert("node", o.NodeSpec(name="node-2", labels={"rack": "r2"}))
    assert _members(cache, "s2") == ["node-2", "node-9"]
    cache.upsert("node", o.NodeSpec(name="node-9"))
    assert _members(cache, "s2") == ["node-2"]


def test_each_snapshot_has_its_own_hypernodes():
    cache = Cache()
    cache.upsert("node", o.NodeSpec(name="n1"))
    cache.upsert("hyperNode", _hn("{name: s, members: [{type: Node, selector: {regexMatch: {pattern: n}}}]}"))
    first = cache.snapshot().hypernodes["s"]
    first.node_members.append("x")
    assert cache.snapshot().hypernodes["s"].node_members == ["n1"]
