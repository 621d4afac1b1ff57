"""docs/executors.md's smallest agent, run as written (only its NATS URL pointed at the test's server)
in its own process: it serves its node and a task it takes ends Succeeded."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from busched.api.objects import ClusterSpec, JobSpec, QueueSpec, TaskSpec
from busched.bus.apply import apply_cluster
from tests.nats_fixture import wait_until

DOC = Path(__file__).resolve().parents[2] / "docs" / "executors.md"


def smallest_agent() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    [code] = [b for b in blocks if "run_agent(" in b and "asyncio.run" in b]
    return code


async def test_the_smallest_agent_runs_a_task(harness: Any, tmp_path: Path) -> None:
    code = smallest_agent()
    assert code.count("nats://127.0.0.1:4222") == 1
    sched = await harness.scheduler()
    out = open(tmp_path / "agent.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-c", code.replace("nats://127.0.0.1:4222", harness.url)],
                            stdout=out, stderr=subprocess.STDOUT)
    try:
        await apply_cluster(await harness.bus(), ClusterSpec(
            queues=[QueueSpec(name="default")], jobs=[JobSpec(name="j", namespace="t", min_member=1)],
            tasks=[TaskSpec(name="a", namespace="t", job="j", requests={"cpu": "1"}, command=["true"])]))
        await wait_until(lambda: sched.task_status("t/a") == "Succeeded", timeout=20, what="succeeded")
    finally:
        proc.kill()
        proc.wait(10)
        out.close()
    assert proc.returncode == -9, (tmp_path / "agent.log").read_text()  # it served until killed
