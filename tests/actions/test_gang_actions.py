"""gangpreempt / gangreclaim on real sessions: arguments, candidate domains, a failed dry run leaving
no trace, and the actions loading in a full action list (after Volcano's gangpreempt_test.go and
gangreclaim_test.go, TestParseArguments*, TestPickDomainsFromGradients*)."""

from __future__ import annotations

import msgspec
import pytest

from busched.actions import ACTIONS
from busched.actions.gang_plan import candidate_domains
from busched.actions.gangpreempt import GangPreemptAction
from busched.actions.gangreclaim import GangReclaimAction
from busched.api.objects import ClusterSpec
from busched.framework.config import load_config
from busched.framework.hypernodes import CLUSTER_TOP
from tests.actions.evict_helpers import config, evicted, job, node, pending, running, session, spec, state

PCS = [{"name": "high", "value": 100}, {"name": "low", "value": 10}]
TIER = [
    {"name": "priority", "enableJobStarving": True, "enableJobOrder": True},
    {"name": "gang", "enableJobPipelined": True},
    {"name": "predicates", "enablePredicate": True},
]


def _preempt_cluster(selector=None):
    extra = {"nodeSelector": selector} if selector else {}
    return spec([node("n1", "1")],
                [pending("p", "pre", "1", **extra), running("v", "vic", "n1", "1")],
                [job("pre", 1, priorityClassName="high"), job("vic", 1, phase="Running", priorityClassName="low")],
                priority_classes=PCS)


@pytest.mark.parametrize("cls", [GangPreemptAction, GangReclaimAction])
@pytest.mark.parametrize(("given", "want"), [({}, 8), ({"maxDomains": 3}, 3), ({"maxDomains": 0}, 8),
                                             ({"maxDomains": -1}, 8)])
def test_max_domains_argument(cls, given, want):
    action = cls()
    ssn = session(_preempt_cluster(), config(action.name, TIER, {action.name: given}))
    action.parse_arguments(ssn)
    assert action.max_domains == want
    assert action.allow_whole_bundle is True


def test_whole_bundle_and_error_cache_arguments():
    action = GangPreemptAction()
    ssn = session(_preempt_cluster(), config("allocate, gangpreempt", TIER, {
        "gangpreempt": {"allowWholeBundle": False}, "allocate": {"predicateErrorCacheEnable": False}}))
    action.parse_arguments(ssn)
    assert action.allow_whole_bundle is False
    assert action.enable_predicate_error_cache is False


def test_whole_bundle_victim_evicted_for_higher_priority_gang():
    ssn = session(_preempt_cluster(), config("gangpreempt", TIER))
    GangPreemptAction().execute(ssn)
    assert evicted(ssn) == ["c1/v"]


def test_failed_dry_run_leaves_the_session_as_it_was():
    # the preemptor's node selector matches no node: the dry run evicts, fails to place, and undoes it all
    ssn = session(_preempt_cluster(selector={"zone": "nowhere"}), config("gangpreempt", TIER))
    before = state(ssn)
    GangPreemptAction().execute(ssn)
    assert evicted(ssn) == []
    assert state(ssn) == before


def _topology_cluster():
    nodes = [node(f"n{i}", "1") for i in range(4)]
    cluster = spec(nodes, [pending("p", "pre", "1")], [job("pre", 1, priorityClassName="high",
                                                           networkTopology={"mode": "hard", "highestTierAllowed": 1})],
                   priority_classes=PCS)
    cluster.hyper_nodes.extend(_hypernodes())
    return cluster


def _hypernodes():
    doc = {"hyperNodes": [{"name": f"s{i}", "tier": 1, "members": [f"n{i}"]} for i in range(4)]}
    return msgspec.convert(doc, ClusterSpec).hyper_nodes


def test_candidate_domains_capped_and_hard_topology_has_no_fallback():
    tier = [*TIER, {"name": "network-topology-aware", "enabledHyperNodeGradient": True}]
    ssn = session(_topology_cluster(), config("gangpreempt", tier))
    j = ssn.jobs["c1/pre"]
    assert candidate_domains(ssn, j, 2) == ["s0", "s1"]
    assert candidate_domains(ssn, j, 8) == ["s0", "s1", "s2", "s3"]
    # no gradient plugin: the cluster's top, which a hard-topology job does not fall back on either
    ssn = session(_topology_cluster(), config("gangpreempt", TIER))
    assert candidate_domains(ssn, ssn.jobs["c1/pre"], 8) == [CLUSTER_TOP]


def test_full_action_list_loads():
    cfg = load_config(b'actions: "enqueue, allocate, gangpreempt, gangreclaim, backfill"\n'
                      b'tiers:\n- plugins:\n  - name: priority\n  - name: gang\n')
    assert [ACTIONS[a]().name for a in cfg.actions] == ["enqueue", "allocate", "gangpreempt", "gangreclaim",
                                                        "backfill"]
