"""task-topology: place a job's tasks by affinity between its task roles.

A job states, in podgroup annotations, which of its task roles (the pods'
``volcano.sh/task-spec`` annotation) like or dislike sharing a node::

    volcano.sh/task-topology-affinity: "ps,worker;chief"      # groups ';', roles in a group ','
    volcano.sh/task-topology-anti-affinity: "ps;evaluator"
    volcano.sh/task-topology-task-order: "ps,worker"

A group of one role is self (anti-)affinity, a larger group inter-role
(anti-)affinity.  Every role named must be a role of the job and appear once per
group, else the job's topology is ignored.

At session open, for each job with Pending tasks and a topology, the tasks of
roles that have an (anti-)affinity are put in *buckets*: bound tasks first, one
bucket per node; then the others, in affinity order, each into the bucket it
likes most (fewest requested resources on ties), or a new bucket when it dislikes
them all.  Then:

- task order: tasks in a bucket before tasks outside; within a job, bigger
  buckets first, then older buckets; within a bucket, by the user's task order,
  then by affinity kind (self anti-affinity > inter affinity > self affinity >
  inter anti-affinity).
- node order: for a task in a bucket that could fit the node (idle + releasing),
  the bucket's tasks bound to that node, minus the anti-affine tasks placed
  there this session, plus the bucket's unplaced tasks, minus one per task that
  must be left out for the bucket's requests to fit; times
  ``task-topology.weight`` (default 1), scaled to 100 by the job's largest bucket.
- every allocation (or pipeline) moves the task out of its bucket's pending
  set onto the node.  Like Volcano, a discarded allocation is not undone.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from busched.api.job import JobInfo
from busched.api.node import NodeInfo
from busched.api.resource import ZERO, Resource
from busched.api.task import TASK_SPEC_KEY, TaskInfo, TaskStatus
from busched.framework import points
from busched.framework.arguments import Arguments
from busched.framework.session import EventHandler, Session

__all__ = ["TaskTopologyPlugin", "JobManager", "Bucket", "TaskTopology", "read_topology", "TopologyError"]

WEIGHT_ARG = "task-topology.weight"
AFFINITY_KEY = "volcano.sh/task-topology-affinity"
ANTI_AFFINITY_KEY = "volcano.sh/task-topology-anti-affinity"
TASK_ORDER_KEY = "volcano.sh/task-topology-task-order"
MAX_NODE_SCORE = 100

SELF_ANTI_AFFINITY, INTER_AFFINITY, SELF_AFFINITY, INTER_ANTI_AFFINITY = 4, 3, 2, 1  # higher goes first


class TopologyError(ValueError):
    pass


@dataclass
class TaskTopology:
    affinity: list[list[str]] | None = None
    anti_affinity: list[list[str]] | None = None
    task_order: list[str] | None = None


def _task_name(task: TaskInfo) -> str:
    """Buckets know a task by its pod's task-spec annotation (not the label)."""
    return task.annotations.get(TASK_SPEC_KEY, "")


def _check(job: JobInfo, groups: list[list[str]]) -> None:
    roles = {t.role for t in job.tasks.values()}
    for group in groups:
        seen: set[str] = set()
        for name in group:
            if not name:
                continue
            if name not in roles:
                raise TopologyError(f"task {name} do not exist in job <{job.namespace}/{job.name}>")
            if name in seen:
                raise TopologyError(f"task {name} is duplicate in job <{job.namespace}/{job.name}>")
            seen.add(name)


def read_topology(job: JobInfo) -> TaskTopology | None:
    """The job's topology from its annotations; None without any; TopologyError when invalid."""
    ann = job.annotations
    if not (AFFINITY_KEY in ann or ANTI_AFFINITY_KEY in ann or TASK_ORDER_KEY in ann):
        return None
    topo = TaskTopology()
    if AFFINITY_KEY in ann:
        topo.affinity = [g.split(",") for g in ann[AFFINITY_KEY].split(";")]
        _check(job, topo.affinity)
    if ANTI_AFFINITY_KEY in ann:
        topo.anti_affinity = [g.split(",") for g in ann[ANTI_AFFINITY_KEY].split(";")]
        _check(job, topo.anti_affinity)
    if TASK_ORDER_KEY in ann:
        topo.task_order = ann[TASK_ORDER_KEY].split(",")
        _check(job, [topo.task_order])
    return topo


