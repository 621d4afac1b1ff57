"""preempt: victim order, gang-safe victim counts, rollback of evictions, topology-aware mode."""

from __future__ import annotations

import pytest

from busched.actions.preempt import Candidate, PreemptAction, num_candidates, pick_candidate, select_victims_on_node
from busched.actions.util import TrialEvictions, victims_cover
from busched.api.snapshot import Shard
from busched.api.task import TaskStatus
from busched.framework import points
from busched.framework.session import EventHandler
from tests.actions.evict_helpers import (
    PREEMPT_TIER,
    config,
    evicted,
    job,
    node,
    pending,
    pipelined,
    running,
    session,
    spec,
    state,
)

PCS = [{"name": "high", "value": 1000}, {"name": "mid", "value": 500}, {"name": "low", "value": 10}]


def run(cluster, topo: bool = False, tier=None, shard=None, extra=None, **args):
    arguments = {"preempt": {"enableTopologyAwarePreemption": topo, **args}}
    ssn = session(cluster, config("preempt", tier or PREEMPT_TIER, arguments), extra, shard)
    PreemptAction().execute(ssn)
    return ssn


MODES = [pytest.param(False, id="normal"), pytest.param(True, id="topology")]


# -- victim ordering -----------------------------------------------------------------------------
@pytest.mark.parametrize("topo", MODES)
def test_lowest_priority_victim_goes_first(topo):
    # One node full of tasks of three low jobs; the preemptor needs room for exactly one.
    c = spec([node("n1", "3")],
             [running("a", "pg-mid", "n1", "1"), running("b", "pg-low", "n1", "1"),
              running("c", "pg-mid2", "n1", "1"), pending("p", "pg-high", "1")],
             [job("pg-mid", 0, priorityClassName="mid"), job("pg-low", 0, priorityClassName="low"),
              job("pg-mid2", 0, priorityClassName="mid"), job("pg-high", 1, priorityClassName="high")],
             priority_classes=PCS)
    ssn = run(c, topo)
    assert evicted(ssn) == ["c1/b"]
    assert pipelined(ssn) == {"c1/p": "n1"}


@pytest.mark.parametrize("topo", MODES)
def test_victims_taken_in_priority_order_until_the_preemptor_fits(topo):
    # Within one victim job, task priorities order the victims: 1 then 3, never 9.
    c = spec([node("n1", "3")],
             [running("t9", "pg-low", "n1", "1", priority=9), running("t1", "pg-low", "n1", "1", priority=1),
              running("t3", "pg-low", "n1", "1", priority=3), pending("p", "pg-high", "2")],
             [job("pg-low", 0, priorityClassName="low"), job("pg-high", 1, priorityClassName="high")],
             priority_classes=PCS)
    ssn = run(c, topo)
    assert evicted(ssn) == ["c1/t1", "c1/t3"]


def test_build_victims_queue_orders_lowest_job_then_lowest_task():
    c = spec([node("n1", "4")],
             [running("m1", "pg-mid", "n1", "1", priority=1), running("m5", "pg-mid", "n1", "1", priority=5),
              running("l7", "pg-low", "n1", "1", priority=7), running("l2", "pg-low", "n1", "1", priority=2),
              pending("p", "pg-high", "1")],
             [job("pg-mid", 0, priorityClassName="mid"), job("pg-low", 0, priorityClassName="low"),
              job("pg-high", 1, priorityClassName="high")],
             priority_classes=PCS)
    ssn = session(c, config("preempt", PREEMPT_TIER))
    preemptor = ssn.jobs["c1/pg-high"].tasks["c1-p"]
    victims = [t for j in ("c1/pg-mid", "c1/pg-low") for t in ssn.jobs[j].tasks.values()]
    q = ssn.build_victims_queue(victims, preemptor)
    order = []
    while not q.empty():
        order.append(q.pop().name)
    assert order == ["l2", "l7", "m1", "m5"]


# -- gang-safe victims -----------------------------------------------------------------------------
@pytest.mark.parametrize("topo", MODES)
def test_gang_keeps_min_member_of_the_victim_job(topo):
    # pg-low runs 3 tasks with minMember 2: only one of them may go.  Room for one task: one victim.
    c = spec([node("n1", "3")],
             [running("v1", "pg-low", "n1", "1"), running("v2", "pg-low", "n1", "1"),
              running("v3", "pg-low", "n1", "1"), pending("p", "pg-high", "1")],
             [job("pg-low", 2, priorityClassName="low"), job("pg-high", 1, priorityClassName="high")],
             priority_classes=PCS)
    ssn = run(c, topo)
    assert len(evicted(ssn)) == 1
    assert ssn.jobs["c1/pg-low"].ready_task_num() == 2


