"""Every Prometheus collector busched exports, in one place.

Each `SchedulerMetrics` / `AgentMetrics` owns its own `CollectorRegistry`, so
several schedulers (tests, `busched up`) can live in one process.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.utils import floatToGoString

__all__ = ["SchedulerMetrics", "AgentMetrics", "VolcanoMetrics", "VOLCANO_SERIES", "render", "CONTENT_TYPE",
           "JETSTREAM_ASKS", "JetStreamAsks"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class SchedulerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.events = Counter("busched_state_events_total", "State-stream messages applied, by kind and type",
                              ["kind", "type"], registry=r)
        self.events_rejected = Counter(
            "busched_state_events_rejected_total",
            "Messages refused: malformed, oversized, invalid (the object fails validation), stale (an older "
            "or duplicate version), mismatch (payload does not match its subject)",
            ["reason", "kind"], registry=r)
        self.cycles = Counter("busched_cycles_total", "Scheduling cycles run", registry=r)
        self.cycle_errors = Counter("busched_cycle_errors_total", "Scheduling cycles that raised", registry=r)
        self.cycle_seconds = Histogram("busched_cycle_duration_seconds", "Time of one scheduling cycle",
                                       buckets=(.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10), registry=r)
        self.action_binds = Counter("busched_bind_decisions_total", "Bind decisions published", registry=r)
        self.action_evicts = Counter("busched_evict_decisions_total", "Evict decisions published", registry=r)
        self.publish_errors = Counter("busched_publish_errors_total", "Publishes that failed", ["what"], registry=r)
        self.sched_events = Counter("busched_scheduling_events_total",
                                    "Scheduling events recorded (each occurrence, before deduplication into "
                                    "series), by reason", ["reason"], registry=r)
        self.bind_results = Counter("busched_bind_results_total", "Agent answers to binds", ["result"], registry=r)
        self.releases = Counter("busched_task_releases_total",
                                "Tasks sent back to Pending (rejected, lease, node_lost, evicted, stale)",
                                ["reason"], registry=r)
        self.writes_refused = Counter("busched_writes_refused_total",
                                      "Records not written because their readers would refuse them (the bind "
                                      "fails: busched.scheduler.write_bounds), by message and field",
                                      ["message", "field"], registry=r)
        self.writes_cut = Counter("busched_writes_cut_total",
                                  "Parts left out of records so that their readers take them (the record is written "
                                  "without them), one per part, by message and field: a podgroup status's conditions "
                                  "(busched.scheduler.statuses.fit_conditions), a node ledger's tasks",
                                  ["message", "field"], registry=r)
        self.bind_latency = Histogram("busched_bind_latency_seconds", "From bind decision to the agent's answer",
                                      buckets=(.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30), registry=r)
        self.tasks = Gauge("busched_tasks", "Tasks by status", ["status"], registry=r)
        self.nodes = Gauge("busched_nodes", "Nodes by state (ready, lost, unknown)", ["state"], registry=r)
        self.jobs = Gauge("busched_jobs", "Jobs (podgroups) by phase", ["phase"], registry=r)
        self.ready = Gauge("busched_ready", "1 once the state stream is caught up and cycles run", registry=r)
        self.leader = Gauge("busched_leader", "1 while this scheduler leads its shard, 0 while standby", ["shard"],
                            registry=r)
        self.leader_epoch = Gauge("busched_leader_epoch", "The epoch of its shard's lease this scheduler last knew "
                                  "(its own while it leads)", ["shard"], registry=r)
        self.catchup_seconds = Gauge("busched_catchup_seconds", "Time to catch up with the state stream at start",
                                     registry=r)
        self.heartbeats = Counter("busched_heartbeats_total", "Agent heartbeats received", registry=r)
        # (named after Prometheus' own prometheus_config_last_reload_*)
        self.config_reloads = Counter("busched_config_reloads_total",
                                      "Configuration reloads, by result: applied, or refused (the previous "
                                      "configuration stays in force)", ["result"], registry=r)
        self.config_reload_ok = Gauge("busched_config_last_reload_successful",
                                      "1 when the last configuration read was applied, 0 when it was refused",
                                      registry=r)
        self.config_reload_ok.set(1)
        self.config_reload_time = Gauge("busched_config_last_reload_success_timestamp_seconds",
                                        "When a reload last applied a configuration (epoch seconds; 0: "
                                        "none since the start)", registry=r)
        r.register(_PluginErrors())
        r.register(_JetStreamAsksCollector())
        self.volcano = VolcanoMetrics(r)


class _PluginErrors:
    """busched_plugin_errors_total{plugin}: read from the framework's count at each scrape (the
    session that sees a plugin fail has no metrics of its own)."""

    def collect(self) -> Iterator[Metric]:
        from busched.framework import plugin_errors

        c = CounterMetricFamily("busched_plugin_errors", "Plugin callbacks that raised on a task (the task "
                                "failed, not the cycle), counted once per task and session", labels=["plugin"])
        for name, n in sorted(plugin_errors.COUNTS.items()):
            c.add_metric([name], n)
        yield c


class JetStreamAsks:
    """How often this process's JetStream API requests went unanswered and were asked again, or given up
    (`busched.bus.asks`): counted process-wide by the bus, which has no registry of its own, and read by
    every registry at each scrape (as `_PluginErrors`).  The lease keeper's thread counts too: under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.unanswered_counts: dict[tuple[str, str], int] = {}  # (request, reason) -> asks left unanswered
        self.given_up_counts: dict[str, int] = {}  # request -> requests given up after the bound

    def unanswered(self, request: str, reason: str) -> None:
        with self._lock:
            key = (request, reason)
            self.unanswered_counts[key] = self.unanswered_counts.get(key, 0) + 1

    def given_up(self, request: str) -> None:
        with self._lock:
            self.given_up_counts[request] = self.given_up_counts.get(request, 0) + 1

    def snapshot(self) -> tuple[dict[tuple[str, str], int], dict[str, int]]:
        with self._lock:
            return dict(self.unanswered_counts), dict(self.given_up_counts)