@dataclass(eq=False)
class Bucket:
    index: int
    tasks: dict[str, TaskInfo] = field(default_factory=dict)  # unplaced tasks by uid
    task_name_set: dict[str, int] = field(default_factory=dict)
    req_score: float = 0.0  # 1 milli-cpu = 1 MiB = one unit of any scalar
    request: Resource = field(default_factory=Resource)
    bound_task: int = 0
    node: dict[str, int] = field(default_factory=dict)  # node -> tasks of this bucket on it

    def _account(self, req: Resource, sign: int) -> None:
        score = req.cpu + req.memory / 1024 / 1024 + sum(req.scalars.values())
        self.req_score += sign * score
        if sign > 0:
            self.request.add(req)
        else:
            self.request.sub(req)

    def add_task(self, name: str, task: TaskInfo) -> None:
        self.task_name_set[name] = self.task_name_set.get(name, 0) + 1
        if task.node_name:
            self.node[task.node_name] = self.node.get(task.node_name, 0) + 1
            self.bound_task += 1
            return
        self.tasks[task.uid] = task
        self._account(task.resreq, +1)

    def task_bound(self, task: TaskInfo) -> None:
        self.node[task.node_name] = self.node.get(task.node_name, 0) + 1
        self.bound_task += 1
        self.tasks.pop(task.uid, None)
        self._account(task.resreq, -1)


def _add(m: dict[str, set[str]], a: str, b: str) -> None:
    m.setdefault(a, set()).add(b)


class JobManager:
    """One job's affinity tables and buckets."""

    def __init__(self, job_uid: str) -> None:
        self.job_uid = job_uid
        self.buckets: list[Bucket] = []
        self.pod_in_bucket: dict[str, int | None] = {}  # task uid -> bucket index (None: out of bucket)
        self.pod_in_task: dict[str, str] = {}
        self.priority: dict[str, int] = {}  # task name -> strongest kind of topology it has
        self.order: dict[str, int] = {}  # user task order: higher goes first
        self.inter_affinity: dict[str, set[str]] = {}
        self.self_affinity: set[str] = set()
        self.inter_anti_affinity: dict[str, set[str]] = {}
        self.self_anti_affinity: set[str] = set()
        self.bucket_max_size = 0
        self.node_task_set: dict[str, dict[str, int]] = {}  # node -> task name -> placed this session

    def _mark(self, name: str, kind: int) -> None:
        if kind > self.priority.get(name, 0):
            self.priority[name] = kind

    def apply(self, topo: TaskTopology) -> None:
        for groups, self_set, inter, self_kind, inter_kind in (
                (topo.affinity, self.self_affinity, self.inter_affinity, SELF_AFFINITY, INTER_AFFINITY),
                (topo.anti_affinity, self.self_anti_affinity, self.inter_anti_affinity, SELF_ANTI_AFFINITY,
                 INTER_ANTI_AFFINITY)):
            for group in groups or []:
                if len(group) == 1:
                    self_set.add(group[0])
                    self._mark(group[0], self_kind)
                    continue
                for i, src in enumerate(group):
                    for dst in group[:i]:
                        _add(inter, src, dst)
                        _add(inter, dst, src)
                    self._mark(src, inter_kind)
        order = topo.task_order or []
        for i, name in enumerate(order):
            self.order[name] = len(order) - i

    def affinity_order(self, l: TaskInfo, r: TaskInfo) -> int:
        """-1 when l ranks below r, 1 above, 0 equal (same task name or same settings)."""
        ln, rn = self.pod_in_task.get(l.uid, ""), self.pod_in_task.get(r.uid, "")
        if ln == rn:
            return 0
        for table in (self.order, self.priority):
            lv, rv = table.get(ln, 0), table.get(rn, 0)
            if lv != rv:
                return 1 if lv > rv else -1
        return 0

    def set_affinity(self, name: str, names: dict[str, int], only_anti: bool) -> int:
        """How much a task of ``name`` likes a set of task names (count each), dislikes negative."""
        score = 0
        if not name:
            return score
        for other, count in names.items():
            same = other == name
            if not only_anti:
                liked = name in self.self_affinity if same else other in self.inter_affinity.get(name, ())
                if liked:
                    score += count
            disliked = name in self.self_anti_affinity if same else other in self.inter_anti_affinity.get(name, ())
            if disliked:
                score -= count
        return score

    def _new_bucket(self) -> Bucket:
        b = Bucket(index=len(self.buckets))
        self.buckets.append(b)
        return b

    def _add_to_bucket(self, b: Bucket, name: str, task: TaskInfo) -> None:
        self.pod_in_bucket[task.uid] = b.index
        b.add_task(name, task)
        self.bucket_max_size = max(self.bucket_max_size, len(b.tasks) + b.bound_task)

    def construct(self, tasks: Mapping[str, TaskInfo]) -> None:
        members = []
        for t in tasks.values():
            name = _task_name(t)
            if not name or name not in self.priority:
                self.pod_in_bucket[t.uid] = None
                continue
            self.pod_in_task[t.uid] = name
            members.append(t)

        def first(l: TaskInfo, r: TaskInfo) -> int:
            # bound tasks by node name, then by affinity order (strongest first), then by name
            if l.node_name or r.node_name:
                if bool(l.node_name) != bool(r.node_name):
                    return -1 if l.node_name else 1
                return (l.node_name > r.node_name) - (l.node_name < r.node_name)
            c = self.affinity_order(l, r)
            if c:
                return -c
            return (l.name > r.name) - (l.name < r.name)

        members.sort(key=functools.cmp_to_key(first))
        by_node: dict[str, Bucket] = {}
        for t in members:
            name = _task_name(t)
            chosen: Bucket | None = None
            best = -(2**31)
            if t.node_name:
                best = 0
                chosen = by_node.get(t.node_name)
            else:
                for b in self.buckets:
                    aff = self.set_affinity(name, b.task_name_set, False)
                    if aff > best:
                        best, chosen = aff, b
                    elif aff == best and chosen is not None and b.req_score < chosen.req_score:
                        chosen = b
            if best < 0 or chosen is None:
                chosen = self._new_bucket()
                if t.node_name:
                    by_node[t.node_name] = chosen
            self._add_to_bucket(chosen, name, t)

    def bucket_of(self, task: TaskInfo) -> Bucket | None:
        i = self.pod_in_bucket.get(task.uid)
        return None if i is None else self.buckets[i]

    def task_bound(self, task: TaskInfo) -> None:
        name = _task_name(task)
        if name:
            s = self.node_task_set.setdefault(task.node_name, {})
            s[name] = s.get(name, 0) + 1
        b = self.bucket_of(task)
        if b is not None:
            b.task_bound(task)


