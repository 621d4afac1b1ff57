"""Volcano's scheduler metrics (busched.metrics.VolcanoMetrics) from a scheduler over a real nats-server:
the exported names, types and label names against Volcano's list, and a few values."""

from __future__ import annotations

import re

from prometheus_client import generate_latest

from busched.agent import fleet_nodes
from busched.api.objects import ClusterSpec, JobSpec, PriorityClassSpec, QueueSpec, TaskSpec
from busched.bus.apply import apply_cluster
from busched.framework.config import DEFAULT_CONFIG
from busched.metrics import exponential_buckets_range
from tests.nats_fixture import held_by_node, wait_until

WITH_PREEMPT = DEFAULT_CONFIG.replace('"enqueue, allocate, backfill"', '"enqueue, allocate, preempt, backfill"')

J, Q, N = ("job_name", "queue", "job_namespace"), ("queue_name",), ("queue_name", "resource")
# name -> (type, label names), as volcano-sh/volcano pkg/scheduler/metrics (and the controller's
# queue_pod_group_*_count) export them
EXPECTED: dict[str, tuple[str, tuple[str, ...]]] = {
    "volcano_e2e_scheduling_latency_milliseconds": ("histogram", ()),
    "volcano_open_session_duration_milliseconds": ("histogram", ()),
    "volcano_e2e_job_scheduling_latency_milliseconds": ("histogram", ()),
    "volcano_e2e_job_scheduling_duration": ("gauge", J),
    "volcano_e2e_job_scheduling_start_time": ("gauge", J),
    "volcano_e2e_job_scheduling_last_time": ("gauge", J),
    "volcano_plugin_scheduling_latency_milliseconds": ("histogram", ("plugin", "OnSession")),
    "volcano_action_scheduling_latency_milliseconds": ("histogram", ("action",)),
    "volcano_task_scheduling_latency_milliseconds": ("histogram", ("stage",)),
    "volcano_scheduling_stage_duration_milliseconds": ("histogram", ("stage",)),
    "volcano_schedule_attempts_total": ("counter", ("result",)),
    "volcano_pod_preemption_victims": ("gauge", ()),
    "volcano_total_preemption_attempts": ("counter", ()),
    "volcano_eviction_transactions_total": ("counter", ("action",)),
    "volcano_unschedule_task_count": ("gauge", ("job_id",)),
    "volcano_unschedule_job_count": ("gauge", ()),
    "volcano_job_share": ("gauge", ("job_ns", "job_id")),
    "volcano_job_retry_counts": ("counter", ("job_id",)),
    "volcano_queue_share": ("gauge", Q),
    "volcano_queue_weight": ("gauge", Q),
    "volcano_queue_overused": ("gauge", Q),
}
for _w in ("allocated", "request", "deserved", "capacity", "real_capacity", "inqueue"):
    EXPECTED[f"volcano_queue_{_w}_milli_cpu"] = ("gauge", Q)
    EXPECTED[f"volcano_queue_{_w}_memory_bytes"] = ("gauge", Q)
    EXPECTED[f"volcano_queue_{_w}_scalar_resources"] = ("gauge", N)
for _p in ("inqueue", "pending", "running", "unknown", "completed"):
    EXPECTED[f"volcano_queue_pod_group_{_p}_count"] = ("gauge", Q)

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")


def scrape(sched) -> tuple[dict[str, str], dict[str, set[str]], dict[tuple[str, frozenset], float]]:
    """The registry as text: TYPE per family, label names per family, value per (sample, labels)."""
    text = generate_latest(sched.metrics.registry).decode()
    types: dict[str, str] = {}
    labels: dict[str, set[str]] = {}
    values: dict[tuple[str, frozenset], float] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ")
            types[name] = typ
            continue
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, line
        name, lbl, value = m.groups()
        pairs = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', lbl or ""))
        family = name
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix) and name[: -len(suffix)] in types and types[name[: -len(suffix)]] == "histogram":
                family = name[: -len(suffix)]
        labels.setdefault(family, set()).update(k for k in pairs if k != "le")
        values[(name, frozenset(pairs.items()))] = float(value)
    return types, labels, values


def value(values, name: str, **labels: str) -> float:
    return values.get((name, frozenset(labels.items())), 0.0)


def job(name: str, n: int, pc: str, cpu: str = "1", min_member: int = 1) -> ClusterSpec:
    return ClusterSpec(jobs=[JobSpec(name=name, namespace="p", min_member=min_member, priority_class_name=pc)],
                       tasks=[TaskSpec(name=f"{name}-{i}", namespace="p", job=name, priority_class_name=pc,
                                       requests={"cpu": cpu}) for i in range(n)])


