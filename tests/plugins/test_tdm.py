"""tdm: revocable zones open by the session clock, evict period, disruption budgets, job callbacks."""

from __future__ import annotations

import calendar
from typing import Any

import pytest

from busched.actions import ACTIONS
from busched.api.fit import Code, FitError
from busched.api.task import TaskStatus
from busched.builtin import open_session
from busched.cache.cache import Cache
from busched.framework.config import load_config
from busched.framework.session import Session
from busched.plugins.tdm import max_pod_evict_num, parse_int_or_percent, zone_window
from tests.helpers import cluster

DAY0 = calendar.timegm((2024, 5, 17, 0, 0, 0))  # a UTC midnight


def at(hh: int, mm: int, ss: int = 0, day: float = DAY0) -> float:
    return day + hh * 3600 + mm * 60 + ss


def conf(args: dict[str, Any], actions: str = "", switches: str = "") -> str:
    lines = "".join(f"\n      {k}: \"{v}\"" for k, v in args.items())
    return f"actions: \"{actions}\"\ntiers:\n- plugins:\n  - name: tdm{switches}\n    arguments:{lines}\n"


def open_at(spec, config: str, now: float, state: dict | None = None) -> Session:
    c = Cache()
    c.load(spec)
    snap = c.snapshot()
    snap.others["plugin_state"] = {} if state is None else state
    return open_session(snap, load_config(config), now=now)


def task(name: str, job: str = "pg1", node: str = "", phase: str = "Pending", ns: str = "c1",
         ann: dict[str, str] | None = None, cpu: str = "1") -> dict[str, Any]:
    t: dict[str, Any] = {"name": name, "namespace": ns, "job": job, "requests": {"cpu": cpu, "memory": "1Gi"},
                         "annotations": ann or {}}
    if node:
        t["node"] = node
        t["phase"] = phase if phase != "Pending" else "Running"
    return t


def job(name: str = "pg1", ns: str = "c1", ann: dict[str, str] | None = None, **kw: Any) -> dict[str, Any]:
    return {"name": name, "namespace": ns, "queue": "q1", "annotations": ann or {}, **kw}


def zoned(spec, zones: dict[str, str]):
    for n in spec.nodes:
        if n.name in zones:
            n.labels = {"volcano.sh/revocable-zone": zones[n.name]}
    return spec


REVOCABLE = {"volcano.sh/revocable-zone": "*"}
PREEMPTABLE = {"volcano.sh/preemptable": "true"}
NOT_PREEMPTABLE = {"volcano.sh/preemptable": "false"}


# -- zone windows ----------------------------------------------------------------------------------
@pytest.mark.parametrize("raw,delta", [
    ("00:00-01:00", 3600), ("0:00-23:59", 23 * 3600 + 59 * 60), ("1:00-0:00", 23 * 3600),
    ("   1:00-0:00    ", 23 * 3600), ("23:59-23:59", 24 * 3600), ("0:00-0:00", 24 * 3600),
])
def test_zone_window_lengths_as_volcano(raw, delta):
    start, end = zone_window(raw, at(15, 30))
    assert end - start == delta
    h, m = raw.strip().split("-")[0].split(":")
    assert start == DAY0 + int(h) * 3600 + int(m) * 60


@pytest.mark.parametrize("raw", ["00:00_01:00", "0:00", "1:0-0:0", "63:59-23:59", "10:00 - 11:00", "a:00-1:00", 5])
def test_zone_window_rejects_malformed(raw):
    with pytest.raises(ValueError):
        zone_window(raw, at(12, 0))


# -- predicate and node order -----------------------------------------------------------------------
def predicate_spec():
    spec = cluster([(n, "16", "64Gi") for n in ("n1", "n2", "n3", "n4", "n5")],
                   [task("p1", ann=REVOCABLE), task("p2"), task("p3", ann=PREEMPTABLE),
                    task("p4", ann={"volcano.sh/revocable-zone": "rz1", **PREEMPTABLE})],
                   [job()])
    return zoned(spec, {"n1": "rz1", "n2": "rz1", "n5": "rz2"})


ZONES = {"tdm.revocable-zone.rz1": "0:00-0:00", "tdm.revocable-zone.rz2": "0:00-0:01"}


