"""build.task_info / job_info fill the objects field by field (fast): the same objects the
dataclass constructors give (the reference conversions below), field for field and in field order."""

import dataclasses

import pytest

from busched.api import build
from busched.api import objects as o
from busched.api.job import JobInfo
from busched.api.queue import PriorityClass
from busched.api.resource import Resource
from busched.api.shared import SharedResource
from busched.api.task import TASK_PRIORITY_KEY, TaskInfo, TaskStatus, status_from_phase

PCS = {"high": PriorityClass("high", 1000, "Never", False)}


def ref_task(s, pcs, default_priority=1):
    req = Resource.from_list(s.requests)
    best_effort = req.is_empty()
    req.add_scalar("pods", 1.0)
    pc = pcs.get(s.priority_class_name) if s.priority_class_name else None
    prio = s.priority if s.priority is not None else (pc.value if pc is not None else default_priority)
    if TASK_PRIORITY_KEY in s.annotations:
        try:
            prio = int(s.annotations[TASK_PRIORITY_KEY])
        except ValueError:
            pass
    status = status_from_phase(s.phase, s.node, s.deleting)
    return TaskInfo(
        uid=f"{s.namespace}-{s.name}", name=s.name, namespace=s.namespace,
        job=f"{s.namespace}/{s.job}" if s.job else "",
        resreq=req, init_resreq=req.clone(), status=status, node_name=s.node if status != TaskStatus.Pending else "",
        priority=prio, role=TaskInfo.read_role(s.annotations, s.labels),
        preemptable=TaskInfo.read_preemptable(s.annotations, s.labels), best_effort=best_effort,
        labels=dict(s.labels), annotations=dict(s.annotations), node_selector=dict(s.node_selector),
        affinity=s.affinity, tolerations=list(s.tolerations),
        topology_spread_constraints=list(s.topology_spread_constraints), host_ports=list(s.host_ports),
        scheduling_gates=list(s.scheduling_gates), preemption_policy=s.preemption_policy or (
            pc.preemption_policy if pc else ""),
        priority_class_name=s.priority_class_name, nominated_node_name=s.nominated_node_name,
        images=list(s.images), qos="BestEffort" if best_effort else "Burstable")


def ref_job(s, pcs, default_priority=0):
    pc = pcs.get(s.priority_class_name)
    return JobInfo(
        uid=f"{s.namespace}/{s.name}", name=s.name, namespace=s.namespace, queue=s.queue,
        min_available=s.min_member, task_min_available=dict(s.min_task_member),
        min_resources=Resource.from_list(s.min_resources) if s.min_resources is not None else None,
        min_resources_list=dict(s.min_resources) if s.min_resources is not None else None,
        phase=s.phase, priority_class_name=s.priority_class_name,
        priority=pc.value if pc is not None else default_priority,
        preemptable=JobInfo.read_preemptable(s.annotations, s.labels), annotations=dict(s.annotations),
        labels=dict(s.labels), network_topology=s.network_topology, subgroup_policy=list(s.sub_group_policy),
        conditions=[dict(c) for c in s.conditions])


def _plain(v):
    if isinstance(v, Resource):
        return ("Resource", v.cpu, v.memory, tuple(v.scalars.items()), v.max_task_num)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def _fields(o) -> dict:
    """An object's fields by name: its instance dict, or its slots (TaskInfo)."""
    if hasattr(o, "__dict__"):
        return o.__dict__
    return {k: getattr(o, k) for k in type(o).__slots__}


def same(a, b, spec):
    """Same fields in the same order with equal values; what one shares with the spec the other
    shares too, and no other mutable value is shared between them."""
    from_spec = {id(getattr(spec, f)) for f in spec.__struct_fields__}
    assert list(_fields(a)) == list(_fields(b)) == [f.name for f in dataclasses.fields(type(a))]
    for k, v in _fields(a).items():
        w = _fields(b)[k]
        assert _plain(v) == _plain(w), k
        # (a converted task's requests are the shared request of every task with the same ones)
        assert type(v) is type(w) or (type(v), type(w)) == (SharedResource, Resource), k
        assert (id(v) in from_spec) == (id(w) in from_spec), k
        if isinstance(v, (dict, list, Resource)) and id(v) not in from_spec:
            assert v is not w, k


TASKS = [
    o.TaskSpec(name="t0", namespace="ns", job="j", node="n1", phase="Running", requests={"cpu": "1", "memory": "4Gi"}),
    o.TaskSpec(name="t1", namespace="ns", phase="Pending", requests={}),
    o.TaskSpec(name="t2", namespace="ns", job="j", node="n1", phase="Pending", deleting=True,
               requests={"cpu": "500m", "nvidia.com/gpu": "1", "pods": "2"}, priority_class_name="high",
               labels={"volcano.sh/task-spec": "ps", "a": "b"}, annotations={TASK_PRIORITY_KEY: "7"},
               node_selector={"zone": "a"}, affinity={"nodeAffinity": {}}, tolerations=[{"key": "k"}],
               topology_spread_constraints=[{"maxSkew": 1}], host_ports=[80], scheduling_gates=["g"],
               nominated_node_name="n2", images=["img"]),
    o.TaskSpec(name="t3", namespace="ns", job="j", node="n1", phase="Succeeded", priority=5,
               annotations={"volcano.sh/preemptable": "false", TASK_PRIORITY_KEY: "x"}, preemption_policy="Never",
               requests={"cpu": 2}),
    o.TaskSpec(name="t4", namespace="ns", phase="Unknown", labels={"volcano.sh/preemptable": "maybe"},
               requests={"cpu": 2.0}),
]

