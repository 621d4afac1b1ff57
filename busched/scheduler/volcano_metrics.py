"""Volcano's scheduler metrics (`busched.metrics.VolcanoMetrics`), filled once per cycle from the
closed session: `observe` is the one call `Scheduler.run_once` makes.

Where each value comes from (docs/bus.md "Metrics" has the table):

* cycle, session open, action and plugin latencies: the cycle's seconds (``report.seconds``) and the
  session's ``timings`` (`busched.framework.cycle`);
* per job (every job of the session, O(jobs)): unschedulable tasks and retries for a job the
  session marked Unschedulable, its dominant share of the cluster, the time from its creation to the
  cycle that placed it (observed once per job);
* per queue: allocated / request / inqueue summed over its jobs; deserved, share and real capacity as
  the proportion or capacity plugin computed them this session (``Session.queue_figures``: proportion's
  water-filled deserved, as Volcano's plugins set these series), else from the queue's spec; capacity
  from the spec; podgroups by phase;
* preemption and evictions from the cycle's evict decisions.

Per-job and per-queue series of jobs and queues that are gone are dropped.  Skipped cycles
(`QuietCycles`) do not come here: nothing changed.  The last cycle's per-queue figures (weight,
deserved, allocated, share) are also kept as plain values for the status page (`last_queues`), so
the page and the metrics show the same numbers.
"""

from __future__ import annotations

from typing import Any

from busched.api.job import PodGroupPhase
from busched.api.resource import Resource
from busched.api.task import TaskStatus
from busched.bus.resources import resource_list

__all__ = ["observe", "last_queues"]

_PER_JOB = ("volcano_e2e_job_scheduling_duration", "volcano_e2e_job_scheduling_start_time",
            "volcano_e2e_job_scheduling_last_time")
_PHASES = {PodGroupPhase.Inqueue: "inqueue", PodGroupPhase.Pending: "pending", PodGroupPhase.Running: "running",
           PodGroupPhase.Unknown: "unknown", PodGroupPhase.Completed: "completed"}
_EVICTING_ACTIONS = ("preempt", "reclaim", "gangpreempt", "gangreclaim")


class _State:
    """What the metrics remember between cycles: the label sets they exported, to drop the gone ones."""

    def __init__(self) -> None:
        self.placed: set[str] = set()  # jobs whose e2e scheduling latency was observed
        self.job_labels: dict[str, tuple[str, str, str]] = {}  # job uid -> (name, queue, namespace)
        self.queues: set[str] = set()
        # queue -> the last cycle's (share, allocated, deserved), read by `last_queues`
        self.figures: dict[str, tuple[float, Resource, Resource | None]] = {}


def _share(allocated: Resource, total: Resource) -> float:
    """Dominant share (drf's, over the dimensions the cluster has)."""
    s = 0.0
    if total.cpu > 0:
        s = max(s, allocated.cpu / total.cpu)
    if total.memory > 0:
        s = max(s, allocated.memory / total.memory)
    for name, t in total.scalars.items():
        if t > 0:
            s = max(s, allocated.scalars.get(name, 0.0) / t)
    return s


def _set_resource(v: Any, what: str, queue: str, r: Resource) -> None:
    v.set(f"volcano_queue_{what}_milli_cpu", r.cpu, (queue,))
    v.set(f"volcano_queue_{what}_memory_bytes", r.memory, (queue,))
    for name, q in r.scalars.items():
        v.set(f"volcano_queue_{what}_scalar_resources", q, (queue, name))