class TaskTopologyPlugin:
    name = "task-topology"
    reads_arguments = (WEIGHT_ARG,)  # every argument it reads (busched.framework.arguments)
    reads_clock = False

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        self.weight = Arguments.of(arguments).get_int(WEIGHT_ARG, 1)
        self.managers: dict[str, JobManager] = {}

    def _init_buckets(self, ssn: Session) -> None:
        for uid, job in ssn.jobs.items():
            if not job.count(TaskStatus.Pending):
                continue
            try:
                topo = read_topology(job)
            except TopologyError:
                continue
            if topo is None:
                continue
            m = JobManager(uid)
            m.apply(topo)
            m.construct(job.tasks)
            self.managers[uid] = m

    def task_order(self, l: TaskInfo, r: TaskInfo) -> int:
        lm, rm = self.managers.get(l.job), self.managers.get(r.job)
        if lm is None or rm is None:
            return 0
        lb, rb = lm.bucket_of(l), rm.bucket_of(r)
        if (lb is None) != (rb is None):
            return -1 if lb is not None else 1
        if l.job != r.job or lb is None or rb is None:
            return 0
        if len(lb.tasks) != len(rb.tasks):
            return -1 if len(lb.tasks) > len(rb.tasks) else 1
        if lb.index == rb.index:
            return -lm.affinity_order(l, r)
        return -1 if lb.index < rb.index else 1

    def bucket_score(self, task: TaskInfo, node: NodeInfo) -> tuple[int, JobManager | None]:
        room = node.idle.clone().add(node.releasing)
        if room.less_partly(task.resreq, ZERO):
            return 0, None
        m = self.managers.get(task.job)
        if m is None:
            return 0, None
        b = m.bucket_of(task)
        if b is None:
            return 0, m
        score = b.node.get(node.name, 0)
        placed = m.node_task_set.get(node.name)
        if placed:
            aff = m.set_affinity(_task_name(task), placed, True)
            if aff < 0:
                score += aff
        score += len(b.tasks)
        if b.request.less_equal(room, ZERO):
            return score, m
        remains = b.request.clone()
        for uid, other in b.tasks.items():  # leave bucket tasks out until the rest fits
            if uid == task.uid:
                continue
            remains.sub(other.resreq)
            score -= 1
            if remains.less_equal(room, ZERO):
                break
        return score, m

    def node_order(self, task: TaskInfo, node: NodeInfo) -> float:
        score, m = self.bucket_score(task, node)
        f = float(score * self.weight)
        if m is not None and m.bucket_max_size:
            f = f * MAX_NODE_SCORE / m.bucket_max_size
        return f

    def _allocated(self, task: TaskInfo) -> None:
        m = self.managers.get(task.job)
        if m is not None:
            m.task_bound(task)

    def on_session_open(self, ssn: Session) -> None:
        self._init_buckets(ssn)
        ssn.add_fn(points.TASK_ORDER, self.name, self.task_order)
        ssn.add_fn(points.NODE_ORDER, self.name, self.node_order)
        ssn.add_event_handler(EventHandler(allocate=self._allocated))

    def on_session_close(self, ssn: Session) -> None:
        self.managers = {}