JETSTREAM_ASKS = JetStreamAsks()


class _JetStreamAsksCollector:
    """busched_jetstream_unanswered_total{request,reason} and busched_jetstream_given_up_total{request}."""

    def collect(self) -> Iterator[Metric]:
        unanswered, given_up = JETSTREAM_ASKS.snapshot()
        c = CounterMetricFamily("busched_jetstream_unanswered", "JetStream API requests' asks left unanswered "
                                "(timeout, no_responders, unavailable, not_ready: a NATS cluster electing a "
                                "leader), each asked again or, past the bound, given up", labels=["request", "reason"])
        for (request, reason), n in sorted(unanswered.items()):
            c.add_metric([request, reason], n)
        yield c
        g = CounterMetricFamily("busched_jetstream_given_up", "JetStream API requests still unanswered after "
                                "every ask the bound allows (the caller got the error)", labels=["request"])
        for request, n in sorted(given_up.items()):
            g.add_metric([request], n)
        yield g


class AgentMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        r.register(_JetStreamAsksCollector())
        self.binds = Counter("busched_agent_binds_total", "Binds received, by outcome", ["outcome"], registry=r)
        self.evicts = Counter("busched_agent_evicts_total", "Evictions executed", registry=r)
        self.running = Gauge("busched_agent_tasks_running", "Tasks running on this agent's nodes", registry=r)


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)


def exponential_buckets_range(low: float, high: float, count: int) -> tuple[float, ...]:
    """Go's ``prometheus.ExponentialBucketsRange``: ``count`` buckets from ``low`` to ``high``."""
    factor = (high / low) ** (1.0 / (count - 1))
    return tuple(low * factor ** i for i in range(count))