@pytest.mark.parametrize("topo", MODES)
def test_gang_victim_count_too_small_means_no_eviction(topo):
    # The preemptor needs two tasks' room but the gang lets only one go: nothing is evicted.
    c = spec([node("n1", "3")],
             [running("v1", "pg-low", "n1", "1"), running("v2", "pg-low", "n1", "1"),
              running("v3", "pg-low", "n1", "1"), pending("p", "pg-high", "2")],
             [job("pg-low", 2, priorityClassName="low"), job("pg-high", 1, priorityClassName="high")],
             priority_classes=PCS)
    ssn = run(c, topo)
    assert evicted(ssn) == []
    assert pipelined(ssn) == {}
    assert all(t.status == TaskStatus.Running for t in ssn.jobs["c1/pg-low"].tasks.values())


def test_gang_victims_counted_per_job_across_candidates():
    c = spec([node("n1", "4")],
             [running("a1", "pg-a", "n1", "1"), running("a2", "pg-a", "n1", "1"),
              running("b1", "pg-b", "n1", "1"), running("b2", "pg-b", "n1", "1"), pending("p", "pg-high", "1")],
             [job("pg-a", 1, priorityClassName="low"), job("pg-b", 2, priorityClassName="low"),
              job("pg-high", 1, priorityClassName="high")],
             priority_classes=PCS)
    ssn = session(c, config("preempt", PREEMPT_TIER))
    preemptor = ssn.jobs["c1/pg-high"].tasks["c1-p"]
    cands = [t.clone() for t in ssn.nodes["n1"].tasks.values()]
    victims = ssn.preemptable(preemptor, cands)
    # pg-a (min 1) may lose one of its two; pg-b (min 2) none.
    assert len(victims) == 1 and victims[0].job == "c1/pg-a"


# -- rollback ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("topo", MODES)
def test_evictions_rolled_back_when_job_does_not_pipeline(topo):
    # The gang of two needs both tasks placed; only one can be, so its eviction is undone.
    c = spec([node("n1", "2")],
             [running("v1", "pg-low", "n1", "1"), running("v2", "pg-low", "n1", "1", **{
                 "labels": {"volcano.sh/preemptable": "false"}}),
              pending("p1", "pg-high", "1"), pending("p2", "pg-high", "1")],
             [job("pg-low", 0, priorityClassName="low"), job("pg-high", 2, priorityClassName="high")],
             priority_classes=PCS)
    arguments = {"preempt": {"enableTopologyAwarePreemption": topo}}
    ssn = session(c, config("preempt", PREEMPT_TIER, arguments))
    before = state(ssn)
    PreemptAction().execute(ssn)
    assert evicted(ssn) == []
    assert state(ssn) == before


class Spy:
    """Records every deallocate (eviction) and allocate (undo, pipeline) the session reports."""

    name = "spy"
    events: list[tuple[str, str]] = []

    def __init__(self, arguments):
        Spy.events = []

    def on_session_open(self, ssn):
        ssn.add_event_handler(EventHandler(allocate=lambda t: Spy.events.append(("allocate", t.name)),
                                           deallocate=lambda t: Spy.events.append(("deallocate", t.name))))


PROPORTION = {"name": "proportion", "enabledAllocatable": True, "enableQueueOrder": True, "enabledOverused": True}


def test_node_evictions_discarded_when_preemptor_still_does_not_fit():
    # n1: evicting "small" makes room on the node, but the queue (capability 6) still cannot take
    # the preemptor -> that eviction is rolled back; on n2 evicting "big" works.
    c = spec([node("n1", "3"), node("n2", "4")],
             [running("small", "pg-low", "n1", "1"), running("big", "pg-low2", "n2", "4"),
              pending("p", "pg-high", "3")],
             [job("pg-low", 0, priorityClassName="low"), job("pg-low2", 0, priorityClassName="low"),
              job("pg-high", 1, priorityClassName="high")],
             queues=[{"name": "q1", "capability": {"cpu": "6", "memory": "60Gi"}}], priority_classes=PCS)
    ssn = run(c, tier=PREEMPT_TIER + [PROPORTION, {"name": "spy"}], extra={"spy": Spy})
    assert evicted(ssn) == ["c1/big"]
    assert pipelined(ssn) == {"c1/p": "n2"}
    # "small" was evicted on trial and given back before n2 was tried.
    assert Spy.events[:3] == [("deallocate", "small"), ("allocate", "small"), ("deallocate", "big")]
    assert ssn.jobs["c1/pg-low"].tasks["c1-small"].status == TaskStatus.Running
    n1 = ssn.nodes["n1"]
    assert n1.releasing.cpu == 0 and n1.idle.cpu == 2000 and n1.pipelined.cpu == 0


