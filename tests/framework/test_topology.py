"""Network topology: the hypernode tree, sub-jobs, gradients, scores, and allocation inside hypernodes."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from busched.api import subjob
from busched.api.node import NodeInfo
from busched.api.objects import ClusterSpec
from busched.api.queue import HyperNode
from busched.api.resource import Resource
from busched.api.task import TaskStatus
from busched.builtin import open_session, run_cycle
from busched.cache.cache import Cache
from busched.framework.config import parse_config
from busched.framework.hypernodes import CLUSTER_TOP, build_topology
from busched.framework.session import Session
from busched.framework.statement import Statement
from busched.plugins.network_topology_aware import NetworkTopologyAwarePlugin, search_root
from busched.scenario.runner import check_report

NTA = {"name": "network-topology-aware", "enableNodeOrder": True, "enabledHyperNodeOrder": True,
       "enabledHyperNodeGradient": True}
GANG = {"name": "gang", "enabledSubJobReady": True, "enabledSubJobOrder": True, "enabledSubJobPipelined": False}


def nodes(*names: str, cpu: str = "2") -> list[dict[str, Any]]:
    return [{"name": n, "allocatable": {"cpu": cpu, "memory": "4Gi", "pods": 10}} for n in names]


def task(name: str, node: str = "", labels: dict[str, str] | None = None, cpu: str = "2") -> dict[str, Any]:
    t: dict[str, Any] = {"name": name, "namespace": "c1", "job": "pg1", "requests": {"cpu": cpu, "memory": "1Gi"},
                         "labels": labels or {}, "phase": "Running" if node else "Pending"}
    if node:
        t["node"] = node
    return t


TWO_TIER = [  # s0 {n1, n2} and s1 {n3, n4} under s2
    {"name": "s0", "tier": 1, "tierName": "rack", "members": ["n1", "n2"]},
    {"name": "s1", "tier": 1, "tierName": "rack", "members": ["n3", "n4"]},
    {"name": "s2", "tier": 2, "tierName": "spine", "members": ["s0", "s1"]},
]


def cluster(job: dict[str, Any], tasks: list[dict[str, Any]], hypernodes: list[dict[str, Any]] = TWO_TIER,
            node_names: tuple[str, ...] = ("n1", "n2", "n3", "n4"), cpu: str = "2") -> dict[str, Any]:
    return {"queues": [{"name": "q1"}], "nodes": nodes(*node_names, cpu=cpu),
            "jobs": [{"name": "pg1", "namespace": "c1", "queue": "q1", "phase": "Inqueue", **job}],
            "tasks": tasks, "hyperNodes": hypernodes}


def session(spec: dict[str, Any], plugins: list[dict[str, Any]] | None = None, actions: str = "") -> Session:
    cache = Cache()
    cache.load(msgspec.convert(spec, ClusterSpec))
    cfg = parse_config({"actions": actions, "tiers": [{"plugins": plugins if plugins is not None else [GANG, NTA]}]})
    if actions:
        return run_cycle(cache.snapshot(), cfg)
    return open_session(cache.snapshot(), cfg)


def tree(specs: list[dict[str, Any]], names: tuple[str, ...] = ("n1", "n2", "n3", "n4")) -> Any:
    ns = [NodeInfo.new(n, Resource(2000, 4 << 30)) for n in names]
    return build_topology([HyperNode(s["name"], s["tier"], s.get("tierName", ""), s["members"]) for s in specs], ns)


# -- the tree --------------------------------------------------------------------------------------
def test_tree_links_members_and_adds_a_cluster_top() -> None:
    topo = tree(TWO_TIER)
    assert topo.ready
    assert topo.hypernodes["s0"].parent == "s2" and topo.hypernodes["s2"].children == ["s0", "s1"]
    assert topo.hypernodes["s2"].parent == CLUSTER_TOP
    assert topo.top.tier == 3 and topo.tiers == [1, 2, 3]
    assert [n.name for n in topo.real_nodes_list["s2"]] == ["n1", "n2", "n3", "n4"]
    assert topo.real_nodes_set[CLUSTER_TOP] == {"n1", "n2", "n3", "n4"}
    assert topo.tier_name_map == {"rack": 1, "spine": 2}


def test_tree_keeps_scan_order_and_drops_unknown_nodes() -> None:
    topo = tree([{"name": "h", "tier": 1, "members": ["n3", "ghost", "n1"]}])
    assert [n.name for n in topo.real_nodes_list["h"]] == ["n1", "n3"]


def test_cluster_top_sits_above_tier_zero_and_exists_without_hypernodes() -> None:
    assert tree([{"name": "h", "tier": 0, "members": ["n1"]}]).top.tier == 1
    empty = tree([])
    assert empty.top.tier == 1 and empty.tiers == [1] and len(empty.real_nodes_list[CLUSTER_TOP]) == 4


@pytest.mark.parametrize("a, b, want", [
    ("s0", "s1", "s2"), ("s0", "s0", "s0"), ("s0", "", "s0"), ("", "s1", "s1"), ("s0", "s2", "s2"),
    ("s0", "x0", CLUSTER_TOP),
])
def test_lowest_common_ancestor(a: str, b: str, want: str) -> None:
    topo = tree(TWO_TIER + [{"name": "x0", "tier": 1, "members": []}])
    assert topo.lca(a, b) == want


def test_lca_of_unknown_hypernodes_is_empty() -> None:
    assert tree(TWO_TIER).lca("nope", "s0") == ""


def test_two_parents_or_a_cycle_make_the_topology_not_ready() -> None:
    assert not tree(TWO_TIER + [{"name": "s9", "tier": 2, "members": ["s0"]}]).ready
    assert not tree([{"name": "a", "tier": 1, "members": ["b"]}, {"name": "b", "tier": 2, "members": ["a"]}]).ready


def test_lowest_tier_hypernode_and_holding() -> None:
    topo = tree(TWO_TIER, ("n1", "n2", "n3", "n4", "n5"))
    assert topo.lowest_tier_hypernode("n3") == "s1"
    assert topo.lowest_tier_hypernode("n5") == ""
    assert topo.holding("n3") == "s1" and topo.holding("n5") == ""


# -- sub-jobs ----------------------------------------------------------------------------------------
POLICY = [{"name": "grp", "matchLabelKeys": ["role"], "subGroupSize": 2, "minSubGroups": 1,
           "networkTopology": {"mode": "hard", "highestTierAllowed": 1}}]


def test_sub_jobs_group_tasks_by_label_values_and_the_rest_go_to_the_default() -> None:
    ssn = session(cluster({"minMember": 3, "subGroupPolicy": POLICY},
                          [task("p1", labels={"role": "a"}), task("p2", labels={"role": "a"}),
                           task("p3", labels={"role": "b"}), task("p4")]))
    job = ssn.jobs["c1/pg1"]
    assert job.contains_sub_job_policy()
    assert set(job.sub_jobs) == {"c1/pg1/grp-a", "c1/pg1/grp-b", "c1/pg1"}
    a = job.sub_jobs["c1/pg1/grp-a"]
    assert a.gid == "c1/pg1/grp" and a.min_available == 2 and set(a.tasks) == {"c1-p1", "c1-p2"}
    assert job.sub_jobs["c1/pg1"].min_available == 1  # the default sub-job of a job with policies
    assert job.task_to_sub_job["c1-p4"] == "c1/pg1"
    assert job.min_sub_jobs == {"c1/pg1/grp": 1}
    assert job.contains_hard_topology()


def test_sub_job_index_follows_status_changes() -> None:
    ssn = session(cluster({"minMember": 2, "subGroupPolicy": POLICY},
                          [task("p1", labels={"role": "a"}), task("p2", labels={"role": "a"})]))
    job = ssn.jobs["c1/pg1"]
    sj = job.sub_jobs["c1/pg1/grp-a"]
    assert not sj.is_ready() and not job.check_sub_job_ready()
    stmt = Statement(ssn)
    for t in list(job.tasks.values()):
        stmt.allocate(t, "n1" if t.name == "p1" else "n2")
    assert sj.ready_task_num() == 2 and sj.is_ready() and job.check_sub_job_ready()
    stmt.discard()
    assert sj.count(TaskStatus.Pending) == 2 and not sj.is_ready()


def test_without_a_policy_every_task_is_in_the_default_sub_job_with_the_job_minimum() -> None:
    ssn = session(cluster({"minMember": 2}, [task("p1"), task("p2")]))
    job = ssn.jobs["c1/pg1"]
    assert list(job.sub_jobs) == ["c1/pg1"] and job.sub_jobs["c1/pg1"].min_available == 2
    assert not job.contains_sub_job_policy() and not job.contains_hard_topology()


def test_min_sub_groups_decide_validity() -> None:
    pol = [dict(POLICY[0], minSubGroups=2)]
    ssn = session(cluster({"minMember": 2, "subGroupPolicy": pol},
                          [task("p1", labels={"role": "a"}), task("p2", labels={"role": "a"})]))
    assert not ssn.jobs["c1/pg1"].check_sub_job_valid()
    assert ssn.job_valid(ssn.jobs["c1/pg1"]) is not None


def test_sub_job_ids_match_index_and_long_tuples() -> None:
    assert subjob.sub_job_id("ns/j", "p", ["a", "b"]) == "ns/j/p-a-b"
    long_id = subjob.sub_job_id("ns/j", "p", ["x" * 200])
    assert long_id.startswith("ns/j/p-") and len(long_id) < 30
    assert subjob.sub_job_id("ns/j", "p", ["x" * 200]) == long_id
    t = type("T", (), {"labels": {"idx": "7"}})()
    assert subjob.match_values({"matchLabelKeys": ["idx"]}, t) == ["7"]  # type: ignore[arg-type]
    assert subjob.match_values({"matchLabelKeys": []}, t) == []  # type: ignore[arg-type]
    assert subjob.match_values({"matchLabelKeys": ["idx"], "labelSelector": {"matchLabels": {"idx": "8"}}},
                               t) is None  # type: ignore[arg-type]


# -- session open: spec adjustments and recovery -------------------------------------------------------
def test_tier_names_become_tiers_and_soft_becomes_hard() -> None:
    pol = [{"name": "grp", "matchLabelKeys": ["role"], "networkTopology": {"mode": "soft"}}]
    ssn = session(cluster({"minMember": 1, "networkTopology": {"mode": "hard", "highestTierName": "rack"},
                           "subGroupPolicy": pol}, [task("p1", labels={"role": "a"})]))
    job = ssn.jobs["c1/pg1"]
    assert job.is_hard_topology_mode() == (True, 1)
    assert job.sub_jobs["c1/pg1/grp-a"].is_hard_topology_mode() == (True, 1)  # bounded by the job's tier
    soft = session(cluster({"minMember": 1, "networkTopology": {"mode": "soft"}}, [task("p1")])).jobs["c1/pg1"]
    assert soft.is_hard_topology_mode() == (True, 3)  # the cluster top's tier: no filtering


def test_unknown_tier_name_leaves_the_job_without_hard_topology() -> None:
    job = session(cluster({"minMember": 1, "networkTopology": {"mode": "hard", "highestTierName": "nope"}},
                          [task("p1")])).jobs["c1/pg1"]
    assert not job.contains_hard_topology()


def test_session_does_not_change_the_cached_spec() -> None:
    spec = cluster({"minMember": 1, "networkTopology": {"mode": "soft"}}, [task("p1")])
    cache = Cache()
    cache.load(msgspec.convert(spec, ClusterSpec))
    open_session(cache.snapshot(), parse_config({"actions": "", "tiers": [{"plugins": [GANG, NTA]}]}))
    assert msgspec.to_builtins(cache.objects["job"]["c1/pg1"].network_topology) == {"mode": "soft"}


def test_allocated_hypernode_is_recovered_from_running_tasks() -> None:
    ssn = session(cluster({"minMember": 2, "networkTopology": {"mode": "hard", "highestTierAllowed": 2}},
                          [task("p1", "n1"), task("p2", "n2"), task("p3")]))
    job = ssn.jobs["c1/pg1"]
    assert job.sub_jobs["c1/pg1"].allocated_hypernode == "s0" and job.allocated_hypernode == "s0"
    spread = session(cluster({"minMember": 2, "networkTopology": {"mode": "hard", "highestTierAllowed": 2}},
                             [task("p1", "n1"), task("p2", "n3")])).jobs["c1/pg1"]
    assert spread.allocated_hypernode == "s2"


# -- gradients ------------------------------------------------------------------------------------------
def names(gradients: list[list[Any]]) -> list[list[str]]:
    return [[h.name for h in g] for g in gradients]


def test_job_gradients_group_eligible_hypernodes_by_tier() -> None:
    ssn = session(cluster({"minMember": 3, "networkTopology": {"mode": "hard", "highestTierAllowed": 2}},
                          [task("p1"), task("p2"), task("p3")]))
    job = ssn.jobs["c1/pg1"]
    assert names(ssn.hyper_node_gradient_for_job_fn(job, ssn.topology.top)) == [["s0", "s1"], ["s2"]]


def test_gradients_pre_filter_by_the_job_minimum_resources() -> None:
    ssn = session(cluster({"minMember": 1, "minResources": {"cpu": "6"},
                           "networkTopology": {"mode": "hard", "highestTierAllowed": 2}}, [task("p1")]))
    job = ssn.jobs["c1/pg1"]
    assert names(ssn.hyper_node_gradient_for_job_fn(job, ssn.topology.top)) == [["s2"]]


def test_a_partly_running_job_searches_under_its_allowed_ancestor_only() -> None:
    ssn = session(cluster({"minMember": 2, "networkTopology": {"mode": "hard", "highestTierAllowed": 1}},
                          [task("p1", "n1"), task("p2")]))
    job = ssn.jobs["c1/pg1"]
    assert names(ssn.hyper_node_gradient_for_job_fn(job, ssn.topology.top)) == [["s0"]]
    topo = ssn.topology
    assert search_root(topo, topo.hypernodes["s1"], 1, "s0") is None  # no overlap
    assert search_root(topo, topo.hypernodes["s2"], 2, "s0").name == "s2"
    assert search_root(topo, topo.top, 1, "s0").name == "s0"


def test_jobs_without_hard_topology_get_the_offered_hypernode() -> None:
    ssn = session(cluster({"minMember": 1}, [task("p1")]))
    assert names(ssn.hyper_node_gradient_for_job_fn(ssn.jobs["c1/pg1"], ssn.topology.top)) == [[CLUSTER_TOP]]


def test_eviction_gradients_start_wide_and_are_capped() -> None:
    plugin = NetworkTopologyAwarePlugin({"hypernode.gradient.evict.max-hypernodes": 3})
    cap = plugin._reverse_and_cap
    assert cap([["a", "b", "c"], ["d", "e"], ["f"]]) == [["f"], ["d", "e"]]  # type: ignore[list-item]
    assert cap([["a", "b", "c", "d"]]) == [["b", "c", "d"]]  # type: ignore[list-item]


# -- scores ------------------------------------------------------------------------------------------------
THREE_TIER = [
    {"name": "s3", "tier": 1, "members": ["a1", "a2"]}, {"name": "s4", "tier": 1, "members": ["b1"]},
    {"name": "s5", "tier": 1, "members": ["c1"]},
    {"name": "s1", "tier": 2, "members": ["s3", "s4"]}, {"name": "s2", "tier": 2, "members": ["s5"]},
    {"name": "s0", "tier": 3, "members": ["s1", "s2"]},
]


def test_node_scores_follow_the_tier_of_the_common_ancestor() -> None:
    ssn = session(cluster({"minMember": 1, "networkTopology": {"mode": "hard", "highestTierAllowed": 3}},
                          [task("p1", "a1"), task("p2")], THREE_TIER, ("a1", "a2", "b1", "c1")), [NTA])
    t = ssn.jobs["c1/pg1"].tasks["c1-p2"]
    t.extra = {**t.extra, subjob.JOB_ALLOCATED_HYPERNODE: "s3"}  # replaced, as the scheduler does
    scores = ssn.batch_node_order_fn(t, [ssn.nodes["a2"], ssn.nodes["b1"], ssn.nodes["c1"]])
    # tiers 1..4 (the cluster top is 4): s3 itself 1.0, LCA s1 (tier 2) 2/3, LCA s0 (tier 3) 1/3
    assert scores == pytest.approx({"a2": 100.0, "b1": 200 / 3, "c1": 100 / 3})


def test_hypernode_order_prefers_the_fullest_fit() -> None:
    ssn = session(cluster({"minMember": 1, "networkTopology": {"mode": "hard", "highestTierAllowed": 2}},
                          [task("p1", "n1"), task("p2")]))
    sj = ssn.jobs["c1/pg1"].sub_jobs["c1/pg1"]
    scores = ssn.hyper_node_order_map_fn(sj, {"s0": [], "s1": []})["network-topology-aware"]
    assert scores["s0"] == 0.0  # p1 + p2 (4 cpu) on top of p1's 2 used: 6 > 4 allocatable
    assert scores["s1"] > 0.0


# -- allocation -----------------------------------------------------------------------------------------------
def binds(ssn: Session) -> dict[str, str]:
    return {d.task: d.node for d in ssn.decisions if d.kind == "bind"}


def test_hard_topology_keeps_the_gang_inside_one_allowed_hypernode() -> None:
    spec = cluster({"minMember": 3, "networkTopology": {"mode": "hard", "highestTierAllowed": 1}},
                   [task("p1"), task("p2"), task("p3")])
    assert binds(session(spec, [GANG, {"name": "predicates"}, NTA], "allocate")) == {}
    spec["jobs"][0]["networkTopology"]["highestTierAllowed"] = 2
    assert len(binds(session(spec, [GANG, {"name": "predicates"}, NTA], "allocate"))) == 3


def test_each_sub_group_lands_in_its_own_hypernode() -> None:
    pol = [{"name": "grp", "matchLabelKeys": ["role"], "subGroupSize": 2, "minSubGroups": 2,
            "networkTopology": {"mode": "hard", "highestTierAllowed": 1}}]
    spec = cluster({"minMember": 4, "networkTopology": {"mode": "hard", "highestTierAllowed": 2},
                    "subGroupPolicy": pol},
                   [task(f"p{i}", labels={"role": "a" if i < 2 else "b"}) for i in range(4)])
    ssn = session(spec, [GANG, {"name": "predicates"}, NTA], "allocate")
    got = binds(ssn)
    assert len(got) == 4
    racks = {ssn.topology.holding(got["c1/p0"]), ssn.topology.holding(got["c1/p2"])}
    assert racks == {"s0", "s1"}
    assert ssn.topology.holding(got["c1/p0"]) == ssn.topology.holding(got["c1/p1"])
    job = ssn.jobs["c1/pg1"]
    assert job.allocated_hypernode == "s2"
    assert job.sub_jobs["c1/pg1/grp-a"].allocated_hypernode in {"s0", "s1"}


def test_binds_per_hypernode_expectation() -> None:
    report = {"binds": {}, "bindsPerHyperNode": {"s0": 2, "s1": 1}}
    assert check_report(report, {"bindsPerHyperNode": {"groupBy": "lowestTier", "sortedCounts": [1, 2]}}) == []
    assert check_report(report, {"bindsPerHyperNode": {"groupBy": "lowestTier", "sortedCounts": [3]}})