class _Hist:
    __slots__ = ("buckets", "series")

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        # labels -> [count per bucket..., count beyond the last, sum, count]
        self.series: dict[tuple[str, ...], list[float]] = {}

    def observe(self, value: float, labels: tuple[str, ...] = ()) -> None:
        s = self.series.get(labels)
        if s is None:
            s = self.series[labels] = [0.0] * (len(self.buckets) + 3)
        s[bisect_left(self.buckets, value)] += 1  # past the last bucket: the +Inf count only (s[-2] below)
        s[-2] += value
        s[-1] += 1


# Volcano's scheduler series (volcano-sh/volcano pkg/scheduler/metrics, and the controller's
# queue_pod_group_*_count): name -> (type, help, label names, buckets for histograms)
_MS = exponential_buckets_range
VOLCANO_SERIES: dict[str, tuple[str, str, tuple[str, ...], tuple[float, ...]]] = {
    "volcano_e2e_scheduling_latency_milliseconds": (
        "histogram", "Duration of a single scheduling session execution in milliseconds", (), _MS(1, 5000, 20)),
    "volcano_open_session_duration_milliseconds": (
        "histogram", "Duration of opening a scheduling session in milliseconds", (), _MS(1, 5000, 20)),
    "volcano_e2e_job_scheduling_latency_milliseconds": (
        "histogram", "End-to-end job scheduling latency in milliseconds (per-job duration from creation to "
        "the job's tasks placed)", (), _MS(100, 120000, 30)),
    "volcano_e2e_job_scheduling_duration": (
        "gauge", "Per-job duration from job creation to its tasks placed, in milliseconds",
        ("job_name", "queue", "job_namespace"), ()),
    "volcano_e2e_job_scheduling_start_time": (
        "gauge", "E2E job scheduling start time", ("job_name", "queue", "job_namespace"), ()),
    "volcano_e2e_job_scheduling_last_time": (
        "gauge", "E2E job scheduling last time", ("job_name", "queue", "job_namespace"), ()),
    "volcano_plugin_scheduling_latency_milliseconds": (
        "histogram", "Plugin scheduling latency in milliseconds", ("plugin", "OnSession"), _MS(0.1, 100, 15)),
    "volcano_action_scheduling_latency_milliseconds": (
        "histogram", "Action scheduling latency in milliseconds", ("action",), _MS(1, 2000, 20)),
    "volcano_task_scheduling_latency_milliseconds": (
        "histogram", "Task scheduling latency from creation to various stages in milliseconds", ("stage",),
        _MS(50, 60000, 30)),
    "volcano_scheduling_stage_duration_milliseconds": (
        "histogram", "Duration of per-task scheduling stages (Predicate, Scoring, PreBind, Bind) in milliseconds",
        ("stage",), _MS(0.1, 500, 20)),
    "volcano_schedule_attempts_total": (
        "counter", "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be "
        "scheduled, while 'error' means an internal scheduler problem.", ("result",), ()),
    "volcano_pod_preemption_victims": ("gauge", "Number of selected preemption victims", (), ()),
    "volcano_total_preemption_attempts": ("counter", "Total preemption attempts in the cluster till now", (), ()),
    "volcano_eviction_transactions_total": (
        "counter", "Total number of committed eviction transactions, by action", ("action",), ()),
    "volcano_unschedule_task_count": ("gauge", "Number of tasks could not be scheduled", ("job_id",), ()),
    "volcano_unschedule_job_count": ("gauge", "Number of jobs could not be scheduled", (), ()),
    "volcano_job_share": ("gauge", "Share for one job", ("job_ns", "job_id"), ()),
    "volcano_job_retry_counts": ("counter", "Number of retry counts for one job", ("job_id",), ()),
    "volcano_queue_share": ("gauge", "Share for one queue", ("queue_name",), ()),
    "volcano_queue_weight": ("gauge", "Weight for one queue", ("queue_name",), ()),
    "volcano_queue_overused": ("gauge", "If one queue is overused", ("queue_name",), ()),
}
QUEUE_RESOURCES = ("allocated", "request", "deserved", "capacity", "real_capacity", "inqueue")
for _what in QUEUE_RESOURCES:
    _w = _what.replace("_", " ")
    VOLCANO_SERIES[f"volcano_queue_{_what}_milli_cpu"] = ("gauge", f"{_w} CPU count for one queue".capitalize(),
                                                         ("queue_name",), ())
    VOLCANO_SERIES[f"volcano_queue_{_what}_memory_bytes"] = ("gauge", f"{_w} memory for one queue".capitalize(),
                                                            ("queue_name",), ())
    VOLCANO_SERIES[f"volcano_queue_{_what}_scalar_resources"] = (
        "gauge", f"{_w} scalar resources for one queue".capitalize(), ("queue_name", "resource"), ())