JOBS = [
    o.JobSpec(name="j", namespace="ns", min_member=2, phase="Running"),
    o.JobSpec(name="k", namespace="ns", queue="q", min_member=1, min_task_member={"a": 1},
              min_resources={"cpu": "2", "memory": "1Gi"}, phase="", priority_class_name="high",
              annotations={"volcano.sh/preemptable": "true"}, labels={"x": "y"},
              network_topology={"mode": "hard", "highestTierAllowed": 1},
              sub_group_policy=[{"name": "p", "matchLabelKeys": ["r"], "minSubGroups": 2}],
              conditions=[{"type": "Scheduled", "status": "True"}]),
]


@pytest.mark.parametrize("pcs", [{}, PCS])
def test_task_info_is_the_constructors(pcs):
    for _ in range(2):  # the second time from the request memo
        for s in TASKS:
            a, b = build.task_info(s, pcs), ref_task(s, pcs)
            same(a, b, s)
            assert a.resreq is a.init_resreq


def test_task_info_shares_the_memo_read_only():
    """Tasks with the same requests hold one request, which nothing can change in place; a clone's
    are its own, to change."""
    a, b = build.task_info(TASKS[0], {}), build.task_info(TASKS[0], {})
    assert a.resreq is b.resreq is b.init_resreq
    with pytest.raises(TypeError):
        a.resreq.cpu += 1
    with pytest.raises(TypeError):
        a.resreq.add(Resource(1))
    with pytest.raises(TypeError):
        a.resreq.add_scalar("nvidia.com/gpu", 1)
    c = a.clone()
    c.resreq.cpu += 1
    c.init_resreq.add(Resource(1))
    assert type(c.resreq) is Resource and c.resreq is not c.init_resreq
    assert b.resreq.cpu == 1000 and build.task_info(TASKS[0], {}).resreq.cpu == 1000


@pytest.mark.parametrize("pcs", [{}, PCS])
def test_job_info_is_the_constructors(pcs):
    for s in JOBS:
        a, b = build.job_info(s, pcs), ref_job(s, pcs)
        same(a, b, s)
        if s.network_topology is not None:
            assert a.network_topology == s.network_topology and a.network_topology is not s.network_topology


def test_bad_requests_still_named():
    s = o.TaskSpec(name="bad", namespace="ns", requests={"cpu": "lots"})
    for _ in range(2):  # never remembered
        with pytest.raises(build.SpecError, match="task ns/bad: requests.cpu"):
            build.task_info(s, {})


@pytest.mark.parametrize("size,nt,values", [(None, None, None), (3, {"mode": "soft"}, ["7", "x"]),
                                            ("2", None, ["a"])])
def test_new_sub_job_is_the_constructors(size, nt, values):
    from busched.api import subjob

    a = subjob._new_sub_job("j/p", "j/p-7", "j", size, nt, values)
    b = subjob.SubJobInfo(gid="j/p", uid="j/p-7", job="j")
    if size is not None:
        b.min_available = int(size)
    if nt is not None:
        b.network_topology = dict(nt)
    if values and values[0].isdigit():
        b.match_index = int(values[0])
    assert list(a.__dict__.items()) == list(b.__dict__.items())
    assert nt is None or a.network_topology is not nt


def _split_parse(subject):
    """parse_state_subject as it was (split, then join): the reference."""
    from busched.bus.subjects import STATE_PREFIX, untoken

    parts = subject.split(".")
    if len(parts) < 4 or f"{parts[0]}.{parts[1]}" != STATE_PREFIX:
        return "", ""
    if "%" not in subject:
        return parts[2], "/".join(parts[3:])
    return parts[2], "/".join(untoken(p) for p in parts[3:])


@pytest.mark.parametrize("subject", [
    "busched.state.task.ns.name", "busched.state.node.n1", "busched.state.result.n1.ns.t", "busched.state.task.",
    "busched.state.task", "busched.state.", "busched.state", "busched.stateX.task.a", "other.state.task.a.b",
    "busched.state.task.n%2Es.a%20b", "busched.state.node.%00", "busched.state..a", "busched.decision.n.bind.a.b",
    "", "busched.state.task.a..b", "busched.state.hyperNode.x%25y"])
def test_parse_state_subject_as_before(subject):
    from busched.bus import subjects as S

    assert S.parse_state_subject(subject) == _split_parse(subject)


def test_request_memo_tells_numbers_from_strings():
    """1, 1.0 and True are equal keys: numeric requests are not remembered by their items (True
    is no quantity, however often 1 came before it)."""
    for _ in range(2):
        for s in (o.TaskSpec(name="a", requests={"cpu": 1}), o.TaskSpec(name="c", requests={"cpu": "1"}),
                  o.TaskSpec(name="d", requests={"cpu": 1.5})):
            same(build.task_info(s, {}), ref_task(s, {}), s)
        with pytest.raises(build.SpecError, match="task default/b: requests.cpu"):
            build.task_info(o.TaskSpec(name="b", requests={"cpu": True}), {})
