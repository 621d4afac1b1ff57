"""task-topology: annotations, buckets, task order, node order, and placement through allocate."""

from __future__ import annotations

from typing import Any

import pytest

from busched.actions import ACTIONS
from busched.api.job import JobInfo
from busched.api.task import TaskStatus
from busched.framework.session import Session
from busched.framework.statement import Statement
from busched.plugins.task_topology import TaskTopology, TopologyError, read_topology
from tests.helpers import cluster, session

AFF, ANTI, ORDER = ("volcano.sh/task-topology-affinity", "volcano.sh/task-topology-anti-affinity",
                    "volcano.sh/task-topology-task-order")


def conf(args: str = "", actions: str = "") -> str:
    return (f"actions: \"{actions}\"\ntiers:\n- plugins:\n  - name: gang\n  - name: task-topology\n{args}")


def task(role: str, i: int, node: str = "", cpu: str = "1", label_only: bool = False) -> dict[str, Any]:
    meta = {"volcano.sh/task-spec": role} if role else {}
    t: dict[str, Any] = {"name": f"job1-{role or 'x'}-{i}", "job": "job1", "requests": {"cpu": cpu, "memory": "1Gi"},
                         "labels": meta if label_only else {}, "annotations": {} if label_only else meta}
    if node:
        t.update(node=node, phase="Running")
    return t


def job(ann: dict[str, str], **kw: Any) -> dict[str, Any]:
    return {"name": "job1", "queue": "q1", "annotations": ann, **kw}


PS_WORKER = {AFF: "ps,worker", ANTI: "ps"}


def ps_worker_spec(nodes=(("n1", "4", "16Gi"), ("n2", "4", "16Gi")), ann=PS_WORKER, extra=()):
    tasks = [task("ps", 0), task("ps", 1)] + [task("worker", i) for i in range(4)] + list(extra)
    return cluster(list(nodes), tasks, [job(ann)])


def names(tasks) -> list[str]:
    return [t.name for t in tasks]


def by_name(ssn: Session, name: str):
    return next(t for j in ssn.jobs.values() for t in j.tasks.values() if t.name == name)


def buckets(ssn: Session) -> list[list[str]]:
    m = ssn.plugins["task-topology"].managers["default/job1"]
    return [sorted(t.name for t in b.tasks.values()) for b in m.buckets]


# -- annotations ---------------------------------------------------------------------------------
def fake_job(roles: list[str], ann: dict[str, str]) -> JobInfo:
    spec = cluster([("n1", "1", "1Gi")], [task(r, i) for i, r in enumerate(roles)], [job(ann)])
    return session(spec).jobs["default/job1"]


def test_read_topology_splits_groups_and_order():
    roles = ["ps", "ps", "worker", "worker", "chief", "evaluator"]
    ann = {AFF: "ps,worker;ps,chief", ANTI: "ps;worker,chief", ORDER: "ps,worker,chief,evaluator"}
    assert read_topology(fake_job(roles, ann)) == TaskTopology(
        [["ps", "worker"], ["ps", "chief"]], [["ps"], ["worker", "chief"]], ["ps", "worker", "chief", "evaluator"])
    assert read_topology(fake_job(roles, {})) is None
    # empty names are skipped by the check
    assert read_topology(fake_job(roles, {ORDER: "ps,worker,,"})).task_order == ["ps", "worker", "", ""]


@pytest.mark.parametrize("ann,msg", [
    ({AFF: "$%GF$^trtqwrg^"}, "task $%GF$^trtqwrg^ do not exist in job <default/job1>"),
    ({AFF: "ps,worker", ORDER: "ps,worker,chief"}, "task chief do not exist in job <default/job1>"),
    ({ANTI: "ps,ps"}, "task ps is duplicate in job <default/job1>"),
])
def test_read_topology_rejects_unknown_or_duplicate_roles(ann, msg):
    with pytest.raises(TopologyError, match=msg.replace("$", r"\$").replace("^", r"\^")):
        read_topology(fake_job(["ps", "worker"], ann))