def feasible(ssn: Session, name: str) -> dict[str, float]:
    t = next(t for j in ssn.jobs.values() for t in j.tasks.values() if t.name == name)
    out = {}
    for n in ssn.node_list:
        try:
            ssn.predicate_fn(t, n)
        except FitError as e:
            assert e.code == Code.UnschedulableAndUnresolvable
            continue
        out[n.name] = ssn.node_order_fn(t, n)
    return out


def test_predicate_and_scores_as_volcano_test():
    ssn = open_at(predicate_spec(), conf(ZONES), at(12, 0))
    # "*" and preemptable=true may use open revocable nodes, and score 100 there; rz2 is closed
    assert feasible(ssn, "p1") == {"n1": 100.0, "n2": 100.0, "n3": 0.0, "n4": 0.0}
    assert feasible(ssn, "p3") == {"n1": 100.0, "n2": 100.0, "n3": 0.0, "n4": 0.0}
    assert feasible(ssn, "p2") == {"n3": 0.0, "n4": 0.0}
    # a zone annotation other than "*" means no revocable zone, even for a preemptable pod
    assert feasible(ssn, "p4") == {"n3": 0.0, "n4": 0.0}


def test_window_bounds_are_inclusive_whole_seconds():
    spec = predicate_spec()
    assert "n5" in feasible(open_at(spec, conf(ZONES), at(0, 0)), "p1")
    assert "n5" in feasible(open_at(spec, conf(ZONES), at(0, 1, 0) + 0.9), "p1")  # 00:01:00.9 is second 00:01:00
    assert "n5" not in feasible(open_at(spec, conf(ZONES), at(0, 1, 1)), "p1")
    assert "n5" not in feasible(open_at(spec, conf(ZONES), at(23, 59, 59)), "p1")


def test_window_across_midnight_is_anchored_on_today():
    spec = predicate_spec()
    args = {"tdm.revocable-zone.rz1": "22:00-02:00"}
    assert "n1" in feasible(open_at(spec, conf(args), at(23, 0)), "p1")
    # Volcano builds today's 22:00 -> tomorrow's 02:00, so at 01:00 the zone is closed
    assert "n1" not in feasible(open_at(spec, conf(args), at(1, 0)), "p1")


def test_unknown_zone_is_closed_and_reason_names_it():
    ssn = open_at(predicate_spec(), conf({"tdm.revocable-zone.other": "0:00-0:00"}), at(12, 0))
    t = next(t for t in ssn.jobs["c1/pg1"].tasks.values() if t.name == "p1")
    with pytest.raises(FitError) as e:
        ssn.predicate_fn(t, ssn.nodes["n1"])
    assert e.value.statuses[0].reason == "revocable zone rz1 not support"
    assert e.value.statuses[0].plugin == "tdm"


def test_allocate_puts_revocable_task_on_open_revocable_node():
    spec = zoned(cluster([("n1", "4", "8Gi"), ("n2", "4", "8Gi")],
                         [task("r", ann=REVOCABLE), task("plain")], [job()]), {"n2": "rz1"})
    cfg = "actions: allocate\ntiers:\n- plugins:\n  - name: gang\n  - name: tdm\n    arguments:\n" \
          "      tdm.revocable-zone.rz1: \"08:00-18:00\"\n"
    ssn = open_at(spec, cfg, at(9, 0))
    ACTIONS["allocate"]().execute(ssn)
    placed = {d.task: d.node for d in ssn.decisions if d.kind == "bind"}
    assert placed == {"c1/r": "n2", "c1/plain": "n1"}
    # after hours the revocable node takes nobody
    ssn = open_at(spec, cfg, at(19, 0))
    ACTIONS["allocate"]().execute(ssn)
    assert {d.task: d.node for d in ssn.decisions if d.kind == "bind"} == {"c1/r": "n1", "c1/plain": "n1"}


# -- victims (shuffle) ------------------------------------------------------------------------------
def victims_spec(budgets: dict[str, dict[str, str]]):
    tasks = []
    for i in range(1, 6):
        tasks.append(task(f"p{i}", "pg1", "n1", ann=PREEMPTABLE if i <= 3 else NOT_PREEMPTABLE))
    for i in range(6, 11):
        tasks.append(task(f"p{i}", "pg2", "n2", ns="c2", ann=PREEMPTABLE))
    jobs = []
    if "pg1" in budgets:
        jobs.append(job("pg1", "c1", budgets["pg1"]))
    if "pg2" in budgets:
        jobs.append(job("pg2", "c2", budgets["pg2"]))
    tasks = [t for t in tasks if t["job"] in budgets]
    return zoned(cluster([("n1", "16", "64Gi"), ("n2", "16", "64Gi")], tasks, jobs), {"n1": "rz1", "n2": "rz1"})


