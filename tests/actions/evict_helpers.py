"""Builders shared by the eviction-action tests (preempt, reclaim, the property test)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import msgspec

from busched.api.objects import ClusterSpec
from busched.builtin import open_session
from busched.cache.cache import Cache
from busched.framework.config import load_config
from busched.framework.session import Session
from busched.plugins import PLUGINS

ALL_OFF = {
    "enableJobOrder": False, "enableHierarchy": False, "enableJobReady": False, "enableJobPipelined": False,
    "enableTaskOrder": False, "enablePreemptable": False, "enableReclaimable": False, "enablePreemptive": False,
    "enableQueueOrder": False, "enabledClusterOrder": False, "enablePredicate": False, "enableBestNode": False,
    "enableNodeOrder": False, "enableTargetJob": False, "enableReservedNodes": False, "enableJobEnqueued": False,
    "enabledVictim": False, "enableJobStarving": False, "enabledOverused": False, "enabledAllocatable": False,
    "enabledHyperNodeOrder": False, "enabledSubJobReady": False, "enabledSubJobPipelined": False,
    "enabledSubJobOrder": False, "enabledHyperNodeGradient": False,
}

# The preempt tier of Volcano's preempt_test.go (switches not named there are off).
PREEMPT_TIER = [
    {"name": "conformance", "enablePreemptable": True},
    {"name": "gang", "enablePreemptable": True, "enableJobPipelined": True, "enableJobStarving": True},
    {"name": "priority", "enableTaskOrder": True, "enableJobOrder": True, "enablePreemptable": True,
     "enableJobPipelined": True, "enableJobStarving": True},
]

RECLAIM_TIER = [
    {"name": "conformance", "enableReclaimable": True},
    {"name": "gang", "enableReclaimable": True, "enableJobStarving": True},
    {"name": "proportion", "enableReclaimable": True, "enablePreemptive": True, "enableQueueOrder": True},
    {"name": "priority", "enableJobOrder": True, "enableTaskOrder": True},
]


def config(actions: str, tier: list[dict[str, Any]], arguments: Mapping[str, Mapping[str, Any]] | None = None) -> Any:
    plugins = []
    for p in tier:
        q = dict(ALL_OFF)
        q.update(p)
        plugins.append(q)
    doc: dict[str, Any] = {"actions": actions, "tiers": [{"plugins": plugins}]}
    if arguments:
        doc["configurations"] = [{"name": k, "arguments": dict(v)} for k, v in arguments.items()]
    return load_config(msgspec.yaml.encode(doc))


def spec(nodes: list[dict[str, Any]], tasks: list[dict[str, Any]], jobs: list[dict[str, Any]],
         queues: list[dict[str, Any]] | None = None, priority_classes: list[dict[str, Any]] | None = None,
         ) -> ClusterSpec:
    return msgspec.convert({
        "nodes": nodes, "tasks": tasks, "jobs": jobs,
        "queues": queues if queues is not None else [{"name": "q1"}],
        "priorityClasses": priority_classes or [],
    }, ClusterSpec)


def node(name: str, cpu: str, memory: str = "100Gi", pods: int = 110, **kw: Any) -> dict[str, Any]:
    return {"name": name, "allocatable": {"cpu": cpu, "memory": memory, "pods": pods}, **kw}


def running(name: str, job: str, node_name: str, cpu: str, **kw: Any) -> dict[str, Any]:
    return {"name": name, "namespace": "c1", "job": job, "node": node_name, "phase": "Running",
            "requests": {"cpu": cpu, "memory": "1Gi"} if cpu else {}, **kw}


def pending(name: str, job: str, cpu: str, **kw: Any) -> dict[str, Any]:
    return {"name": name, "namespace": "c1", "job": job, "phase": "Pending",
            "requests": {"cpu": cpu, "memory": "1Gi"} if cpu else {}, **kw}


def job(name: str, min_member: int = 1, queue: str = "q1", phase: str = "Inqueue", **kw: Any) -> dict[str, Any]:
    return {"name": name, "namespace": "c1", "queue": queue, "minMember": min_member, "phase": phase, **kw}


def session(cluster: ClusterSpec, cfg: Any, extra_plugins: Mapping[str, Any] | None = None,
            shard: Any = None) -> Session:
    c = Cache()
    c.load(cluster)
    snap = c.snapshot()
    if shard is not None:
        snap.shard = shard
    registry = PLUGINS.with_entries(extra_plugins) if extra_plugins else PLUGINS
    return open_session(snap, cfg, registry)


def evicted(ssn: Session) -> list[str]:
    return sorted(d.task for d in ssn.decisions if d.kind == "evict")


def pipelined(ssn: Session) -> dict[str, str]:
    from busched.api.task import TaskStatus

    return {t.key: t.node_name for j in ssn.jobs.values() for t in j.tasks_in(TaskStatus.Pipelined)}


def _res(r: Any) -> dict[str, float]:
    """A resource as a dict; a scalar that is zero is the same as one never set."""
    return {k: v for k, v in r.to_dict().items() if k in ("cpu", "memory") or v != 0}


def state(ssn: Session) -> Any:
    """Everything a discarded statement must restore: node accounting, task placement and status,
    job indexes and gang counts."""
    nodes = {n.name: (_res(n.idle), _res(n.used), _res(n.releasing), _res(n.pipelined),
                      sorted((t.uid, t.status, t.node_name) for t in n.tasks.values()))
             for n in ssn.node_list}
    jobs = {j.uid: (sorted((t.uid, t.status, t.node_name) for t in j.tasks.values()),
                    sorted((s, sorted(ts)) for s, ts in j.status_index.items() if ts),
                    _res(j.allocated), j.ready_task_num(), j.waiting_task_num(), j.is_ready(),
                    j.is_pipelined(), j.is_starving())
            for j in ssn.jobs.values()}
    return copy.deepcopy((nodes, jobs))


def overcommitted(ssn: Session) -> list[str]:
    """Nodes whose idle or future idle is negative in some dimension, or whose accounting does
    not add up from the tasks it holds."""
    from busched.api.resource import Resource
    from busched.api.task import TaskStatus

    bad = []
    for n in ssn.node_list:
        used = Resource()
        releasing = Resource()
        pipe = Resource()
        for t in n.tasks.values():
            if t.status == TaskStatus.Pipelined:
                pipe.add(t.resreq)
            else:
                used.add(t.resreq)
                if t.status == TaskStatus.Releasing:
                    releasing.add(t.resreq)
        future = n.allocatable.clone().sub(used).add(releasing).sub(pipe)
        for name in ("cpu", "memory", "pods"):
            if n.idle.get(name) < -1e-6 or future.get(name) < -1e-6:
                bad.append(f"{n.name}: {name} idle={n.idle.get(name)} future={future.get(name)}")
            if abs(used.get(name) - n.used.get(name)) > 1e-6:
                bad.append(f"{n.name}: {name} used {n.used.get(name)} != tasks {used.get(name)}")
    return bad