def test_rollback_when_queue_capability_blocks_after_evicting():
    c = spec([node("n1", "10")],
             [running("v1", "pg-low", "n1", "1"), running("v2", "pg-low", "n1", "1"), pending("p", "pg-high", "4")],
             [job("pg-low", 0, priorityClassName="low"), job("pg-high", 1, priorityClassName="high")],
             queues=[{"name": "q1", "capability": {"cpu": "3", "memory": "30Gi"}}], priority_classes=PCS)
    tier = PREEMPT_TIER + [PROPORTION]
    ssn = session(c, config("preempt", tier, {"preempt": {"enableTopologyAwarePreemption": False}}))
    before = state(ssn)
    PreemptAction().execute(ssn)
    assert evicted(ssn) == []
    assert state(ssn) == before


@pytest.mark.parametrize("topo", MODES)
def test_nothing_evicted_when_the_preemptor_already_fits(topo):
    c = spec([node("n1", "4")],
             [running("v1", "pg-low", "n1", "1"), pending("p", "pg-high", "1")],
             [job("pg-low", 0, priorityClassName="low"), job("pg-high", 1, priorityClassName="high")],
             priority_classes=PCS)
    ssn = run(c, topo)
    assert evicted(ssn) == []
    if not topo:  # normal mode places the preemptor on the node it fits
        assert pipelined(ssn) == {"c1/p": "n1"}


# -- who may preempt whom ------------------------------------------------------------------------------
@pytest.mark.parametrize("topo", MODES)
def test_preemption_policy_never_preempts_nothing(topo):
    c = spec([node("n1", "1")],
             [running("v1", "pg-low", "n1", "1"), pending("p", "pg-high", "1", preemptionPolicy="Never")],
             [job("pg-low", 0, priorityClassName="low"), job("pg-high", 1, priorityClassName="high")],
             priority_classes=PCS)
    assert evicted(run(c, topo)) == []


@pytest.mark.parametrize("topo", MODES)
def test_preemptable_false_and_other_queue_are_protected(topo):
    c = spec([node("n1", "2")],
             [running("locked", "pg-low", "n1", "1", annotations={"volcano.sh/preemptable": "false"}),
              running("other-queue", "pg-q2", "n1", "1"), pending("p", "pg-high", "1")],
             [job("pg-low", 0, priorityClassName="low"), job("pg-q2", 0, queue="q2", priorityClassName="low"),
              job("pg-high", 1, priorityClassName="high")],
             queues=[{"name": "q1"}, {"name": "q2"}], priority_classes=PCS)
    assert evicted(run(c, topo)) == []


@pytest.mark.parametrize("topo", MODES)
def test_best_effort_preemptor_takes_only_best_effort(topo):
    # pods: 2 -- the node's pod slots are full; a BestEffort preemptor may not evict "burst".
    c = spec([node("n1", "4", pods=2)],
             [running("burst", "pg-low", "n1", "1"), running("be", "pg-low", "n1", ""),
              pending("p", "pg-high", "")],
             [job("pg-low", 0, priorityClassName="low"), job("pg-high", 1, priorityClassName="high")],
             priority_classes=PCS)
    assert evicted(run(c, topo)) == ["c1/be"]


@pytest.mark.parametrize("topo", MODES)
def test_within_job_preemption_by_task_priority(topo):
    # The gang of 3 is starving; with gang's victim vote off, its own lower-priority task makes room.
    tier = [{"name": "conformance", "enablePreemptable": True},
            {"name": "gang", "enableJobPipelined": True, "enableJobStarving": True},
            {"name": "priority", "enableTaskOrder": True, "enableJobOrder": True, "enablePreemptable": True,
             "enableJobPipelined": True, "enableJobStarving": True}]
    c = spec([node("n1", "2")],
             [running("lo", "pg", "n1", "1", priority=1), running("mid", "pg", "n1", "1", priority=5),
              pending("hi", "pg", "1", priority=10)],
             [job("pg", 3, priorityClassName="low")], priority_classes=PCS)
    ssn = run(c, topo, tier=tier)
    assert evicted(ssn) == ["c1/lo"]
    assert pipelined(ssn) == {"c1/hi": "n1"}