MAXU, MINA = "volcano.sh/jdb-max-unavailable", "volcano.sh/jdb-min-available"


@pytest.mark.parametrize("budgets,want", [
    ({"pg1": {MAXU: "30%"}}, 2),
    ({"pg1": {MAXU: "99%"}}, 3),  # only 3 preemptable tasks
    ({"pg2": {MAXU: "50%"}}, 3),
    ({"pg2": {MAXU: "50%"}, "pg1": {MAXU: "90%"}}, 6),
    ({"pg2": {MAXU: "3"}}, 3),
    ({"pg2": {MINA: "3"}}, 2),
    ({"pg2": {MINA: "30%"}}, 3),
    ({"pg2": {MINA: "2"}, "pg1": {MAXU: "3"}}, 6),
    ({"pg2": {}}, 1),  # no budget: one at a time
])
def test_victims_of_closed_zone_follow_budgets(budgets, want):
    spec = victims_spec(budgets)
    ssn = open_at(spec, conf({"tdm.revocable-zone.rz1": "0:00-0:01", "tdm.evict.period": "1s"}), at(12, 0))
    got = ssn.victim_tasks([])
    assert len(got) == want
    assert all(t.preemptable and t.status == TaskStatus.Running for t in got)
    # the victims are the jobs' own task objects
    assert all(ssn.jobs[t.job].tasks[t.uid] is t for t in got)


def test_no_victims_while_zone_open():
    ssn = open_at(victims_spec({"pg1": {MAXU: "30%"}}), conf({"tdm.revocable-zone.rz1": "0:00-0:00"}), at(12, 0))
    assert ssn.victim_tasks([]) == []


def test_evict_period_spans_sessions_on_the_session_clock():
    spec = victims_spec({"pg2": {MAXU: "3"}})
    cfg = conf({"tdm.revocable-zone.rz1": "0:00-0:01", "tdm.evict.period": "2m"})
    state: dict = {}
    assert len(open_at(spec, cfg, at(12, 0), state).victim_tasks([])) == 3
    assert state["tdm"]["last_evict_at"] == at(12, 0)
    assert open_at(spec, cfg, at(12, 1), state).victim_tasks([]) == []  # within the period
    assert len(open_at(spec, cfg, at(12, 2, 1), state).victim_tasks([])) == 3
    # a fresh scheduler state evicts at once
    assert len(open_at(spec, cfg, at(12, 2, 2), {}).victim_tasks([])) == 3


def test_evict_period_defaults_to_a_minute_and_resets_even_without_victims():
    spec = victims_spec({"pg2": {MAXU: "3"}})
    state: dict = {}
    open_cfg = conf({"tdm.revocable-zone.rz1": "0:00-23:59"})  # open at 12:00: nothing to evict
    assert open_at(spec, open_cfg, at(12, 0), state).victim_tasks([]) == []
    closed_cfg = conf({"tdm.revocable-zone.rz1": "0:00-0:01"})
    assert open_at(spec, closed_cfg, at(12, 0, 59), state).victim_tasks([]) == []
    assert len(open_at(spec, closed_cfg, at(12, 1, 1), state).victim_tasks([])) == 3


def test_shuffle_evicts_tdm_victims():
    spec = victims_spec({"pg1": {MAXU: "30%"}})
    ssn = open_at(spec, conf({"tdm.revocable-zone.rz1": "0:00-0:01"}, actions="shuffle"), at(12, 0))
    ACTIONS["shuffle"]().execute(ssn)
    evicted = [d.task for d in ssn.decisions if d.kind == "evict"]
    assert len(evicted) == 2 and set(evicted) <= {"c1/p1", "c1/p2", "c1/p3"}
    assert all(ssn.jobs["c1/pg1"].tasks[f"c1-{k.split('/')[1]}"].status == TaskStatus.Releasing for k in evicted)


# -- budgets ----------------------------------------------------------------------------------------
def test_parse_int_or_percent():
    assert parse_int_or_percent("3", 10) == 3
    assert parse_int_or_percent("-2", 10) == -2
    assert parse_int_or_percent("25%", 10) == 3  # rounded up
    assert parse_int_or_percent("x%", 10) == 0
    assert parse_int_or_percent("3.5", 10) == 0
    assert parse_int_or_percent("", 10) == 0


