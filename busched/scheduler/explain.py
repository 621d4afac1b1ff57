"""Why a task or a job was (not) placed: what `busched explain` shows.

The analysis runs on a private copy of the scheduler's cache (``Cache.snapshot(memo=False)``, with
fresh cross-cycle plugin state and no memo of unfit jobs), in a session opened with the scheduler's
configuration (plus the busched-agent-feedback predicate, over the exclusions in force), so it has no effect on the next
cycle.  `gather` takes what it needs from the scheduler (in the event loop, under the cycle lock);
`explain` is a pure function of that and may run in a worker thread.  `gather_at` is the same from given
pieces (the moment's ``now``, seed, configuration, exclusions and backoff): `busched.replay.explain` calls
it on a replayer's scheduler, on the state before a recorded cycle.

The answer is one dict: ``reason`` (a stable code, `REASONS`), ``message``, ``nodes`` (predicate
failures aggregated as Volcano's FitErrors: reason -> number of nodes), ``scores`` (the best nodes:
node -> {plugin: score, "total": sum}), and ``task``, ``job``, ``node`` where they apply.  Checks in
order: the task's own state (placed, running, finished), its job and queue (missing, closed), the
gang (valid tasks below minMember), admission (``job_enqueueable``: which plugin voted reject),
the queue's share (``overused``, ``allocatable``), the nominated node, then every node's predicates
(resource fit on future idle, then ``predicate_for_allocate``, as allocate) and the backoff gate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from busched.api.fit import Code, FitError, FitErrors, Status
from busched.api.job import JobInfo
from busched.api.node import NodeInfo
from busched.api.snapshot import ClusterSnapshot
from busched.api.task import TaskInfo
from busched.framework import points
from busched.framework.config import SchedulerConfig
from busched.framework.nodeselect import insufficient_reason
from busched.framework.points import Point
from busched.framework.session import Session

__all__ = ["REASONS", "Inputs", "gather", "gather_at", "explain", "classify"]

REASONS = (
    "Placed", "Running", "Completed", "Failed", "Releasing", "Nominated", "Schedulable", "Backoff",
    "JobMissing", "QueueMissing", "QueueClosed", "GangMinMemberUnreachable", "QueueCapabilityExhausted",
    "QueueOverused", "NodeTooSmall", "UntoleratedTaint", "SelectorMismatch", "ExcludedAfterRefusal",
    "Unschedulable", "NoNodes",
)
# when node reasons tie, the more specific wins
_NODE_CODES = ("ExcludedAfterRefusal", "SelectorMismatch", "UntoleratedTaint", "NodeTooSmall", "Unschedulable")
TOP_NODES = 5


def _about_capability(ssn: Session, voters: list[str]) -> bool:
    """A voter's enqueue/allocatable verdict is about a queue's capability (else its share): the plugin
    says so with ``judges_queue_capability`` (capacity, proportion)."""
    return any(getattr(ssn.plugins.get(v), "judges_queue_capability", False) for v in voters)


@dataclass
class Inputs:
    """What `explain` reads from the scheduler, copied at one moment."""

    snapshot: ClusterSnapshot
    config: SchedulerConfig
    plugins: Any  # the plugin registry (None: the default one)
    tasks: dict[str, Any]  # task key -> spec (the asked task, or the asked job's tasks)
    jobs: dict[str, Any]  # job key -> spec
    queues: dict[str, Any]  # queue name -> spec
    status: dict[str, str] = field(default_factory=dict)  # task key -> status name, as `busched get`
    node: dict[str, str] = field(default_factory=dict)  # task key -> where it is placed
    reasons: dict[str, str] = field(default_factory=dict)  # task key -> why it last went back to Pending
    backoff: dict[str, float] = field(default_factory=dict)  # task key -> seconds left
    excluded: dict[str, dict[str, float]] = field(default_factory=dict)  # task key -> node -> seconds left
    now: float = 0.0  # the session's clock (epoch seconds)
    seed: int = 0


def gather(sched: Any, name: str, *, now: float | None = None) -> Inputs:
    """Copy what explaining ``name`` (a task or a job, "ns/name") needs, at ``now`` (epoch seconds; default:
    the scheduler's wall clock read here).  Call it in the event loop, while no cycle runs: it brings the
    cache up to date and converts it afresh."""
    keys = _keys(sched.specs, name)
    mono = sched.clock()
    return gather_at(sched, name, now=sched.wall_clock() if now is None else now, seed=sched.settings.seed,
                     excluded={k: {n: t - mono for n, t in sched.excluded.get(k, {}).items() if t > mono}
                               for k in keys},
                     backoff={k: sched.backoff_until[k] - mono for k in keys
                              if sched.backoff_until.get(k, 0.0) > mono})


def gather_at(sched: Any, name: str, *, now: float, seed: int, excluded: dict[str, dict[str, float]],
              backoff: dict[str, float], config: SchedulerConfig | None = None) -> Inputs:
    """`gather` from given pieces: ``sched`` a scheduler whose specs and cache stand at the moment to explain (the
    live one, or `busched.replay.Replayer`'s after ``advance``: the state before a recorded cycle), that moment's
    clock ``now`` (epoch seconds) and ``seed``, the exclusions in force (task -> node -> seconds left) and the
    tasks under the backoff gate (task -> seconds left; ``math.inf``: in force, for how long unknown, as a cycle
    record says), ``config`` (default: the scheduler's)."""
    from busched.scheduler.records import with_refusals  # the cycle's own exclusion predicate

    specs = sched.specs
    keys = _keys(specs, name)
    sched.sync_cache()
    snap = sched.cache.snapshot(memo=False)
    snap.others = {**snap.others, "plugin_state": {}}  # nothing carried to or from the next cycle
    snap.others.pop("unfit", None)
    excluded = {k: dict(excluded[k]) for k in keys if excluded.get(k)}
    snap.refused = {k: frozenset(v) for k, v in excluded.items()}
    config = with_refusals(config if config is not None else sched.config)
    plugins = sched._run_plugins
    view = {f"{t['namespace']}/{t['name']}": t for t in _task_rows(sched, keys)}
    return Inputs(snapshot=snap, config=config, plugins=plugins, tasks={k: specs["task"][k] for k in keys},
                  jobs=dict(specs["job"]), queues=dict(specs["queue"]),
                  status={k: v["status"] for k, v in view.items()}, node={k: v["node"] for k, v in view.items()},
                  reasons={k: sched.reasons.get(k, "") for k in keys},
                  backoff={k: backoff[k] for k in keys if k in backoff},
                  excluded=excluded, now=now, seed=seed)


def _keys(specs: dict[str, dict[str, Any]], name: str) -> list[str]:
    """The task ``name``, else the tasks of the job ``name``."""
    if name in specs["task"]:
        return [name]
    return [k for k, t in specs["task"].items() if f"{t.namespace}/{t.job}" == name]


def _task_rows(sched: Any, keys: list[str]) -> list[dict[str, Any]]:
    return [r for r in sched.view("tasks") if f"{r['namespace']}/{r['name']}" in set(keys)] if keys else []


# == the analysis ====================================================================================================
def explain(inp: Inputs, name: str) -> dict[str, Any]:
    """Why ``name`` (a task, else a job) is where it is.  Raises KeyError for an unknown name."""
    from busched.builtin import open_session

    if name not in inp.tasks and name not in inp.jobs:
        raise KeyError(f"no task or job {name!r}")
    ssn = open_session(inp.snapshot, inp.config, inp.plugins, seed=inp.seed, uid="explain", now=inp.now)
    try:
        if name in inp.tasks:
            return _explain_task(inp, ssn, name)
        return _explain_job(inp, ssn, name)
    finally:
        ssn.abandon()  # a private copy: nothing to give back, nothing to write


def _answer(reason: str, message: str, **kw: Any) -> dict[str, Any]:
    return {"reason": reason, "message": message, "nodes": {}, "scores": {}, **kw}


def _explain_job(inp: Inputs, ssn: Session, key: str) -> dict[str, Any]:
    spec = inp.jobs[key]
    out = _job_level(inp, ssn, key, spec)
    if out is not None:
        return out
    order = sorted(inp.tasks, key=lambda k: (_status_rank(inp.status.get(k, "")), k))
    if not order:
        return _answer("GangMinMemberUnreachable", f"job {key} has no tasks (minMember {spec.min_member})", job=key)
    first = order[0]
    st = inp.status.get(first, "")
    if st in ("Pending", "Pipelined", ""):
        out = _explain_task(inp, ssn, first)
        out["message"] = f"task {first}: {out['message']}"
        return out
    counts: dict[str, int] = {}
    for k in inp.tasks:
        counts[inp.status.get(k, "")] = counts.get(inp.status.get(k, ""), 0) + 1
    summary = ", ".join(f"{v} {s}" for s, v in sorted(counts.items()))
    code = "Running" if set(counts) <= {"Running"} else "Placed"
    return _answer(code, f"job {key}: every task is placed ({summary})", job=key)


def _status_rank(status: str) -> int:
    return 0 if status in ("Pending", "Pipelined", "") else 1


def _job_level(inp: Inputs, ssn: Session, jkey: str, spec: Any) -> dict[str, Any] | None:
    """The job's and its queue's reason, or None when they let its tasks be placed."""
    queue = inp.queues.get(spec.queue)
    if queue is None:
        return _answer("QueueMissing", f"job {jkey} names queue {spec.queue!r}, which does not exist", job=jkey)
    if queue.state != "Open":
        return _answer("QueueClosed", f"queue {spec.queue} is {queue.state}: it takes no new work", job=jkey)
    job = ssn.jobs.get(jkey)
    if job is None:
        return None
    ntasks = len(job.tasks)
    if ntasks < job.min_available:
        return _answer("GangMinMemberUnreachable",
                       f"job {jkey} has {ntasks} tasks, fewer than its minMember {job.min_available}", job=jkey)
    vr = ssn.job_valid(job)
    if vr is not None and not vr.passed:
        return _answer("GangMinMemberUnreachable", f"job {jkey}: {vr.message or vr.reason}", job=jkey)
    if job.is_pending() and ssn.enqueue_enabled and job.min_resources is not None and not ssn.job_enqueueable(job):
        voters = _voters(ssn, points.JOB_ENQUEUEABLE, lambda fn: fn(job) < 0)
        code = "QueueCapabilityExhausted" if _about_capability(ssn, voters) or not voters else "QueueOverused"
        return _answer(code, f"job {jkey} not enqueued: job-enqueueable rejected by {', '.join(voters) or '?'}: "
                             f"its minResources {_res(job.get_min_resources())} do not fit what queue "
                             f"{spec.queue} has left{_capability(queue)}", job=jkey)
    q = ssn.queues.get(spec.queue)
    if q is not None and ssn.overused(q):
        voters = _voters(ssn, points.OVERUSED, lambda fn: bool(fn(q)))
        return _answer("QueueOverused", f"queue {spec.queue} is overused (its allocation reached its deserved "
                                        f"share): {', '.join(voters)}", job=jkey)
    return None


def _voters(ssn: Session, point: Point[Any, Any], rejects: Any) -> list[str]:
    """The plugins whose callback at ``point`` says no (the session's resolved tier walk)."""
    out = []
    for row in ssn.hooks.callbacks(point):  # the same resolved lists the session's hooks walk
        for plugin, fn in row:
            if rejects(fn):
                out.append(plugin)
    return out


def _capability(queue: Any) -> str:
    cap = dict(queue.capability or {})
    return f" (capability {','.join(f'{k}={v}' for k, v in sorted(cap.items()))})" if cap else ""


def _res(r: Any) -> str:
    parts = [f"cpu={r.cpu / 1000:g}"] if r.cpu else []
    if r.memory:
        parts.append(f"memory={r.memory:g}")
    parts += [f"{k}={v:g}" for k, v in sorted(r.scalars.items())]
    return ",".join(parts) or "none"


def _find_task(ssn: Session, jkey: str, key: str) -> tuple[JobInfo | None, TaskInfo | None]:
    job = ssn.jobs.get(jkey)
    if job is None:
        return None, None
    return job, next((t for t in job.tasks.values() if t.key == key), None)


def _explain_task(inp: Inputs, ssn: Session, key: str) -> dict[str, Any]:
    spec = inp.tasks[key]
    status = inp.status.get(key, "")
    node = inp.node.get(key, "")
    jkey = f"{spec.namespace}/{spec.job}"
    where = dict(task=key, job=jkey if spec.job else "", node=node)
    if status == "Running":
        return _answer("Running", f"task {key} runs on {node}", **where)
    if status in ("Binding", "Bound", "Allocated"):
        return _answer("Placed", f"task {key} is placed on {node} ({status})", **where)
    if status == "Succeeded":
        return _answer("Completed", f"task {key} succeeded on {node}", **where)
    if status == "Failed":
        why = inp.reasons.get(key, "")
        return _answer("Failed", f"task {key} failed{': ' + why if why else ''}", **where)
    if status == "Releasing":
        return _answer("Releasing", f"task {key} is being stopped on {node}", **where)
    if not spec.job or jkey not in inp.jobs:
        return _answer("JobMissing", f"task {key} names job {jkey!r}, which does not exist", **where)
    out = _job_level(inp, ssn, jkey, inp.jobs[jkey])
    if out is not None:
        return {**out, **where}
    job, task = _find_task(ssn, jkey, key)
    if job is None or task is None:
        return _answer("Unschedulable", f"task {key} is not in this scheduler's view of the cluster", **where)
    q = ssn.queues.get(job.queue)
    if q is not None and not ssn.allocatable(q, task):
        voters = _voters(ssn, points.ALLOCATABLE, lambda fn: not fn(q, task))
        code = "QueueCapabilityExhausted" if _about_capability(ssn, voters) else "QueueOverused"
        return _answer(code, f"queue {job.queue} cannot take task {key} ({_res(task.resreq)}): rejected by "
                             f"{', '.join(voters) or '?'}{_capability(inp.queues[job.queue])}", **where)
    if task.nominated_node_name and task.nominated_node_name in ssn.nodes:
        return _answer("Nominated", f"task {key} is pipelined to node {task.nominated_node_name}: it waits there "
                                    f"for resources being released", **where)
    fe, fits = predicate_nodes(ssn, task)
    counts = histogram(fe)
    if not ssn.node_list:
        return _answer("NoNodes", "0/0 nodes are available: no node is ready", **where)
    if not fits:
        return _answer(node_code(fe), str(fe), nodes=counts, scores={}, **{k: v for k, v in where.items()})
    scores = best_nodes(ssn, task, fits)
    left = inp.backoff.get(key)
    head = f"{len(fits)}/{len(ssn.node_list)} nodes are available"
    if left is not None:
        why = inp.reasons.get(key, "")
        wait = f"waits {left:.1f}s more" if math.isfinite(left) else "is under the backoff gate"
        out = _answer("Backoff", f"task {key} {wait} before it is tried again"
                                 f"{' (last: ' + why + ')' if why else ''}; {head}", **where)
    elif task.sch_gated:
        out = _answer("Unschedulable", f"task {key} is held by its scheduling gates "
                                       f"{', '.join(task.scheduling_gates)}; {head}", **where)
    else:
        out = _answer("Schedulable", f"{head}: task {key} may be placed by the next cycle"
                                     f"{' (with its gang)' if job.min_available > 1 else ''}", **where)
    out["nodes"], out["scores"] = counts, scores
    return out


# == nodes: predicates and scores ====================================================================================
def predicate_nodes(ssn: Session, task: TaskInfo) -> tuple[FitErrors, list[NodeInfo]]:
    """Every node's verdict for ``task`` (no sampling, no error cache): the fit errors and the nodes that pass."""
    fe = FitErrors()
    fits: list[NodeInfo] = []
    try:
        ssn.pre_predicate_fn(task)
    except FitError as e:
        for n in ssn.node_list:
            fe.set_node_error(n.name, e)
        return fe, []
    for n in ssn.node_list:
        ok, names = task.init_resreq.less_equal_with_names(n.future_idle())
        if not ok:
            fe.set_node_error(n.name, FitError(task.key, n.name, [_status(insufficient_reason(names))]))
            continue
        try:
            ssn.predicate_for_allocate(task, n)
        except FitError as e:
            fe.set_node_error(n.name, e)
            continue
        fits.append(n)
    return fe, fits


def _status(reason: str) -> Status:
    return Status(Code.Unschedulable, reason)


def histogram(fe: FitErrors) -> dict[str, int]:
    """reason -> number of nodes, as Volcano's FitErrors message counts them."""
    hist: dict[str, int] = {}
    for e in fe.nodes.values():
        for r in e.reasons():
            hist[r] = hist.get(r, 0) + 1
    return dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))


def classify(e: FitError) -> str:
    """A node's fit error as a reason code."""
    from busched.scheduler.records import FEEDBACK_PLUGIN

    for s in e.statuses:
        if s.plugin == FEEDBACK_PLUGIN or "refused this task recently" in s.reason:
            return "ExcludedAfterRefusal"
    text = " ".join(e.reasons())
    if "Insufficient" in text:
        return "NodeTooSmall"
    if "untolerated taint" in text:
        return "UntoleratedTaint"
    if "node affinity/selector" in text:
        return "SelectorMismatch"
    return "Unschedulable"


def node_code(fe: FitErrors) -> str:
    """The code of the most common node reason (ties: the more specific)."""
    counts: dict[str, int] = {}
    for e in fe.nodes.values():
        c = classify(e)
        counts[c] = counts.get(c, 0) + 1
    if not counts:
        return "Unschedulable"
    return max(counts, key=lambda c: (counts[c], -_NODE_CODES.index(c)))


def best_nodes(ssn: Session, task: TaskInfo, nodes: list[NodeInfo], top: int = TOP_NODES
               ) -> dict[str, dict[str, float]]:
    """Each node's score by plugin (plain node-order, batch), the best ``top`` by total."""
    per: dict[str, dict[str, float]] = {n.name: {} for n in nodes}
    try:
        for row in ssn.hooks.callbacks(points.NODE_ORDER):  # the session's resolved lists, one plugin at a time
            for plugin, fn in row:
                for n in nodes:
                    per[n.name][plugin] = per[n.name].get(plugin, 0.0) + fn(task, n)
        for batch_row in ssn.hooks.callbacks(points.BATCH_NODE_ORDER):
            for plugin, batch in batch_row:
                for name, s in batch(task, nodes).items():
                    if name in per:
                        per[name][plugin] = per[name].get(plugin, 0.0) + s
    except Exception as e:  # noqa: BLE001 - a failing plugin: say so instead of scores
        return {"error": {"message": str(e)}}  # type: ignore[dict-item]
    for d in per.values():
        d["total"] = sum(d.values())
    best = sorted(per.items(), key=lambda kv: (-kv[1]["total"], kv[0]))[:top]
    return dict(best)

