"""Statement operations change the session at once; discard undoes them exactly; commit decides."""

import copy

from busched.api.task import TaskStatus
from busched.framework.statement import Statement
from tests.helpers import cluster, session


def spec():
    return cluster(
        nodes=[("n1", "4", "8Gi"), ("n2", "4", "8Gi")],
        tasks=[
            {"name": "run1", "namespace": "ns", "job": "j1", "node": "n1", "phase": "Running",
             "requests": {"cpu": "2", "memory": "2Gi"}},
            {"name": "p1", "namespace": "ns", "job": "j2", "requests": {"cpu": "2", "memory": "2Gi"}},
            {"name": "p2", "namespace": "ns", "job": "j2", "requests": {"cpu": "3", "memory": "2Gi"}},
        ],
        jobs=[{"name": "j1", "namespace": "ns", "queue": "q1", "minMember": 1, "phase": "Running"},
              {"name": "j2", "namespace": "ns", "queue": "q1", "minMember": 2, "phase": "Inqueue"}],
    )


def res(r):
    return {k: v for k, v in r.to_dict().items() if v}  # a scalar at 0 is the same as an absent one


def state(s):
    nodes = {n.name: (res(n.idle), res(n.used), res(n.releasing), res(n.pipelined),
                      sorted((t.uid, t.status) for t in n.tasks.values())) for n in s.node_list}
    jobs = {j.uid: (sorted((t.uid, t.status, t.node_name) for t in j.tasks.values()), res(j.allocated))
            for j in s.jobs.values()}
    return copy.deepcopy((nodes, jobs))


def test_discard_leaves_no_trace():
    s = session(spec())
    before = state(s)
    j1, j2 = s.jobs["ns/j1"], s.jobs["ns/j2"]
    stmt = Statement(s)
    stmt.evict(j1.tasks["ns-run1"], "preempted")
    stmt.allocate(j2.tasks["ns-p1"], "n2")
    stmt.pipeline(j2.tasks["ns-p2"], "n1")
    assert s.nodes["n1"].releasing.cpu == 2000 and s.nodes["n1"].pipelined.cpu == 3000
    assert j2.tasks["ns-p1"].status == TaskStatus.Allocated
    assert state(s) != before
    stmt.discard()
    assert state(s) == before
    assert not s.decisions


def test_commit_binds_allocated_and_evicts():
    s = session(spec())
    j1, j2 = s.jobs["ns/j1"], s.jobs["ns/j2"]
    stmt = Statement(s)
    stmt.evict(j1.tasks["ns-run1"], "preempted")
    stmt.allocate(j2.tasks["ns-p1"], "n2")
    stmt.pipeline(j2.tasks["ns-p2"], "n1")
    stmt.commit()
    kinds = sorted((d.kind, d.task, d.node) for d in s.decisions)
    assert kinds == [("bind", "ns/p1", "n2"), ("evict", "ns/run1", "n1")]
    assert j2.tasks["ns-p1"].status == TaskStatus.Binding
    assert j2.tasks["ns-p2"].status == TaskStatus.Pipelined  # waits for the released resources
    assert j1.tasks["ns-run1"].status == TaskStatus.Releasing
    n1 = s.nodes["n1"]
    # releasing still counts as used; future idle = idle + releasing - pipelined
    assert n1.used.cpu == 2000 and n1.future_idle().cpu == 4000 - 2000 + 2000 - 3000


def test_node_accounting_invariant_after_mixed_operations():
    s = session(spec())
    j2 = s.jobs["ns/j2"]
    stmt = Statement(s)
    stmt.allocate(j2.tasks["ns-p1"], "n1")
    stmt.discard()
    stmt.allocate(j2.tasks["ns-p1"], "n2")
    for n in s.node_list:
        total = n.idle.clone().add(n.used)
        assert total.cpu == n.allocatable.cpu and total.memory == n.allocatable.memory