def observe(sched: Any, ssn: Any, report: Any) -> None:
    v = sched.metrics.volcano
    st: _State | None = getattr(sched, "_volcano_state", None)
    if st is None:
        st = sched._volcano_state = _State()
    ms = 1000.0
    # -- latencies -------------------------------------------------------------------------------
    v.observe("volcano_e2e_scheduling_latency_milliseconds", report.seconds * ms)
    timings = getattr(ssn, "timings", None)
    if timings is not None:
        v.observe("volcano_open_session_duration_milliseconds", timings["open"] * ms)
        for name, s in timings["actions"]:
            v.observe("volcano_action_scheduling_latency_milliseconds", s * ms, (name,))
        for name, point, s in timings["plugins"]:
            v.observe("volcano_plugin_scheduling_latency_milliseconds", s * ms, (name, point))
    # -- decisions -------------------------------------------------------------------------------
    binds: set[str] = set()
    victims = 0
    transactions: dict[str, set[str]] = {}  # action -> nodes (one committed statement per node)
    for d in ssn.decisions:
        if d.kind == "bind":
            binds.add(d.task)
        elif d.kind == "evict" and d.reason in _EVICTING_ACTIONS:
            transactions.setdefault(d.reason, set()).add(d.node)
            if d.reason == "preempt":
                victims += 1
    if "preempt" in ssn.config.actions:
        v.set("volcano_pod_preemption_victims", victims)
    for action, nodes in transactions.items():
        v.inc("volcano_eviction_transactions_total", len(nodes), (action,))
        if action == "preempt":
            v.inc("volcano_total_preemption_attempts", len(nodes))
    # -- jobs and queues -------------------------------------------------------------------------
    now = report.now
    total = ssn.total_resource
    uid = ssn.uid
    queues: dict[str, list[Any]] = {}  # queue -> [allocated, request, inqueue, {phase: n}]
    unschedulable_jobs = unschedulable_tasks = 0
    task_counts = v.values["volcano_unschedule_task_count"]
    shares = v.values["volcano_job_share"]
    start_times = v.values["volcano_e2e_job_scheduling_start_time"]
    placed = st.placed
    tc, tm, ts = total.cpu, total.memory, [(k, q) for k, q in total.scalars.items() if q > 0]
    marked: dict[int, bool] = {}  # id(conditions) -> marked Unschedulable by this session (gang shares lists)
    seen: dict[str, tuple[str, str, str]] = {}
    binding = TaskStatus.Binding
    inqueue = PodGroupPhase.Inqueue
    for job in ssn.jobs.values():
        name, ns = job.name, job.namespace
        labels = (name, job.queue, ns)
        seen[job.uid] = labels
        q = queues.get(job.queue)
        if q is None:
            q = queues[job.queue] = [Resource(), Resource(), Resource(), {}]
        a = job.allocated
        q[0].add(a)
        q[1].add(job.total_request)
        if job.has_podgroup:
            phases = q[3]
            phases[job.phase] = phases.get(job.phase, 0) + 1
            if job.phase == inqueue:
                q[2].add(job.inqueue_resource(a))
        # dominant share of the cluster (drf's)
        share = a.cpu / tc if tc > 0 else 0.0
        if tm > 0 and a.memory / tm > share:
            share = a.memory / tm
        if ts and a.scalars:
            for k, t in ts:
                x = a.scalars.get(k, 0.0) / t
                if x > share:
                    share = x
        shares[(ns, name)] = share
        conds = job.conditions
        unsched: bool | None = False
        if conds:
            unsched = marked.get(id(conds))
            if unsched is None:
                unsched = marked[id(conds)] = any(
                    c.get("type") == "Unschedulable" and c.get("status") == "True" and c.get("transitionID") == uid
                    for c in conds)
        if unsched:
            n = max(job.min_available - job.ready_task_num(), job.count(TaskStatus.Pending), 1)
            unschedulable_jobs += 1
            unschedulable_tasks += n
            task_counts[(name,)] = n
            v.inc("volcano_job_retry_counts", 1, (name,))
        elif task_counts:
            task_counts.pop((name,), None)
        if binds:
            bt = job.status_index.get(binding)
            if bt:
                for t in bt.values():
                    if t.created and t.key in binds:
                        v.observe("volcano_task_scheduling_latency_milliseconds", max(0.0, now - t.created) * ms,
                                  ("Assumed",))
        created = job.created
        if created:
            if job.uid not in placed and job.min_available > 0 and job.is_ready():
                placed.add(job.uid)
                d = max(0.0, now - created) * ms
                v.observe("volcano_e2e_job_scheduling_latency_milliseconds", d)
                v.set("volcano_e2e_job_scheduling_duration", d, labels)
                v.set("volcano_e2e_job_scheduling_last_time", float(int(now)), labels)
            if labels not in start_times:
                start_times[labels] = float(int(created))
    v.set("volcano_unschedule_job_count", unschedulable_jobs)
    v.inc("volcano_schedule_attempts_total", len(binds), ("scheduled",))
    v.inc("volcano_schedule_attempts_total", unschedulable_tasks, ("unschedulable",))
    # jobs that went: their series go with them
    for key, labels in st.job_labels.items():
        if key not in seen or seen[key] != labels:
            name, queue, ns = labels
            for series in _PER_JOB:
                v.values[series].pop(labels, None)
            task_counts.pop((name,), None)
            shares.pop((ns, name), None)
            v.values["volcano_job_retry_counts"].pop((name,), None)
            st.placed.discard(key)
    st.job_labels = seen
    figures: dict[str, tuple[float, Resource, Resource | None]] = {}
    computed: dict[str, dict[str, Any]] = getattr(ssn, "queue_figures", {})
    for name, queue in ssn.queues.items():
        q = queues.get(name) or [Resource(), Resource(), Resource(), {}]
        _set_resource(v, "allocated", name, q[0])
        _set_resource(v, "request", name, q[1])
        _set_resource(v, "inqueue", name, q[2])
        for phase, label in _PHASES.items():
            v.set(f"volcano_queue_pod_group_{label}_count", q[3].get(phase, 0), (name,))
        # what proportion or capacity computed this cycle (Volcano's plugins set these series), else the spec
        fig = computed.get(name) or {}
        deserved = fig.get("deserved")
        if deserved is None and queue.deserved is not None and queue.deserved_list:
            deserved = queue.deserved
        if deserved is not None:
            _set_resource(v, "deserved", name, deserved)
        capacity = queue.capability if queue.capability is not None and queue.capability_list else None
        if capacity is not None:
            _set_resource(v, "capacity", name, capacity)
        real = fig.get("real_capability")
        if real is None:
            real = _least(capacity, total) if capacity is not None else total
        _set_resource(v, "real_capacity", name, real)
        share = fig.get("share")
        if share is None:
            share = _share(q[0], deserved if deserved is not None else total)
        v.set("volcano_queue_weight", queue.weight, (name,))
        v.set("volcano_queue_share", share, (name,))
        figures[name] = (share, q[0], deserved)  # made into resource lists when the status page asks
        overused = fig.get("overused")  # the plugin's own overused (Volcano sets the series in its overusedFn)
        if overused is None:
            overused = deserved is not None and _covers(q[0], deserved)
        v.set("volcano_queue_overused", 1.0 if overused else 0.0, (name,))
    gone = st.queues - set(ssn.queues)
    if gone:
        for series, values in v.values.items():
            if series.startswith("volcano_queue_"):
                for labels in [lb for lb in values if lb and lb[0] in gone]:
                    del values[labels]
    st.queues = set(ssn.queues)
    st.figures = figures


def last_queues(sched: Any) -> dict[str, dict[str, Any]]:
    """The last observed cycle's figures per queue: ``share`` (of its deserved resources, or of the
    cluster when it has none), ``allocated`` and ``deserved`` (resource lists; ``None`` without a
    deserved share); empty before the first cycle."""
    st: _State | None = getattr(sched, "_volcano_state", None)
    if st is None:
        return {}
    return {name: {"share": share, "allocated": resource_list(allocated),
                   "deserved": resource_list(deserved) if deserved is not None else None}
            for name, (share, allocated, deserved) in st.figures.items()}


def _least(a: Resource, b: Resource) -> Resource:
    return Resource(min(a.cpu, b.cpu) if a.cpu else b.cpu, min(a.memory, b.memory) if a.memory else b.memory,
                    {k: min(q, a.scalars[k]) if k in a.scalars else q for k, q in b.scalars.items()})


def _covers(allocated: Resource, deserved: Resource) -> bool:
    """Proportion's overused: the deserved share is all allocated (deserved <= allocated)."""
    return (deserved.cpu <= allocated.cpu and deserved.memory <= allocated.memory
            and all(q <= allocated.scalars.get(k, 0.0) for k, q in deserved.scalars.items()))
