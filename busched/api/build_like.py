"""Conversions copied from a template's: a restart's replicas (`busched.scheduler.checkpoint_shared`).

A big cluster's tasks are mostly replicas and its jobs of a few shapes: specs that differ only in a task's
name, job, node and phase, or a job's name.  `task_info_like` and `job_info_like` give what `build.task_info`
and `build.job_info` give for such a spec, from the conversion of its template: the template's fields, the
differing ones' own, and every container the object owns built afresh as the conversion builds it.  Tests
(tests/scheduler/test_checkpoint_shared.py) check both give the same object, every field.
"""

from __future__ import annotations

from busched.api import build
from busched.api import objects as o
from busched.api.job import JobInfo
from busched.api.shared import NO_LIST, NO_MAP, one_name
from busched.api.task import TaskInfo, TaskStatus, status_from_phase

__all__ = ["task_info_like", "job_info_like", "task_infos_like", "job_infos_like"]

_new = object.__new__


def task_info_like(template: TaskInfo, s: o.TaskSpec) -> TaskInfo:
    """``task_info(s)`` when ``template`` is the conversion of a spec that differs from ``s`` only in name, job,
    node and phase (a restart's replicas: `busched.scheduler.checkpoint_shared`), ``s.phase`` is one of
    `TASK_PHASES` and the spec has no affinity, tolerations, spread constraints, host ports, scheduling gates
    or images (their conversions are built per task): the template's fields, those four's own, and the label
    maps copied as `task_info` copies them.  Tests check both give the same object."""
    t = template.copy()
    ns, name = s.namespace, s.name
    t.uid = f"{ns}-{name}"
    t.name = name
    t.job = one_name(f"{ns}/{s.job}") if s.job else ""
    status = template.status if s.status else status_from_phase(s.phase, s.node, s.deleting)
    t.status = status
    t.node_name = s.node if status != TaskStatus.Pending else ""
    if s.labels:
        t.labels = dict(s.labels)
    if s.annotations:
        t.annotations = dict(s.annotations)
    if s.node_selector:
        t.node_selector = dict(s.node_selector)
    return t


def job_info_like(template: JobInfo, s: o.JobSpec) -> JobInfo:
    """``job_info(s, {})`` when ``template`` is that of a spec that differs from ``s`` only in its name (a restart's
    jobs of one shape: `busched.scheduler.checkpoint_shared`): the template's fields, the name's own, and every
    container the job fills or changes its own, as `job_info` builds them.  A spec with minimum resources, a
    network topology, subgroup policies or conditions (each converted per job) is converted by `job_info`.  Tests
    check both give the same object."""
    if s.min_resources is not None or s.network_topology is not None or s.sub_group_policy or s.conditions:
        return build.job_info(s, {})
    j = _new(JobInfo)
    j.uid = f"{s.namespace}/{s.name}"
    j.name = s.name
    j.namespace = template.namespace
    j.queue = template.queue
    j.min_available = template.min_available
    j.task_min_available = dict(s.min_task_member) if s.min_task_member else NO_MAP
    j.min_resources = j.min_resources_list = None
    j.phase = template.phase
    j.priority_class_name = template.priority_class_name
    j.priority = template.priority
    j.preemptable = template.preemptable
    j.annotations = dict(s.annotations) if s.annotations else NO_MAP
    j.labels = dict(s.labels) if s.labels else NO_MAP
    j.network_topology = None
    j.subgroup_policy = NO_LIST
    j.conditions = NO_LIST
    j.has_podgroup = True
    j.created = template.created
    build.empty_state(j)
    return j


def task_infos_like(template: TaskInfo, specs: list[o.TaskSpec]) -> list[TaskInfo]:
    """``[task_info_like(template, s) for s in specs]`` for a run of one template's replicas (a restart's block:
    `busched.scheduler.restore_blocks`), with what depends on the template alone read once: its status or the one
    each phase and placement gives, and which label maps are copied.  Tests check both give the same objects."""
    if not specs:
        return []
    first = specs[0]
    ns, copy, fixed = first.namespace, template.copy, template.status if first.status else None
    labels, annotations, selector = first.labels, first.annotations, first.node_selector
    deleting, pending = first.deleting, TaskStatus.Pending
    statuses: dict[tuple[str, bool], TaskStatus] = {}
    job_keys: dict[str, str] = {"": ""}  # (a job's key once per job: replicas of one job come together)
    out: list[TaskInfo] = []
    add = out.append
    for s in specs:
        t = copy()
        name, node = s.name, s.node
        t.uid = f"{ns}-{name}"
        t.name = name
        job = s.job
        key = job_keys.get(job)
        if key is None:
            key = job_keys[job] = one_name(f"{ns}/{job}")
        t.job = key
        status = fixed
        if status is None:
            at = (s.phase, not node)
            status = statuses.get(at)
            if status is None:
                status = statuses[at] = status_from_phase(s.phase, node, deleting)
        t.status = status
        t.node_name = node if status != pending else ""
        if labels:
            t.labels = dict(labels)
        if annotations:
            t.annotations = dict(annotations)
        if selector:
            t.node_selector = dict(selector)
        add(t)
    return out


def job_infos_like(template: JobInfo, specs: list[o.JobSpec]) -> list[JobInfo]:
    """``[job_info_like(template, s) for s in specs]`` for a run of one template's jobs (as `task_infos_like`).
    Tests check both give the same objects."""
    if not specs:
        return []
    first = specs[0]
    if (first.min_resources is not None or first.network_topology is not None or first.sub_group_policy
            or first.conditions or first.min_task_member or first.annotations or first.labels):
        return [job_info_like(template, s) for s in specs]
    ns, queue, min_available = template.namespace, template.queue, template.min_available
    phase, pc_name, priority = template.phase, template.priority_class_name, template.priority
    preemptable, created, empty_state = template.preemptable, template.created, build.empty_state
    out: list[JobInfo] = []
    add = out.append
    for s in specs:
        j = _new(JobInfo)
        name = s.name
        j.uid = f"{ns}/{name}"
        j.name = name
        j.namespace = ns
        j.queue = queue
        j.min_available = min_available
        j.task_min_available = NO_MAP
        j.min_resources = j.min_resources_list = None
        j.phase = phase
        j.priority_class_name = pc_name
        j.priority = priority
        j.preemptable = preemptable
        j.annotations = NO_MAP
        j.labels = NO_MAP
        j.network_topology = None
        j.subgroup_policy = NO_LIST
        j.conditions = NO_LIST
        j.has_podgroup = True
        j.created = created
        empty_state(j)
        add(j)
    return out
