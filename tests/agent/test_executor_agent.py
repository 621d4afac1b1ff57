"""An agent with an executor over a real nats-server and a scheduler: binds accepted at once and
started in the background, phases and exit codes reported, an eviction stopping the whole tree,
a slow start holding up no other bind."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from busched.agent import fleet_nodes
from busched.agent.executor import Exit, TaskRun
from busched.agent.process import ProcessExecutor, process_start_time
from busched.api.objects import ClusterSpec, JobSpec, QueueSpec, TaskSpec
from busched.bus import messages as m
from busched.bus.apply import apply_cluster
from busched.cli.get import lookup
from tests.nats_fixture import held_by_node, wait_until


def gang(commands: list[str], *, ns: str = "t", job: str = "g") -> ClusterSpec:
    return ClusterSpec(queues=[QueueSpec(name="default")],
                       jobs=[JobSpec(name=job, namespace=ns, min_member=len(commands))],
                       tasks=[TaskSpec(name=f"{job}-{i}", namespace=ns, job=job, requests={"cpu": "1", "memory": "1Gi"},
                                       command=["sh", "-c", c]) for i, c in enumerate(commands)])


async def test_a_gang_of_real_commands_reports_exit_codes(harness: Any, tmp_path: Path) -> None:
    sched = await harness.scheduler()
    ex = ProcessExecutor(tmp_path / "state", cgroup=None)
    await harness.agent(fleet_nodes(2, cpu="4", memory="8Gi"), executor=ex, grace=1)
    await apply_cluster(await harness.bus(), gang(["echo zero", "echo one; exit 3", "exit 0"]))
    for i, want in enumerate(("Succeeded", "Failed", "Succeeded")):
        await wait_until(lambda i=i, want=want: sched.task_status(f"t/g-{i}") == want, timeout=15, what=f"g-{i} {want}")
    bus = await harness.bus()
    failed = await lookup(bus, "describe", "tasks", "t/g-1")
    assert (failed["status"], failed["exitCode"]) == ("Failed", 3)
    ok = await lookup(bus, "get", "tasks", "t/g-0")
    assert (ok["status"], ok["exitCode"]) == ("Succeeded", 0)
    node = ok["node"]
    log = ex.log_file(node, "t/g-0")
    assert log is not None and log.read_text() == "zero\n"


async def test_the_bind_is_accepted_before_the_task_runs(harness: Any, tmp_path: Path) -> None:
    seen: list[str] = []
    bus = await harness.bus()
    await bus.subscribe("busched.>", lambda subject, data: seen.append(type(m.decode(data)).__name__)
                        if b'"bind.accepted"' in data or b'"task.phase"' in data else None)
    await harness.scheduler()
    await harness.agent(fleet_nodes(1), executor=ProcessExecutor(tmp_path / "s", cgroup=None))
    await apply_cluster(await harness.bus(), gang(["exit 0"]))
    await wait_until(lambda: len(seen) >= 3, timeout=15, what="three answers")
    assert seen[:3] == ["BindAccepted", "TaskPhaseChanged", "TaskPhaseChanged"]


async def test_eviction_kills_the_whole_process_tree(harness: Any, tmp_path: Path) -> None:
    sched = await harness.scheduler()
    ex = ProcessExecutor(tmp_path / "state", cgroup=None)
    agent = await harness.agent(fleet_nodes(1), executor=ex, grace=0.5)
    pids = tmp_path / "pids"
    await apply_cluster(await harness.bus(), gang([f"trap '' TERM; (trap '' TERM; sleep 300) & echo $! > {pids}; "
                                                   "sleep 300 & wait"]))
    await wait_until(lambda: sched.task_status("t/g-0") == "Running" and pids.exists()
                     and pids.read_text().strip() != "", timeout=15, what="running")
    grandchild = int(pids.read_text())
    [run] = agent.launcher.runs()
    wrapper = run.state["pid"]
    assert process_start_time(grandchild) is not None
    # the task is deleted: the scheduler evicts it
    await apply_cluster(await harness.bus(), ClusterSpec(tasks=[TaskSpec(name="g-0", namespace="t")]), delete=True)
    await wait_until(lambda: process_start_time(grandchild) is None and process_start_time(wrapper) is None,
                     timeout=10, what="the tree gone")
    assert held_by_node(agent)["node-00"] == {}


async def test_one_slow_start_does_not_hold_up_other_binds(harness: Any) -> None:
    release = asyncio.Event()
    started: list[str] = []

    class Slow:
        async def start(self, run: TaskRun) -> None:
            if run.key.endswith("-0"):
                await release.wait()  # an image pull that takes its time
            started.append(run.key)

        async def wait(self, run: TaskRun) -> Exit:
            await asyncio.Event().wait()
            return Exit(0)

        async def stop(self, run: TaskRun, grace: float) -> None:
            return None

        async def status(self, run: TaskRun) -> Exit | None:
            return None

    sched = await harness.scheduler()
    await harness.agent(fleet_nodes(1), executor=Slow(), concurrency=2)
    await apply_cluster(await harness.bus(), gang(["a", "b", "c"]))
    await wait_until(lambda: sched.task_status("t/g-1") == "Running" and sched.task_status("t/g-2") == "Running",
                     timeout=15, what="the others running")
    assert sched.task_status("t/g-0") != "Running" and sorted(started) == ["t/g-1", "t/g-2"]
    release.set()
    await wait_until(lambda: sched.task_status("t/g-0") == "Running", timeout=15, what="the slow one running")


async def test_busched_logs_reads_and_follows_a_task_s_output(harness: Any, tmp_path: Path, capsys: Any) -> None:
    from busched.cli.main import main

    sched = await harness.scheduler()
    go = tmp_path / "go"
    await harness.agent(fleet_nodes(1), executor=ProcessExecutor(tmp_path / "state", cgroup=None))
    await apply_cluster(await harness.bus(), gang([f"echo first; while [ ! -e {go} ]; do sleep 0.05; done; "
                                                   "echo second; exit 0", "echo other"]))
    await wait_until(lambda: sched.task_status("t/g-0") == "Running", timeout=15, what="running")
    url = harness.url

    async def first() -> bool:
        return await _logs(main, capsys, url, "t/g-0") == (0, "first\n")
    await wait_until(first, timeout=10, what="first line")
    follow = asyncio.create_task(asyncio.to_thread(main, ["logs", "t/g-0", "-f", "--interval", "0.05",
                                                          "--nats", url]))
    go.touch()
    assert await asyncio.wait_for(follow, 20) == 0  # ends with the run
    assert capsys.readouterr().out == "first\nsecond\n"
    assert await _logs(main, capsys, url, "t/g-0", "--tail", "7") == (0, "second\n")
    code = await asyncio.to_thread(main, ["logs", "t/nope", "--nats", url])
    assert code == 1 and "no task 't/nope'" in capsys.readouterr().err


async def _logs(main: Any, capsys: Any, url: str, *args: str) -> tuple[int, str]:
    code = await asyncio.to_thread(main, ["logs", *args, "--nats", url])
    return code, capsys.readouterr().out


async def test_an_eviction_during_a_start_stops_what_the_start_made(harness: Any) -> None:
    release = asyncio.Event()
    calls: list[str] = []

    class Slow:
        async def start(self, run: TaskRun) -> None:
            calls.append("start")
            await release.wait()
            calls.append("started")

        async def wait(self, run: TaskRun) -> Exit:
            await asyncio.Event().wait()
            return Exit(0)

        async def stop(self, run: TaskRun, grace: float) -> None:
            calls.append(f"stop {grace:g}")

        async def status(self, run: TaskRun) -> Exit | None:
            return None

    await harness.scheduler()
    agent = await harness.agent(fleet_nodes(1), executor=Slow(), grace=7)
    await apply_cluster(await harness.bus(), gang(["a"]))
    await wait_until(lambda: calls == ["start"], timeout=15, what="the start under way")
    await apply_cluster(await harness.bus(), ClusterSpec(tasks=[TaskSpec(name="g-0", namespace="t")]), delete=True)
    await wait_until(lambda: held_by_node(agent)["node-00"] == {}, timeout=15, what="evicted")
    assert calls == ["start"]  # the stop waits for the start: it would not find what is half made
    release.set()
    await wait_until(lambda: calls == ["start", "started", "stop 7"], timeout=15, what="stopped after its start")


async def test_a_run_its_task_was_deleted_from_while_the_agent_was_away_is_stopped(harness: Any,
                                                                                   tmp_path: Path) -> None:
    sched = await harness.scheduler()
    first = await harness.agent(fleet_nodes(1), executor=ProcessExecutor(tmp_path / "state", cgroup=None))
    await apply_cluster(await harness.bus(), gang(["sleep 300"]))
    await wait_until(lambda: sched.task_status("t/g-0") == "Running", timeout=15, what="running")
    [run] = first.launcher.runs()
    wrapper = run.state["pid"]
    await first.stop()  # the agent goes; its run goes on
    assert process_start_time(wrapper) is not None
    await apply_cluster(await harness.bus(), ClusterSpec(tasks=[TaskSpec(name="g-0", namespace="t")]), delete=True)
    second = await harness.agent(fleet_nodes(1), executor=ProcessExecutor(tmp_path / "state", cgroup=None))
    assert held_by_node(second)["node-00"] == {"t/g-0": 1}  # recovered before its first heartbeat ...
    # ... which the scheduler answers with a stale evict: the run is stopped, not left behind
    await wait_until(lambda: process_start_time(wrapper) is None, timeout=15, what="the run stopped")
    await wait_until(lambda: held_by_node(second)["node-00"] == {}, timeout=15, what="released")
