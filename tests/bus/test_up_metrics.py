"""Issue 14's list of Volcano series, scraped from a running `busched up` (a separate process with its own
nats-server, fleet and demo): every name is exported, with Volcano's type.

The list is written out here, as the issue gives it, rather than read from `busched.metrics`: a series
dropped or renamed there must fail this test.  tests/scheduler/test_volcano_metrics.py checks labels,
buckets and values in process."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys

import aiohttp

SCHEDULER = {
    "volcano_e2e_scheduling_latency_milliseconds": "histogram",
    "volcano_open_session_duration_milliseconds": "histogram",
    "volcano_e2e_job_scheduling_latency_milliseconds": "histogram",
    "volcano_e2e_job_scheduling_duration": "gauge",
    "volcano_e2e_job_scheduling_start_time": "gauge",
    "volcano_e2e_job_scheduling_last_time": "gauge",
    "volcano_plugin_scheduling_latency_milliseconds": "histogram",
    "volcano_action_scheduling_latency_milliseconds": "histogram",
    "volcano_task_scheduling_latency_milliseconds": "histogram",
    "volcano_scheduling_stage_duration_milliseconds": "histogram",
    "volcano_schedule_attempts_total": "counter",
    "volcano_pod_preemption_victims": "gauge",
    "volcano_total_preemption_attempts": "counter",
    "volcano_eviction_transactions_total": "counter",
    "volcano_unschedule_task_count": "gauge",
    "volcano_unschedule_job_count": "gauge",
    "volcano_job_share": "gauge",
    "volcano_job_retry_counts": "counter",
    "volcano_queue_share": "gauge",
    "volcano_queue_weight": "gauge",
    "volcano_queue_overused": "gauge",
}
QUEUE = {f"volcano_queue_{what}_{unit}": "gauge"
         for what in ("allocated", "request", "deserved", "capacity", "real_capacity", "inqueue")
         for unit in ("milli_cpu", "memory_bytes", "scalar_resources")}
CONTROLLER = {f"volcano_queue_pod_group_{phase}_count": "gauge"
              for phase in ("inqueue", "pending", "running", "unknown", "completed")}
EXPECTED = {**SCHEDULER, **QUEUE, **CONTROLLER}

UP = [sys.executable, "-m", "busched.cli.main", "up", "--nats-port", "0", "--nats-monitor-port", "-1",
      "--http", "127.0.0.1:0", "--period", "0.1", "--heartbeat", "0.2", "--duration", "0.5", "--nodes", "3",
      "--demo-every", "0.3", "--exit-after", "60"]


def _types(text: str) -> dict[str, str]:
    """name -> type from the exposition's ``# TYPE`` lines."""
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.M))


async def test_a_scrape_of_busched_up_shows_every_volcano_series(tmp_path):
    proc = await asyncio.create_subprocess_exec(
        *UP, cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    out: list[str] = []
    try:
        url = ""

        async def until_running() -> None:
            nonlocal url
            while True:
                line = (await proc.stdout.readline()).decode()
                if not line:
                    raise AssertionError("busched up exited:\n" + "".join(out))
                out.append(line)
                found = re.search(r"metrics at (http://\S+/metrics)", line)
                if found:
                    url = found.group(1).rstrip(",;")
                if url and "Succeeded" in line:  # the demo ran: cycles, binds and jobs were observed
                    return

        await asyncio.wait_for(until_running(), 30)
        async with aiohttp.ClientSession() as http, http.get(url, timeout=aiohttp.ClientTimeout(total=10)) as r:
            assert r.status == 200
            text = await r.text()
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(proc.communicate(), 15)
            except TimeoutError:
                proc.kill()
                await proc.wait()
    types = _types(text)
    missing = sorted(set(EXPECTED) - set(types))
    assert not missing, f"not exported by busched up: {missing}"
    wrong = {n: (types[n], t) for n, t in EXPECTED.items() if types[n] != t}
    assert not wrong, f"(exported, Volcano's) types differ: {wrong}"
    # the demo was scheduled: the cycle histogram and the scheduled attempts have samples
    count = re.search(r"^volcano_e2e_scheduling_latency_milliseconds_count (\S+)$", text, flags=re.M)
    assert count is not None and float(count.group(1)) >= 1, text[:2000]
    assert re.search(r'^volcano_schedule_attempts_total\{result="scheduled"\} ([1-9]\S*)$', text, flags=re.M), \
        "no scheduled attempt counted"
    assert re.search(r'^volcano_queue_weight\{queue_name="\S+"\} \S+$', text, flags=re.M), "no queue weight"