# -- shards ------------------------------------------------------------------------------------------------
def _shard_cluster():
    return spec([node("n1", "1"), node("n2", "1")],
                [running("v2", "pg-low", "n2", "1"), running("v1", "pg-low", "n1", "1"),
                 pending("p", "pg-high", "1")],
                [job("pg-low", 0, priorityClassName="low"), job("pg-high", 1, priorityClassName="high")],
                priority_classes=PCS)


@pytest.mark.parametrize("mode", ["hard", "soft"])
def test_shard_nodes_are_preferred_or_required(mode):
    ssn = run(_shard_cluster(), shard=Shard(mode=mode, name="s", nodes=frozenset({"n1"})))
    assert evicted(ssn) == ["c1/v1"]


def test_soft_shard_falls_back_to_other_nodes():
    c = spec([node("n1", "1"), node("n2", "1")],
             [running("v1", "pg-keep", "n1", "1"), running("v2", "pg-low", "n2", "1"),
              pending("p", "pg-high", "1")],
             [job("pg-keep", 0, priorityClassName="high"), job("pg-low", 0, priorityClassName="low"),
              job("pg-high", 1, priorityClassName="high")],
             priority_classes=PCS)
    assert evicted(run(c, shard=Shard(mode="soft", name="s", nodes=frozenset({"n1"})))) == ["c1/v2"]
    assert evicted(run(c, shard=Shard(mode="hard", name="s", nodes=frozenset({"n1"})))) == []


# -- topology-aware details ------------------------------------------------------------------------------------
def test_num_candidates_bounds():
    assert num_candidates(1000, 10, 1, 100) == 100
    assert num_candidates(50, 10, 1, 100) == 5
    assert num_candidates(5, 10, 1, 100) == 1
    assert num_candidates(5, 10, 3, 100) == 3
    assert num_candidates(2, 10, 3, 100) == 2
    assert num_candidates(1000, 50, 1, 20) == 20


def test_pick_candidate_prefers_least_important_victims():
    class T:
        def __init__(self, p):
            self.priority = p

    a = Candidate("a", [T(5), T(1)])
    b = Candidate("b", [T(4), T(4)])
    c = Candidate("c", [T(4), T(1), T(1)])
    d = Candidate("d", [T(4), T(1)])
    assert pick_candidate([a, b]).node == "b"  # lower highest priority
    assert pick_candidate([b, c]).node == "b"  # same highest; each victim adds 2^31 to the sum: b
    assert pick_candidate([c, d]).node == "d"  # same highest, smaller sum
    assert pick_candidate([d, Candidate("e", [T(4), T(1)])]).node == "d"  # full tie: first found
    assert pick_candidate([]) is None


def test_topology_picks_the_node_with_cheaper_victims():
    c = spec([node("n1", "1"), node("n2", "1"), node("n3", "1")],
             [running("m", "pg-mid", "n1", "1"), running("l", "pg-low", "n2", "1"),
              running("m2", "pg-mid2", "n3", "1"), pending("p", "pg-high", "1")],
             [job("pg-mid", 0, priorityClassName="mid"), job("pg-low", 0, priorityClassName="low"),
              job("pg-mid2", 0, priorityClassName="mid"), job("pg-high", 1, priorityClassName="high")],
             priority_classes=PCS)
    # Look at every node: the one whose victim has the lowest priority wins.
    ssn = run(c, True, minCandidateNodesPercentage=100)
    assert evicted(ssn) == ["c1/l"]
    assert pipelined(ssn) == {"c1/p": "n2"}


def test_topology_reprieves_victims_not_needed():
    # Victim order is v-lo (prio 1), then v-big (prio 2); v-big alone makes room, so v-lo is reprieved.
    c = spec([node("n1", "4")],
             [running("v-lo", "pg-low", "n1", "1", priority=1), running("v-big", "pg-low", "n1", "3", priority=2),
              pending("p", "pg-high", "3")],
             [job("pg-low", 0, priorityClassName="low"), job("pg-high", 1, priorityClassName="high")],
             priority_classes=PCS)
    assert evicted(run(c, True)) == ["c1/v-big"]
    assert evicted(run(c, False)) == ["c1/v-big", "c1/v-lo"]  # normal mode keeps what it evicted