def test_max_pod_evict_num_counts_unavailable_tasks():
    spec = cluster([("n1", "16", "64Gi")],
                   [task("a", node="n1"), task("b", node="n1"), task("c"), task("d", node="n1", phase="Succeeded")],
                   [job("pg1", ann={MAXU: "2"}), job("pg2", ann={MINA: "3"})])
    ssn = open_at(spec, conf({}), at(12, 0))
    j = ssn.jobs["c1/pg1"]
    assert max_pod_evict_num(j) == 1  # c is unavailable (pending), d finished: 2 - 1
    j.annotations[MAXU] = "1"
    assert max_pod_evict_num(j) == 0
    j.annotations = {MINA: "3"}
    assert max_pod_evict_num(j) == 1  # 2 running < 3: Volcano falls back to one
    j.annotations = {MINA: "1"}
    assert max_pod_evict_num(j) == 1
    j.annotations = {MINA: "0"}
    assert max_pod_evict_num(j) == 2
    j.annotations = {MINA: "0", MAXU: "0"}  # min-available is read first
    assert max_pod_evict_num(j) == 2


# -- preemptable ----------------------------------------------------------------------------------
def preempt_session():
    tasks = [task("v1", "low", "n1", ann=PREEMPTABLE), task("v2", "low", "n1", ann=PREEMPTABLE),
             task("v3", "low", "n1", ann=PREEMPTABLE), task("keep", "low", "n1", ann=NOT_PREEMPTABLE),
             task("rz", "low", "n2", ann=PREEMPTABLE), task("bound", "low", "n1", phase="Pending", ann=PREEMPTABLE),
             task("hi", "high", ann=NOT_PREEMPTABLE), task("lo", "high2", ann=PREEMPTABLE),
             task("rzp", "high3", ann={**NOT_PREEMPTABLE, **REVOCABLE})]
    tasks[5]["phase"] = "Pending"  # bound to n1, not running
    spec = zoned(cluster([("n1", "16", "64Gi"), ("n2", "16", "64Gi")], tasks,
                         [job("low", ann={MAXU: "4"}), job("high"), job("high2"), job("high3")]), {"n2": "rz1"})
    return open_at(spec, conf(ZONES), at(12, 0))


def by_name(ssn: Session, name: str):
    return next(t for j in ssn.jobs.values() for t in j.tasks.values() if t.name == name)


def test_preemptable_takes_running_preemptable_tasks_off_revocable_nodes_within_budget():
    ssn = preempt_session()
    cands = [by_name(ssn, n) for n in ("rz", "v1", "keep", "v2", "bound", "v3")]
    victims = ssn.preemptable(by_name(ssn, "hi"), cands)
    # 6 tasks, 5 running, maxUnavailable 4 -> 3 may go; rz sits on a revocable node
    assert [t.name for t in victims] == ["v1", "v2", "v3"]
    ssn.jobs["c1/low"].annotations[MAXU] = "2"
    assert [t.name for t in ssn.preemptable(by_name(ssn, "hi"), cands)] == ["v1"]


def test_preemptable_and_revocable_preemptors_preempt_nothing():
    ssn = preempt_session()
    cands = [by_name(ssn, n) for n in ("v1", "v2")]
    assert ssn.preemptable(by_name(ssn, "lo"), cands) == []
    assert ssn.preemptable(by_name(ssn, "rzp"), cands) == []


# -- job callbacks ------------------------------------------------------------------------------------
def test_job_order_pipelined_starving():
    spec = cluster([("n1", "16", "64Gi")],
                   [task("a", "pj"), task("b", "nj"), task("c", "rj", node="n1")],
                   [job("pj", ann=PREEMPTABLE, minMember=1), job("nj", minMember=1), job("rj", minMember=1)])
    ssn = open_at(spec, conf({}), at(12, 0))
    pj, nj, rj = ssn.jobs["c1/pj"], ssn.jobs["c1/nj"], ssn.jobs["c1/rj"]
    assert pj.preemptable and not nj.preemptable
    assert ssn.job_order_fn(nj, pj) and not ssn.job_order_fn(pj, nj)
    assert ssn.job_starving(nj)  # a pending task, not preemptable
    assert not ssn.job_starving(pj)  # preemptable jobs never starve
    assert not ssn.job_starving(rj)  # nothing pending
    assert not ssn.job_pipelined(nj)  # tdm rejects: 0 of 1
    assert ssn.job_pipelined(rj)
