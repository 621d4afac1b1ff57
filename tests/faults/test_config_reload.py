"""A bad configuration written under a running `busched run --config FILE`: refused and counted, the
scheduler keeps scheduling with the previous one; a good one afterwards (read at SIGHUP) is applied."""

from __future__ import annotations

import signal

from tests.faults.cluster import check_invariants, wait_for, workload

GOOD = """
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: predicates
  - name: nodeorder
"""


async def test_a_bad_configuration_is_refused_and_a_good_one_applied(cluster, tmp_path):  # noqa: ANN001
    obs = cluster.observer
    path = tmp_path / "scheduler.yaml"
    path.write_text(GOOD)
    # no polling (--config-check 0): each change is read at SIGHUP only, so the test decides when
    sched = cluster.scheduler(extra=["--config", str(path), "--config-check", "0"])
    a = cluster.agent("cr", 2)
    await sched.wait_ready()
    await cluster.wait_nodes(a.node_names)

    path.write_text(GOOD.replace("name: gang", "name: no-such-plugin"))
    sched.signal(signal.SIGHUP)
    await wait_for(lambda: sched.metric_sum("busched_config_reloads_total", result="refused") == 1, 10,
                   "the bad configuration refused")
    assert sched.metric_sum("busched_config_last_reload_successful") == 0
    assert "no-such-plugin" in sched.tail(200)  # the log names what is wrong

    # the previous configuration stays in force: new work is placed
    await cluster.apply(workload("cr", 4, durations=[600]))
    await wait_for(lambda: len(obs.held()) == 4, 20, "4 tasks held under the previous configuration")

    path.write_text(GOOD.replace('"enqueue, allocate, backfill"', '"enqueue, allocate"'))
    sched.signal(signal.SIGHUP)
    await wait_for(lambda: sched.metric_sum("busched_config_reloads_total", result="applied") == 1, 10,
                   "the good configuration applied")
    assert sched.metric_sum("busched_config_last_reload_successful") == 1
    assert sched.alive()
    await check_invariants(obs)