def test_select_victims_dry_run_leaves_no_trace():
    c = spec([node("n1", "4")],
             [running("a", "pg-low", "n1", "1", priority=1), running("b", "pg-low", "n1", "2", priority=2),
              running("x", "pg-low", "n1", "1", priority=3), pending("p", "pg-high", "3")],
             [job("pg-low", 0, priorityClassName="low"), job("pg-high", 1, priorityClassName="high")],
             priority_classes=PCS)
    ssn = session(c, config("preempt", PREEMPT_TIER))
    before = state(ssn)
    preemptor = ssn.jobs["c1/pg-high"].tasks["c1-p"]
    victims = select_victims_on_node(ssn, preemptor, ssn.queues["q1"], ssn.nodes["n1"], lambda t: True)
    assert sorted(v.name for v in victims) == ["a", "b"]
    assert [v.name for v in victims] == ["b", "a"]  # most important first
    assert state(ssn) == before
    assert not ssn.decisions
    assert all(t.last_status is None for j in ssn.jobs.values() for t in j.tasks.values())


def test_trial_evictions_undo_one_and_discard_all():
    c = spec([node("n1", "3")],
             [running("a", "pg-low", "n1", "1"), running("b", "pg-low", "n1", "1")],
             [job("pg-low", 0)])
    ssn = session(c, config("preempt", PREEMPT_TIER))
    before = state(ssn)
    a, b = ssn.jobs["c1/pg-low"].tasks["c1-a"], ssn.jobs["c1/pg-low"].tasks["c1-b"]
    trial = TrialEvictions(ssn)
    trial.evict(a)
    trial.evict(b)
    assert ssn.nodes["n1"].releasing.cpu == 2000
    trial.undo(a)
    assert a.status == TaskStatus.Running and b.status == TaskStatus.Releasing
    assert ssn.nodes["n1"].releasing.cpu == 1000
    trial.discard()
    assert state(ssn) == before


def test_victims_cover_counts_future_idle_and_victims():
    c = spec([node("n1", "3")],
             [running("a", "pg-low", "n1", "1"), running("b", "pg-low", "n1", "1"), pending("p", "pg-high", "3")],
             [job("pg-low", 0), job("pg-high", 1)])
    ssn = session(c, config("preempt", PREEMPT_TIER))
    n1 = ssn.nodes["n1"]
    p = ssn.jobs["c1/pg-high"].tasks["c1-p"]
    a, b = ssn.jobs["c1/pg-low"].tasks["c1-a"], ssn.jobs["c1/pg-low"].tasks["c1-b"]
    assert not victims_cover(p, n1, [a])
    assert victims_cover(p, n1, [a, b])


def test_arguments_are_read_from_the_action_configuration():
    c = _shard_cluster()
    cfg = config("preempt", PREEMPT_TIER, {"preempt": {
        "enableTopologyAwarePreemption": "true", "minCandidateNodesPercentage": 50,
        "minCandidateNodesAbsolute": 2, "maxCandidateNodesAbsolute": 7, "topologyAwarePreemptWorkerNum": 4,
        "predicateErrorCacheEnable": False}})
    ssn = session(c, cfg)
    a = PreemptAction()
    a.execute(ssn)
    assert (a.topology_aware, a.min_candidate_nodes_percentage, a.min_candidate_nodes_absolute,
            a.max_candidate_nodes_absolute, a.enable_predicate_error_cache) == (True, 50, 2, 7, False)
    # topologyAwarePreemptWorkerNum (Volcano's parallel dry run) still loads but is not read: the dry
    # run is sequential, and the same configuration without it decides the same
    without = {k: v for k, v in cfg.configurations["preempt"].items() if k != "topologyAwarePreemptWorkerNum"}
    ssn_without = session(c, config("preempt", PREEMPT_TIER, {"preempt": without}))
    PreemptAction().execute(ssn_without)
    assert evicted(ssn_without) == evicted(ssn) and pipelined(ssn_without) == pipelined(ssn)
    ssn2 = session(c, config("preempt", PREEMPT_TIER, {"preempt": {"minCandidateNodesPercentage": "lots"}}))
    b = PreemptAction()
    b.execute(ssn2)
    assert b.min_candidate_nodes_percentage == 10 and b.topology_aware is False


