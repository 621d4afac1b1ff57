"""pdb: budgets parsed and computed like the disruption controller, victims filtered like Volcano."""

from __future__ import annotations

from typing import Any

import pytest

from busched.actions import ACTIONS
from busched.api.objects import PriorityClassSpec
from busched.builtin import open_session
from busched.cache.cache import Cache
from busched.framework.config import load_config
from busched.framework.session import Session
from busched.plugins.pdb import PdbError, disruptions_allowed, parse_pdb
from tests.helpers import cluster

WEB = {"app": "web"}


def pod(name: str, job: str = "web", node: str = "n1", phase: str = "Running", labels: dict | None = None,
        ns: str = "default", cpu: str = "1", priority: int | None = None, deleting: bool = False) -> dict[str, Any]:
    t: dict[str, Any] = {"name": name, "namespace": ns, "job": job, "requests": {"cpu": cpu, "memory": "1Gi"},
                         "labels": WEB if labels is None else labels, "phase": phase, "deleting": deleting}
    if node:
        t["node"] = node
    if priority is not None:
        t["priority"] = priority
    return t


def budget(**kw: Any) -> dict[str, Any]:
    return {"name": "web-pdb", "namespace": "default", "selector": {"matchLabels": WEB}, **kw}


CONF = "actions: \"{actions}\"\ntiers:\n- plugins:\n  - name: pdb\n"


def open_with(spec, pdbs: list[dict[str, Any]], config: str = CONF.format(actions="")) -> Session:
    c = Cache()
    c.load(spec)
    snap = c.snapshot()
    snap.others["podDisruptionBudgets"] = pdbs
    return open_session(snap, load_config(config))


def tasks_of(ssn: Session) -> list:
    return sorted((t for j in ssn.jobs.values() for t in j.tasks.values()), key=lambda t: t.name)


def names(ts) -> list[str]:
    return [t.name for t in ts]


def three_web(extra=(), jobs=None):
    return cluster([("n1", "8", "32Gi")], [pod("w0"), pod("w1"), pod("w2"), *extra],
                   jobs or [{"name": "web", "queue": "q1"}])


# -- parsing ------------------------------------------------------------------------------------------
def test_parse_defaults_and_status_fields():
    p = parse_pdb({"name": "a", "selector": {"matchLabels": WEB}})
    assert (p.namespace, p.min_available, p.max_unavailable, p.disruptions_allowed) == ("default", 1, None, None)
    p = parse_pdb(budget(maxUnavailable="50%", disruptionsAllowed=2, disruptedPods={"w0": "2024-01-01T00:00:00Z"}))
    assert (p.max_unavailable, p.disruptions_allowed, p.disrupted_pods) == ("50%", 2, frozenset({"w0"}))


@pytest.mark.parametrize("d,msg", [
    (budget(minAvailable=1, maxUnavailable=1), "cannot be both set"),
    (budget(minAvailable="2"), "percentage"),
    (budget(minAvailable="150%"), "greater than 100%"),
    (budget(maxUnavailable=-1), "negative"),
    (budget(maxUnavailable=True), "integer or a percentage"),
    ({"selector": {}}, "name"),
    (budget(disruptionsAllowed="1"), "disruptionsAllowed"),
])
def test_parse_rejects_what_the_api_server_would(d, msg):
    with pytest.raises(PdbError, match=msg):
        parse_pdb(d)


# -- disruptionsAllowed ---------------------------------------------------------------------------------
def allowed_for(d: dict[str, Any], spec=None) -> int:
    ssn = open_with(spec or three_web(extra=[pod("w3", phase="Pending", node=""), pod("w4", phase="Succeeded")]), [d])
    return disruptions_allowed(parse_pdb(d), tasks_of(ssn))


@pytest.mark.parametrize("d,want", [
    (budget(minAvailable=2), 1),  # 3 healthy - 2
    (budget(minAvailable=3), 0),
    (budget(minAvailable=5), 0),  # never negative
    (budget(), 2),  # default minAvailable 1
    (budget(minAvailable="50%"), 1),  # 4 live (w4 finished): ceil(2) = 2 desired
    (budget(minAvailable="60%"), 0),  # ceil(2.4) = 3 desired
    (budget(maxUnavailable=1), 0),  # 4 live - 1 = 3 desired, 3 healthy
    (budget(maxUnavailable=2), 1),
    (budget(maxUnavailable="30%"), 1),  # ceil(1.2) = 2 unavailable allowed
    (budget(maxUnavailable=2, disruptedPods=["w0"]), 0),  # w0 no longer counts as healthy
    (budget(minAvailable=0, disruptionsAllowed=7), 7),  # a given status wins
    ({**budget(minAvailable=0), "namespace": "other"}, 0),  # nothing expected there
])
def test_disruptions_allowed_like_the_disruption_controller(d, want):
    assert allowed_for(d) == want


def test_releasing_and_bound_pods_are_not_healthy():
    spec = three_web(extra=[pod("w3", deleting=True), pod("w4", phase="Pending")])  # Releasing, Bound
    assert allowed_for(budget(minAvailable=1), spec) == 2


# -- filtering ---------------------------------------------------------------------------------------------
def victims(pdbs, spec=None, order=None) -> list[str]:
    ssn = open_with(spec or three_web(), pdbs)
    ts = tasks_of(ssn)
    if order:
        ts = [next(t for t in ts if t.name == n) for n in order]
    return names(ssn.victim_tasks(ts))