def test_invalid_topology_leaves_job_alone():
    ssn = session(ps_worker_spec(ann={AFF: "ps,nobody"}), conf())
    assert ssn.plugins["task-topology"].managers == {}


def test_roles_from_labels_pass_the_check_but_buckets_need_the_annotation():
    spec = cluster([("n1", "4", "16Gi")], [task("ps", 0, label_only=True), task("ps", 1, label_only=True)],
                   [job({ANTI: "ps"})])
    ssn = session(spec, conf())
    m = ssn.plugins["task-topology"].managers["default/job1"]  # the role check reads labels too
    assert m.buckets == []  # ... but Volcano's bucket key is the pod annotation only


# -- buckets and task order ------------------------------------------------------------------------
def test_buckets_split_self_anti_affine_tasks_and_balance_affine_ones():
    ssn = session(ps_worker_spec(), conf())
    # ps before workers (self anti-affinity ranks highest), by name; each ps opens a bucket,
    # workers go to the bucket they like with the least requested so far
    assert buckets(ssn) == [["job1-ps-0", "job1-worker-0", "job1-worker-2"],
                            ["job1-ps-1", "job1-worker-1", "job1-worker-3"]]
    m = ssn.plugins["task-topology"].managers["default/job1"]
    assert m.bucket_max_size == 3


def test_task_order_bucket_members_first_then_bucket_index_then_affinity():
    ssn = session(ps_worker_spec(extra=[task("eval", 0), task("", 0)]), conf())
    job1 = ssn.jobs["default/job1"]
    assert names(ssn.sort_tasks(job1.tasks.values())) == [
        "job1-ps-0", "job1-worker-0", "job1-worker-2", "job1-ps-1", "job1-worker-1", "job1-worker-3",
        "job1-eval-0", "job1-x-0"]


def test_user_task_order_ranks_above_affinity_kind():
    ann = {AFF: "ps,worker", ANTI: "ps", ORDER: "worker,ps"}
    ssn = session(ps_worker_spec(ann=ann), conf())
    # workers now lead the bucket sort: they gather in one bucket, and the ps like 4 workers
    # more than they dislike each other, so everyone shares it
    assert buckets(ssn) == [["job1-ps-0", "job1-ps-1", "job1-worker-0", "job1-worker-1", "job1-worker-2",
                             "job1-worker-3"]]
    # within the bucket, workers go before ps
    assert names(ssn.sort_tasks(ssn.jobs["default/job1"].tasks.values())) == [
        "job1-worker-0", "job1-worker-1", "job1-worker-2", "job1-worker-3", "job1-ps-0", "job1-ps-1"]


def test_bigger_bucket_first():
    # three ps (self anti-affine) and one worker: the worker joins bucket 0, which is then the biggest
    spec = cluster([("n1", "4", "16Gi")], [task("ps", 0), task("ps", 1), task("ps", 2), task("worker", 0)],
                   [job(PS_WORKER)])
    ssn = session(spec, conf())
    assert buckets(ssn) == [["job1-ps-0", "job1-worker-0"], ["job1-ps-1"], ["job1-ps-2"]]
    tt = ssn.plugins["task-topology"]
    assert tt.task_order(by_name(ssn, "job1-ps-2"), by_name(ssn, "job1-ps-1")) == 1  # older bucket first
    assert tt.task_order(by_name(ssn, "job1-ps-1"), by_name(ssn, "job1-worker-0")) == 1  # bigger bucket first


def test_bound_tasks_seed_buckets_per_node():
    spec = cluster([("n1", "4", "16Gi"), ("n2", "4", "16Gi")],
                   [task("ps", 0, node="n2"), task("ps", 1, node="n1"), task("worker", 0), task("worker", 1)],
                   [job(PS_WORKER)])
    ssn = session(spec, conf())
    m = ssn.plugins["task-topology"].managers["default/job1"]
    # bound tasks first, by node name: n1's bucket is 0
    assert [b.node for b in m.buckets] == [{"n1": 1}, {"n2": 1}]
    assert buckets(ssn) == [["job1-worker-0"], ["job1-worker-1"]]