def test_jobs_asking_for_network_topology_do_not_preempt():
    c = spec([node("n1", "1")],
             [running("v1", "pg-low", "n1", "1"), pending("p", "pg-high", "1")],
             [job("pg-low", 0, priorityClassName="low"),
              job("pg-high", 1, priorityClassName="high", networkTopology={"mode": "hard", "highestTierAllowed": 1})],
             priority_classes=PCS)
    assert evicted(run(c)) == []
    c.jobs[1].network_topology = None
    assert evicted(run(c)) == ["c1/v1"]


@pytest.mark.parametrize("nominated,expected", [("", ["c1/v1"]), ("n2", []), ("gone", [])])
def test_nominated_node_decides_eligibility(nominated, expected):
    # n2 passes every predicate (none is configured): a task nominated there need not preempt; a
    # nomination to a node the session does not know also makes it ineligible.
    c = spec([node("n1", "1"), node("n2", "1")],
             [running("v1", "pg-low", "n1", "1"), running("k", "pg-keep", "n2", "1"),
              pending("p", "pg-high", "1", nominatedNodeName=nominated)],
             [job("pg-low", 0, priorityClassName="low"), job("pg-keep", 0, priorityClassName="high"),
              job("pg-high", 1, priorityClassName="high")],
             priority_classes=PCS)
    assert evicted(run(c)) == expected


def test_empty_intersection_in_a_tier_does_not_decide():
    # Go keeps an empty intersection as "no answer yet": the next voter of the tier starts afresh,
    # and a tier ending with none leaves the decision to the next tier.
    class Vote:
        def __init__(self, name, pick):
            self.name, self.pick = name, pick

        def on_session_open(self, ssn):
            ssn.add_fn(points.PREEMPTABLE, self.name, lambda p, cands: ([c for c in cands if c.name in self.pick], 1))

    plugins = {"va": lambda a: Vote("va", {"a"}), "vb": lambda a: Vote("vb", {"b"}),
               "vc": lambda a: Vote("vc", {"a", "b"})}
    c = spec([node("n1", "2")], [running("a", "pg", "n1", "1"), running("b", "pg", "n1", "1")], [job("pg", 0)])
    ssn = session(c, config("preempt", [{"name": "va", "enablePreemptable": True},
                                        {"name": "vb", "enablePreemptable": True},
                                        {"name": "vc", "enablePreemptable": True}]), plugins)
    cands = [t.clone() for t in ssn.nodes["n1"].tasks.values()]
    assert sorted(t.name for t in ssn.preemptable(cands[0], cands)) == ["a", "b"]
    ssn2 = session(c, config("preempt", [{"name": "va", "enablePreemptable": True},
                                         {"name": "vb", "enablePreemptable": True}]), plugins)
    assert ssn2.preemptable(cands[0], cands) == []


ANTI = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"test": "test"}}, "topologyKey": "kubernetes.io/hostname"}]}}


@pytest.mark.parametrize("topo,expected", [(True, ["c1/conflict"]), (False, [])])
def test_anti_affinity_conflict_needs_the_dry_run(topo, expected):
    # The preemptor's anti-affinity counts are taken once, at its pre-predicate.  The topology-aware
    # dry run updates them as it evicts, so it finds that the conflicting pod is the one to go;
    # normal preemption re-checks against the stale counts and never finds a fit (as Volcano).
    c = spec([node("n1", "2", pods=2, labels={"kubernetes.io/hostname": "n1"})],
             [running("plain", "pg-a", "n1", "1"),
              running("conflict", "pg-b", "n1", "1", labels={"test": "test"}, affinity=ANTI),
              pending("p", "pg-high", "1", labels={"test": "test"}, affinity=ANTI)],
             [job("pg-a", 0, priorityClassName="low"), job("pg-b", 0, priorityClassName="low"),
              job("pg-high", 1, priorityClassName="high")],
             priority_classes=PCS)
    tier = PREEMPT_TIER + [{"name": "predicates", "enablePredicate": True, "enablePreemptable": True}]
    ssn = run(c, topo, tier=tier)
    assert evicted(ssn) == expected
    if topo:
        assert pipelined(ssn) == {"c1/p": "n1"}
