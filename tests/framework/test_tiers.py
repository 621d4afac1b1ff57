"""Each of Volcano's ways of combining plugin answers, through the session's tier walk."""

from busched.api.snapshot import ClusterSnapshot
from busched.framework import points
from busched.framework import tiers as tw
from busched.framework.config import load_config
from busched.framework.session import Session

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


def ssn():
    return Session(ClusterSnapshot(), load_config(CONF))


def test_first_decision_wins_in_tier_order():
    s = ssn()
    s.add_fn(points.JOB_ORDER, "c", lambda l, r: -1)
    assert tw.first_decision(s.hooks.callbacks(points.JOB_ORDER), 1, 2) == -1
    s.add_fn(points.JOB_ORDER, "a", lambda l, r: 1)
    assert tw.first_decision(s.hooks.callbacks(points.JOB_ORDER), 1, 2) == 1
    s.add_fn(points.JOB_ORDER, "a", lambda l, r: 0)
    assert tw.first_decision(s.hooks.callbacks(points.JOB_ORDER), 1, 2) == -1


def test_all_pass_respects_switches():
    s = ssn()
    s.add_fn(points.JOB_READY, "b", lambda j: False)  # b's enableJobReady is off: not asked
    assert s.job_ready(object())
    s.add_fn(points.JOB_READY, "c", lambda j: False)
    assert not s.job_ready(object())


def test_vote_permit_reject_abstain():
    s = ssn()
    assert s.job_pipelined(object())  # nobody votes: yes
    s.add_fn(points.JOB_PIPELINED, "a", lambda j: 0)
    s.add_fn(points.JOB_PIPELINED, "c", lambda j: -1)
    assert not s.job_pipelined(object())  # tier 1 abstains, tier 2 rejects
    s.add_fn(points.JOB_PIPELINED, "a", lambda j: 1)
    assert s.job_pipelined(object())  # tier 1 permits: tier 2 never asked
    s.add_fn(points.JOB_PIPELINED, "b", lambda j: -1)
    assert not s.job_pipelined(object())  # a reject in the same tier wins


def test_starving_first_tier_with_any():
    s = ssn()
    assert not s.job_starving(object())  # nobody: not starving
    s.add_fn(points.JOB_STARVING, "c", lambda j: True)
    assert s.job_starving(object())
    s.add_fn(points.JOB_STARVING, "a", lambda j: False)
    assert not s.job_starving(object())  # tier 1 decides


def test_victims_intersect_within_tier_first_tier_decides():
    s = ssn()
    cands = ["t1", "t2", "t3"]
    s.add_fn(points.PREEMPTABLE, "a", lambda p, c: (["t1", "t2"], 1))
    s.add_fn(points.PREEMPTABLE, "b", lambda p, c: (["t2", "t3"], 1))
    s.add_fn(points.PREEMPTABLE, "c", lambda p, c: (["t3"], 1))
    assert s.preemptable("p", cands) == ["t2"]
    s.add_fn(points.PREEMPTABLE, "b", lambda p, c: ([], 1))  # empties tier 1 -> tier 2 decides
    assert s.preemptable("p", cands) == ["t3"]
    s.add_fn(points.PREEMPTABLE, "b", lambda p, c: (["x"], 0))  # abstains: ignored
    assert s.preemptable("p", cands) == ["t1", "t2"]


def test_victim_tasks_union_first_tier_with_any():
    s = ssn()
    s.add_fn(points.VICTIM_TASKS, "a", [lambda ts: ["t1"], lambda ts: ["t2"]])
    s.add_fn(points.VICTIM_TASKS, "c", [lambda ts: ["t9"]])
    assert sorted(s.victim_tasks([])) == ["t1", "t2"]


def test_scores_sum_and_any_true():
    s = ssn()
    s.add_fn(points.NODE_ORDER, "a", lambda t, n: 1.5)
    s.add_fn(points.NODE_ORDER, "c", lambda t, n: 2.0)
    assert s.node_order_fn(None, None) == 3.5
    assert not s.overused(None)
    s.add_fn(points.OVERUSED, "c", lambda q: True)
    assert s.overused(None)
