"""Every Prometheus collector busched exports, in one place.

Each `SchedulerMetrics` / `AgentMetrics` owns its own `CollectorRegistry`, so
several schedulers (tests, `busched up`) can live in one process.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric

__all__ = ["SchedulerMetrics", "AgentMetrics", "render", "CONTENT_TYPE"]

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
        self.bind_results = Counter("busched_bind_results_total", "Agent answers to binds", ["result"], registry=r)
        self.releases = Counter("busched_task_releases_total",
                                "Tasks sent back to Pending (rejected, lease, node_lost, evicted, stale)",
                                ["reason"], registry=r)
        self.bind_latency = Histogram("busched_bind_latency_seconds", "From bind decision to the agent's answer",
                                      buckets=(.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30), registry=r)
        self.tasks = Gauge("busched_tasks", "Tasks by status", ["status"], registry=r)
        self.nodes = Gauge("busched_nodes", "Nodes by state (ready, lost, unknown)", ["state"], registry=r)
        self.jobs = Gauge("busched_jobs", "Jobs (podgroups) by phase", ["phase"], registry=r)
        self.ready = Gauge("busched_ready", "1 once the state stream is caught up and cycles run", registry=r)
        self.catchup_seconds = Gauge("busched_catchup_seconds", "Time to catch up with the state stream at start",
                                     registry=r)
        self.heartbeats = Counter("busched_heartbeats_total", "Agent heartbeats received", registry=r)
        r.register(_PluginErrors())


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


class AgentMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.binds = Counter("busched_agent_binds_total", "Binds received, by outcome", ["outcome"], registry=r)
        self.evicts = Counter("busched_agent_evicts_total", "Evictions executed", registry=r)
        self.running = Gauge("busched_agent_tasks_running", "Tasks running on this agent's nodes", registry=r)


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
