"""`busched run --config FILE` re-reads its configuration: a changed file decides from the next cycle,
one that does not load is refused (named, counted) and the previous configuration stays in force."""

from __future__ import annotations

from pathlib import Path

from busched.agent import fleet_nodes
from busched.api.objects import ClusterSpec, JobSpec, QueueSpec, TaskSpec
from busched.bus.apply import apply_cluster
from busched.cli.reload import ConfigFile
from busched.cli.run import load_scheduler_config
from busched.framework.config import SchedulerConfig
from busched.metrics import SchedulerMetrics
from tests.nats_fixture import wait_until

ENQUEUE_ONLY = """
actions: "enqueue"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: predicates
"""
PLACING = ENQUEUE_ONLY.replace('"enqueue"', '"enqueue, allocate"')


def _value(metrics: SchedulerMetrics, name: str, labels: dict[str, str] | None = None) -> float | None:
    return metrics.registry.get_sample_value(name, labels or {})


def test_a_changed_file_is_applied_and_a_bad_one_refused(tmp_path: Path):
    path = tmp_path / "scheduler.yaml"
    path.write_text(ENQUEUE_ONLY)
    applied: list[SchedulerConfig] = []
    metrics = SchedulerMetrics()
    cfg = ConfigFile(path, load_scheduler_config, applied.append, metrics)

    assert cfg.check() == "unchanged" and applied == []  # what it started with is not applied again
    path.write_text(PLACING)
    assert cfg.check() == "applied" and applied[-1].actions == ("enqueue", "allocate")
    path.write_text(PLACING)
    assert cfg.check() == "unchanged" and len(applied) == 1  # the same text again is no change

    path.write_text(PLACING.replace("name: gang", "name: gangg"))
    assert cfg.check() == "refused" and len(applied) == 1
    assert "gangg" in cfg.last_error and "tiers[0].plugins[1].name" in cfg.last_error
    assert _value(metrics, "busched_config_last_reload_successful") == 0
    assert _value(metrics, "busched_config_reloads_total", {"result": "refused"}) == 1

    path.write_text("actions: [not, a, string")  # not YAML at all
    assert cfg.check() == "refused" and len(applied) == 1

    path.write_text(ENQUEUE_ONLY)
    assert cfg.check() == "applied" and applied[-1].actions == ("enqueue",)
    assert cfg.last_error == ""


def test_a_missing_file_changes_nothing(tmp_path: Path):
    path = tmp_path / "scheduler.yaml"
    path.write_text(ENQUEUE_ONLY)
    applied: list[SchedulerConfig] = []
    cfg = ConfigFile(path, load_scheduler_config, applied.append, SchedulerMetrics())
    path.unlink()  # (an editor replacing the file)
    assert cfg.check() == "unchanged" and applied == []
    path.write_text(PLACING)
    assert cfg.check() == "applied"


async def test_a_reload_decides_from_the_next_cycle(harness, tmp_path: Path):
    """A scheduler without allocate leaves the work Pending; the reloaded configuration places it,
    though nothing in the cluster changed (the quiet-cycle gate must not hold the new configuration back)."""
    path = tmp_path / "scheduler.yaml"
    path.write_text(ENQUEUE_ONLY)
    sched = await harness.scheduler(load_scheduler_config(str(path)))
    await harness.agent(fleet_nodes(2, cpu="4", memory="8Gi"))
    await wait_until(lambda: sum(lv.state == "alive" for lv in sched.live.values()) == 2, what="agents alive")
    await apply_cluster(await harness.bus(), ClusterSpec(
        queues=[QueueSpec(name="default")], jobs=[JobSpec(name="j", namespace="p", min_member=1)],
        tasks=[TaskSpec(name="t", namespace="p", job="j", requests={"cpu": "1"})]))
    await wait_until(lambda: "p/t" in sched.specs["task"], what="the task known")
    cycles = sched.cycle
    await wait_until(lambda: sched.cycle > cycles + 1, what="cycles after the task arrived")
    assert sched.task_status("p/t") == "Pending"  # nothing allocates

    cfg = ConfigFile(path, load_scheduler_config, sched.use_config, sched.metrics)
    path.write_text(PLACING)
    assert cfg.check() == "applied"
    await wait_until(lambda: sched.task_status("p/t") == "Running", what="placed under the new configuration")
    assert _value(sched.metrics, "busched_config_reloads_total", {"result": "applied"}) == 1
    assert _value(sched.metrics, "busched_config_last_reload_successful") == 1


async def test_the_watch_reads_the_file_every_interval_until_stopped(tmp_path: Path):
    import asyncio

    from busched.cli.reload import watch

    path = tmp_path / "scheduler.yaml"
    path.write_text(ENQUEUE_ONLY)
    applied: list[SchedulerConfig] = []
    cfg = ConfigFile(path, load_scheduler_config, applied.append, SchedulerMetrics())
    stop = asyncio.Event()
    task = asyncio.create_task(watch(cfg, 0.01, stop))
    path.write_text(PLACING)
    await wait_until(lambda: applied, what="the change read by the watch")
    stop.set()
    await asyncio.wait_for(task, 5)
    assert [c.actions for c in applied] == [("enqueue", "allocate")]