def test_job_without_pending_tasks_gets_no_manager():
    spec = cluster([("n1", "4", "16Gi")], [task("ps", 0, node="n1"), task("worker", 0, node="n1")],
                   [job(PS_WORKER)])
    assert session(spec, conf()).plugins["task-topology"].managers == {}


# -- node order ----------------------------------------------------------------------------------------
def test_node_order_counts_bucket_and_fits_it_to_the_node():
    spec = ps_worker_spec(nodes=(("big", "8", "64Gi"), ("two", "2", "64Gi"), ("tiny", "500m", "64Gi")))
    ssn = session(spec, conf())
    ps0 = by_name(ssn, "job1-ps-0")
    scores = {n.name: ssn.node_order_fn(ps0, n) for n in ssn.node_list}
    # big: 3 bucket tasks, scaled by the largest bucket (3) to 100; two: one other task must be left out;
    # tiny: the task itself does not fit
    assert scores == {"big": 100.0, "two": pytest.approx(200 / 3), "tiny": 0.0}
    assert ssn.node_order_fn(by_name(ssn, "job1-worker-0"), ssn.nodes["big"]) == 100.0


def test_node_order_weight_and_out_of_bucket_task():
    spec = ps_worker_spec(extra=[task("eval", 0)])
    ssn = session(spec, conf("    arguments: {task-topology.weight: 2}\n"))
    assert ssn.node_order_fn(by_name(ssn, "job1-ps-0"), ssn.nodes["n1"]) == 200.0
    assert ssn.node_order_fn(by_name(ssn, "job1-eval-0"), ssn.nodes["n1"]) == 0.0


def test_allocation_moves_task_to_node_and_anti_affinity_repels():
    ssn = session(ps_worker_spec(), conf())
    ps0, ps1, w0 = by_name(ssn, "job1-ps-0"), by_name(ssn, "job1-ps-1"), by_name(ssn, "job1-worker-0")
    stmt = Statement(ssn)
    stmt.allocate(ps0, "n1")
    m = ssn.plugins["task-topology"].managers["default/job1"]
    assert m.buckets[0].node == {"n1": 1} and ps0.uid not in m.buckets[0].tasks
    assert m.node_task_set == {"n1": {"ps": 1}}
    # the worker follows its ps: bound 1 + 2 unplaced on n1, only 2 elsewhere
    assert ssn.node_order_fn(w0, ssn.nodes["n1"]) == 100.0
    assert ssn.node_order_fn(w0, ssn.nodes["n2"]) == pytest.approx(200 / 3)
    # the other ps is repelled from n1 by self anti-affinity
    assert ssn.node_order_fn(ps1, ssn.nodes["n1"]) == pytest.approx(200 / 3)
    assert ssn.node_order_fn(ps1, ssn.nodes["n2"]) == 100.0
    # like Volcano, a discarded allocation is not taken back
    stmt.discard()
    assert m.node_task_set == {"n1": {"ps": 1}}


def test_allocate_places_each_bucket_on_its_own_node():
    ssn = session(ps_worker_spec(), conf(actions="allocate"))
    ACTIONS["allocate"]().execute(ssn)
    placed = {d.task.split("/")[1]: d.node for d in ssn.decisions if d.kind == "bind"}
    assert len(placed) == 6
    a, b = placed["job1-ps-0"], placed["job1-ps-1"]
    assert a != b
    assert placed["job1-worker-0"] == placed["job1-worker-2"] == a
    assert placed["job1-worker-1"] == placed["job1-worker-3"] == b
    assert all(t.status == TaskStatus.Binding for t in ssn.jobs["default/job1"].tasks.values())


def test_session_close_drops_managers():
    from busched.framework.cycle import close_session

    ssn = session(ps_worker_spec(), conf())
    plugin = ssn.plugins["task-topology"]
    assert plugin.managers
    close_session(ssn)
    assert plugin.managers == {}