def test_volcano_cases():
    assert victims([]) == ["w0", "w1", "w2"]
    assert victims([budget(disruptionsAllowed=0)]) == []
    assert victims([budget(disruptionsAllowed=1)]) == ["w0"]
    assert victims([budget(disruptionsAllowed=1)], order=["w2", "w0", "w1"]) == ["w2"]


def test_computed_budget_filters_victims():
    assert victims([budget(minAvailable=1)]) == ["w0", "w1"]
    assert victims([budget(maxUnavailable="100%")]) == ["w0", "w1", "w2"]


def test_unlabelled_pods_are_never_victims_as_in_volcano():
    spec = three_web(extra=[pod("bare", labels={})])
    assert "bare" not in victims([], spec)
    assert victims([], spec) == ["w0", "w1", "w2"]


def test_budget_scope_namespace_selector_and_disrupted_pods():
    other = {**budget(disruptionsAllowed=0), "namespace": "other"}
    assert victims([other]) == ["w0", "w1", "w2"]
    assert victims([budget(disruptionsAllowed=0, selector={"matchLabels": {"app": "db"}})]) == ["w0", "w1", "w2"]
    assert victims([budget(disruptionsAllowed=0, selector={})]) == ["w0", "w1", "w2"]  # empty: selects nothing
    assert victims([budget(disruptionsAllowed=0, selector=None)]) == ["w0", "w1", "w2"]
    expr = {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "db"]}]}
    assert victims([budget(disruptionsAllowed=1, selector=expr)]) == ["w0"]
    # pods the API server already counts as disrupted do not take from the allowance
    assert victims([budget(disruptionsAllowed=1, disruptedPods=["w0"])]) == ["w0", "w1"]


def test_every_matching_budget_is_charged():
    spec = cluster([("n1", "8", "32Gi")],
                   [pod("a0", labels={"app": "web", "tier": "x"}), pod("a1", labels={"app": "web"}),
                    pod("a2", labels={"tier": "x"})], [{"name": "web", "queue": "q1"}])
    tier = {"name": "tier-pdb", "namespace": "default", "selector": {"matchLabels": {"tier": "x"}},
            "disruptionsAllowed": 1}
    # a0 uses both allowances; a1 then breaks web's, a2 tier's
    assert victims([budget(disruptionsAllowed=1), tier], spec) == ["a0"]


def test_invalid_budgets_are_ignored():
    assert victims([budget(minAvailable=1, maxUnavailable=1)]) == ["w0", "w1", "w2"]


def test_each_call_starts_from_the_full_allowance():
    ssn = open_with(three_web(), [budget(minAvailable=2)])
    ts = tasks_of(ssn)
    assert names(ssn.victim_tasks(ts)) == ["w0"]
    assert names(ssn.victim_tasks(ts[1:])) == ["w1"]


def test_preemptable_and_reclaimable_vote():
    ssn = open_with(three_web(extra=[pod("p", node="", phase="Pending")]), [budget(minAvailable=2)])
    ts = tasks_of(ssn)
    p = next(t for t in ts if t.name == "p")
    running = [t for t in ts if t.name != "p"]
    assert names(ssn.preemptable(p, running)) == ["w0"]
    assert names(ssn.reclaimable(p, running)) == ["w0"]
    ssn = open_with(three_web(extra=[pod("p", node="", phase="Pending")]), [budget(minAvailable=3)])
    ts = tasks_of(ssn)
    assert ssn.preemptable(ts[0], [t for t in ts if t.name != "p"]) == []  # a vote with none empties the tier


# -- through actions ------------------------------------------------------------------------------------------
def test_shuffle_evicts_only_what_the_budget_allows():
    ssn = open_with(three_web(), [budget(maxUnavailable=1)], CONF.format(actions="shuffle"))
    ACTIONS["shuffle"]().execute(ssn)
    assert [d.task for d in ssn.decisions if d.kind == "evict"] == ["default/w0"]


def preempt_spec(cpu: str):
    spec = cluster([("n1", "3", "32Gi")],
                   [pod("w0", priority=1), pod("w1", priority=1), pod("w2", priority=1),
                    pod("hi", job="hi", node="", phase="Pending", labels={}, cpu=cpu, priority=1000)],
                   [{"name": "web", "queue": "q1", "priorityClassName": "low", "phase": "Running"},
                    {"name": "hi", "queue": "q1", "minMember": 1, "priorityClassName": "high", "phase": "Inqueue"}])
    spec.priority_classes = [PriorityClassSpec(name="high", value=1000), PriorityClassSpec(name="low", value=1)]
    return spec


PREEMPT = "actions: preempt\ntiers:\n- plugins:\n  - name: priority\n  - name: gang\n  - name: pdb\n"


@pytest.mark.parametrize("cpu,with_pdb,want", [
    ("1", True, 1), ("2", True, 0), ("2", False, 2),
])
def test_preempt_respects_the_budget(cpu, with_pdb, want):
    pdbs = [budget(minAvailable=2)] if with_pdb else []
    ssn = open_with(preempt_spec(cpu), pdbs, PREEMPT)
    ACTIONS["preempt"]().execute(ssn)
    evicted = [d.task for d in ssn.decisions if d.kind == "evict"]
    assert len(evicted) == want
