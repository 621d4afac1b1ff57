"""`busched agent --exec process` as a separate process, with a scheduler process, over a real nats-server
(issue 15's "done means"): a 3-task gang of real commands shown by `busched get` / `describe` with its
exit codes; a killed and restarted agent neither orphans nor duplicates the task it was running."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from busched.api.objects import ClusterSpec, JobSpec, QueueSpec, TaskSpec
from tests.faults.cluster import BUSCHED, AgentProc, Cluster, wait_for

WRAPPER = "busched/agent/procwrap.py"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(tmp_path)
    await c.start()
    try:
        yield c
    finally:
        await c.close()


def wrappers(state: Path) -> list[int]:
    """Live wrapper processes of runs under ``state``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if stat[0] != "Z" and any(c.endswith(WRAPPER.encode()) for c in cmd) and str(state).encode() in b" ".join(cmd):
            out.append(int(entry))
    return out


def exec_agent(c: Cluster, state: Path, name: str = "agent") -> AgentProc:
    return c.agent("node", nodes=1, cpu="4", memory="8Gi", name=name,
                   extra=["--exec", "process", "--state-dir", str(state), "--grace", "1"])


async def cli(c: Cluster, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(*BUSCHED, *args, "--nats", c.url, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return out.decode()


def gang(commands: list[str]) -> ClusterSpec:
    return ClusterSpec(queues=[QueueSpec(name="default")],
                       jobs=[JobSpec(name="g", namespace="t", min_member=len(commands))],
                       tasks=[TaskSpec(name=f"g-{i}", namespace="t", job="g", requests={"cpu": "1"},
                                       command=["sh", "-c", cmd]) for i, cmd in enumerate(commands)])


async def test_a_gang_of_real_commands_with_exit_codes(cluster: Cluster, tmp_path: Path) -> None:
    c = cluster
    await c.scheduler().wait_ready()
    exec_agent(c, tmp_path / "state")
    await c.wait_nodes(["node-00"])
    await c.apply(gang(["echo hello", "exit 3", "true"]))
    obs = c.observer
    assert obs is not None

    async def ended() -> bool:
        tasks = await obs.tasks()
        return all(tasks.get(f"t/g-{i}", {}).get("status") in ("Succeeded", "Failed") for i in range(3))
    await wait_for(ended, 30, "the gang to end")
    table = await cli(c, "get", "tasks")
    lines = table.splitlines()
    header = lines[0].split()
    rows = {r[header.index("NAME")]: dict(zip(header, r)) for r in (x.split() for x in lines[1:] if x.strip())}
    assert [(rows[f"g-{i}"]["STATUS"], rows[f"g-{i}"]["EXIT"]) for i in range(3)] == \
        [("Succeeded", "0"), ("Failed", "3"), ("Succeeded", "0")], table
    assert rows["g-1"]["REASON"] == "Error", table
    described = await cli(c, "describe", "task", "t/g-1")
    assert re.search(r"(?m)^status: Failed$", described) and re.search(r"(?m)^exitCode: 3$", described), described
    assert wrappers(tmp_path / "state") == []


async def test_a_restarted_agent_neither_orphans_nor_duplicates(cluster: Cluster, tmp_path: Path) -> None:
    c = cluster
    state, go = tmp_path / "state", tmp_path / "go"
    await c.scheduler(heartbeat_timeout=5.0).wait_ready()
    agent = exec_agent(c, state)
    await c.wait_nodes(["node-00"])
    await c.apply(gang([f"while [ ! -e {go} ]; do sleep 0.05; done; exit 0"]))
    obs = c.observer
    assert obs is not None

    async def status() -> str:
        return str((await obs.tasks()).get("t/g-0", {}).get("status"))
    await wait_for(lambda: _is(status, "Running"), 30, "running")
    [wrapper] = wrappers(state)
    old_boot = obs.nodes["node-00"].boot
    agent.kill()  # no clean shutdown: the run goes on without its agent
    assert wrappers(state) == [wrapper]
    exec_agent(c, state, name="agent-r")
    await wait_for(lambda: _log_has(c, "recovered t/g-0"), 30, "the new agent to recover the run")
    await wait_for(lambda: obs.nodes["node-00"].boot != old_boot, 30, "the new boot's heartbeat")
    assert obs.nodes["node-00"].holding == {"t/g-0": 1}  # its first heartbeat holds the run
    seen = obs.heartbeats
    # a dozen heartbeats of the new boot (the scheduler cycles every 0.2 s): the attempt is kept, none other made
    await wait_for(lambda: obs.heartbeats >= seen + 12, 30, "heartbeats")
    assert wrappers(state) == [wrapper]
    assert await status() == "Running"
    assert obs.bind_decisions["t/g-0"] == {("node-00", 1)}
    go.touch()
    await wait_for(lambda: _is(status, "Succeeded"), 30, "succeeded")
    task = (await obs.tasks())["t/g-0"]
    assert task["attempt"] == 1 and task["exitCode"] == 0, task
    assert wrappers(state) == []


async def _is(status, want: str) -> bool:  # noqa: ANN001
    return await status() == want


def _log_has(c: Cluster, text: str) -> bool:
    return any(text in p.tail(200) for p in c.agents)