for _phase in ("inqueue", "pending", "running", "unknown", "completed"):
    VOLCANO_SERIES[f"volcano_queue_pod_group_{_phase}_count"] = (
        "gauge", f"The number of {_phase.capitalize()} PodGroup in this queue", ("queue_name",), ())


class _GoCounter(str):
    """``counter`` that `generate_latest` does not take for one (so it adds no ``_total`` to the
    name on the HELP and TYPE lines), written as ``counter``: a Go counter named without the suffix
    (volcano_job_retry_counts, volcano_total_preemption_attempts) exactly as Volcano exports it."""

    __hash__ = str.__hash__

    def __eq__(self, other: object) -> bool:
        return False

    def __ne__(self, other: object) -> bool:
        return True


_GO_COUNTER = _GoCounter("counter")


class VolcanoMetrics:
    """Volcano's scheduler series under their exact names, types, labels and buckets, beside the
    busched_* ones.  Held as plain values (``values[name][labels]``, ``hists[name]``) and exported
    at scrape time, as Go's client does: counters without a ``_total`` suffix added, no ``_created``
    samples.  Filled once per cycle by `busched.scheduler.volcano_metrics`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.values: dict[str, dict[tuple[str, ...], float]] = {}
        self.hists: dict[str, _Hist] = {}
        for name, (typ, _h, labels, buckets) in VOLCANO_SERIES.items():
            if typ == "histogram":
                h = self.hists[name] = _Hist(buckets)
                if not labels:  # exported from the start, as Go's client does
                    h.series[()] = [0.0] * (len(buckets) + 3)
            else:
                self.values[name] = {} if labels else {(): 0.0}
        registry.register(self)

    def observe(self, name: str, value: float, labels: tuple[str, ...] = ()) -> None:
        self.hists[name].observe(value, labels)

    def set(self, name: str, value: float, labels: tuple[str, ...] = ()) -> None:
        self.values[name][labels] = value

    def inc(self, name: str, value: float = 1.0, labels: tuple[str, ...] = ()) -> None:
        d = self.values[name]
        d[labels] = d.get(labels, 0.0) + value

    def collect(self) -> Iterator[Metric]:
        for name, (typ, doc, labels, buckets) in VOLCANO_SERIES.items():
            fam = Metric(name, doc, typ)
            if typ == "counter":
                # the text format appends "_total" to a counter's name: Go's client writes the name as given
                if name.endswith("_total"):
                    fam.name = name[:-6]
                else:
                    fam.name, fam.type = name, _GO_COUNTER
            if typ == "histogram":
                for lv, s in list(self.hists[name].series.items()):
                    base = dict(zip(labels, lv))
                    acc = 0.0
                    for b, c in zip(buckets, s):
                        acc += c
                        fam.add_sample(name + "_bucket", {**base, "le": floatToGoString(b)}, acc)
                    fam.add_sample(name + "_bucket", {**base, "le": "+Inf"}, s[-1])
                    fam.add_sample(name + "_sum", base, s[-2])
                    fam.add_sample(name + "_count", base, s[-1])
            else:
                for lv, v in list(self.values[name].items()):
                    fam.add_sample(name, dict(zip(labels, lv)), v)
            yield fam