async def test_volcano_series_names_types_labels_and_values(harness):
    sched = await harness.scheduler(WITH_PREEMPT)
    agent = await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi"))
    bus = await harness.bus()
    await apply_cluster(bus, ClusterSpec(
        queues=[QueueSpec(name="default", weight=3, deserved={"cpu": "2"}, capability={"cpu": "8"})],
        priority_classes=[PriorityClassSpec(name="low", value=10), PriorityClassSpec(name="high", value=1000)]))
    await apply_cluster(bus, job("low", 4, "low"))
    await wait_until(lambda: len(held_by_node(agent)["node-00"]) == 4, what="low fills the node")
    await apply_cluster(bus, job("big", 1, "low", cpu="64"))  # fits nowhere
    await apply_cluster(bus, job("high", 2, "high", min_member=2))
    await wait_until(lambda: sum(k.startswith("p/high-") for k in held_by_node(agent)["node-00"]) == 2,
                     what="high running after preemption")
    await wait_until(lambda: value(scrape(sched)[2], "volcano_queue_allocated_milli_cpu", queue_name="default")
                     == 4000, what="queue allocated settles")

    types, labels, values = scrape(sched)
    volcano = {n: t for n, t in types.items() if n.startswith("volcano_")}
    assert set(volcano) == set(EXPECTED), (set(volcano) ^ set(EXPECTED))
    for name, (typ, names) in EXPECTED.items():
        assert volcano[name] == typ, name
        assert labels.get(name, set()) <= set(names), (name, labels.get(name))
        if name in labels:  # a family with samples: exactly Volcano's label names
            assert labels[name] == set(names), (name, labels[name])
    assert "busched_cycles_total" in types  # beside the busched_* ones

    # histograms carry Volcano's buckets
    les = sorted(float(dict(k[1])["le"]) for k in values if k[0] == "volcano_e2e_scheduling_latency_milliseconds_bucket"
                 and dict(k[1])["le"] != "+Inf")
    assert les == sorted(exponential_buckets_range(1, 5000, 20))
    assert value(values, "volcano_e2e_scheduling_latency_milliseconds_count") >= 3
    assert value(values, "volcano_open_session_duration_milliseconds_count") >= 3
    assert value(values, "volcano_action_scheduling_latency_milliseconds_count", action="allocate") >= 3
    assert value(values, "volcano_plugin_scheduling_latency_milliseconds_count", plugin="gang",
                 OnSession="OnSessionOpen") >= 3

    # attempts counted for real: 4 low + 2 high binds (the victims may be bound again later)
    assert value(values, "volcano_schedule_attempts_total", result="scheduled") >= 6
    assert value(values, "volcano_schedule_attempts_total", result="unschedulable") >= 1
    # the task that fits nowhere
    assert value(values, "volcano_unschedule_job_count") >= 1
    assert value(values, "volcano_unschedule_task_count", job_id="big") == 1
    assert value(values, "volcano_job_retry_counts", job_id="big") >= 1
    # the preemption
    assert value(values, "volcano_eviction_transactions_total", action="preempt") >= 1
    assert value(values, "volcano_total_preemption_attempts") >= 1
    # queue: allocated from its jobs; deserved and share as proportion computed them (Volcano's plugin sets
    # these: the 4-cpu cluster water-filled, not the spec's 2 cpu, which proportion does not read);
    # capacity from its spec
    assert value(values, "volcano_queue_allocated_milli_cpu", queue_name="default") == 4000
    assert value(values, "volcano_queue_request_milli_cpu", queue_name="default") == (4 + 64 + 2) * 1000
    assert value(values, "volcano_queue_deserved_milli_cpu", queue_name="default") == 4000
    assert value(values, "volcano_queue_capacity_milli_cpu", queue_name="default") == 8000
    assert value(values, "volcano_queue_real_capacity_milli_cpu", queue_name="default") == 4000
    assert value(values, "volcano_queue_weight", queue_name="default") == 3
    # proportion's own overused (deserved <= allocated in every dimension): the pending tasks keep it under
    assert value(values, "volcano_queue_overused", queue_name="default") == 0
    assert value(values, "volcano_queue_share", queue_name="default") == 1.0
    assert value(values, "volcano_queue_pod_group_running_count", queue_name="default") >= 1
    assert value(values, "volcano_job_share", job_ns="p", job_id="high") == 0.5
    assert value(values, "volcano_e2e_job_scheduling_latency_milliseconds_count") >= 2
    assert ("volcano_e2e_job_scheduling_duration",
            frozenset({"job_name": "high", "queue": "default", "job_namespace": "p"}.items())) in values
    assert value(values, "volcano_task_scheduling_latency_milliseconds_count", stage="Assumed") >= 6

    # per-job series go with the job
    await apply_cluster(bus, job("big", 1, "low", cpu="64"), delete=True)
    await wait_until(lambda: ("volcano_job_share", frozenset({"job_ns": "p", "job_id": "big"}.items()))
                     not in scrape(sched)[2], what="big's series dropped")
    values = scrape(sched)[2]
    assert not any(dict(k[1]).get("job_id") == "big" or dict(k[1]).get("job_name") == "big" for k in values)
