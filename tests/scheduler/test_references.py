"""Missing references, the built-in default queue, exit codes and failed jobs in `busched get` and `describe`
(issue 14), over a real nats-server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from busched.agent import fleet_nodes
from busched.api.objects import BUILTIN_DEFAULT_QUEUE, ClusterSpec, JobSpec, QueueSpec, TaskSpec
from busched.bus.apply import apply_cluster, missing_references
from busched.cli.get import lookup
from busched.cli.main import main
from busched.scheduler import explain, references
from tests.nats_fixture import held_by_node, wait_until


def task(name: str, job: str = "j") -> TaskSpec:
    return TaskSpec(name=name, namespace="t", job=job, requests={"cpu": "1"})


async def queue_row(bus: Any, name: str = "default") -> dict[str, Any]:
    return await lookup(bus, "get", "queues", name)


async def test_the_default_queue_is_there_unapplied_an_applied_one_wins_and_deleting_it_brings_it_back(harness):
    sched = await harness.scheduler()
    agent = await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi"))
    bus = await harness.bus()
    row = await queue_row(bus)
    assert (row["weight"], row["state"], row["origin"], row["jobs"]) == (1, "Open", "built-in", 0)
    assert sched.cache.objects["queue"]["default"].reclaimable
    # deleting the built-in one changes nothing (Volcano's admission refuses it)
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="default")]), delete=True)
    await wait_until(lambda: ("queue", "default") in sched.feed.seqs, what="the delete handled")
    assert sched.specs["queue"]["default"] is BUILTIN_DEFAULT_QUEUE
    assert sched.cache.objects["queue"]["default"] is BUILTIN_DEFAULT_QUEUE
    # a job naming it (JobSpec's queue is "default" unless set) is placed without any queue applied
    await apply_cluster(bus, ClusterSpec(jobs=[JobSpec(name="j", namespace="t", min_member=1)], tasks=[task("a")]))
    await wait_until(lambda: "t/a" in held_by_node(agent)["node-00"], what="placed in the built-in default queue")
    applied = ClusterSpec(queues=[QueueSpec(name="default", weight=3)])
    await apply_cluster(bus, applied)
    await wait_until(lambda: sched.specs["queue"]["default"].weight == 3, what="the applied queue")
    row = await queue_row(bus)
    assert (row["weight"], row["origin"], row["jobs"]) == (3, "applied", 1)
    await apply_cluster(bus, applied, delete=True)
    await wait_until(lambda: sched.specs["queue"]["default"].weight == 1, what="the built-in queue back")
    row = await queue_row(bus)
    assert (row["weight"], row["origin"]) == (1, "built-in")
    assert sched.cache.objects["queue"]["default"].weight == 1  # the cycles see it too
    # and `busched apply` does not warn about a job naming it
    assert missing_references(ClusterSpec(jobs=[JobSpec(name="k", namespace="t")])) == []


async def test_get_shows_the_built_in_queue_and_a_cluster_file_listing_leaves_it_out(harness, capsys):
    sched = await harness.scheduler()
    await apply_cluster(await harness.bus(), ClusterSpec(queues=[QueueSpec(name="other", weight=2)]))
    url = harness.url
    await wait_until(lambda: "other" in sched.specs["queue"], what="the other queue")
    assert await asyncio.to_thread(main, ["get", "queues", "--nats", url]) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert [line[:5] for line in lines] == [["NAME", "WEIGHT", "STATE", "JOBS", "ORIGIN"],
                                            ["default", "1", "Open", "0", "built-in"],
                                            ["other", "2", "Open", "0", "applied"]]
    assert lines[0][5:] == ["PENDING", "RUNNING", "INQUEUE", "ALLOCATED"]  # the queue's status (written per cycle)
    # no one applied it: a listing `apply -f` takes back leaves it out (it would become an applied one) ...
    assert await asyncio.to_thread(main, ["get", "queues", "-o", "json", "--nats", url]) == 0
    assert [q["name"] for q in json.loads(capsys.readouterr().out)["queues"]] == ["other"]
    # ... asked for by name, it is printed
    assert await asyncio.to_thread(main, ["get", "queue", "default", "-o", "json", "--nats", url]) == 0
    (q,) = json.loads(capsys.readouterr().out)["queues"]
    # (a spec prints without its defaults: weight 1, reclaimable, Open are QueueSpec's)
    assert (set(q), q["name"], q["status"]["origin"]) == ({"name", "status"}, "default", "built-in")


async def test_a_job_whose_queue_is_missing_says_so_and_is_placed_once_the_queue_is_applied(harness, capsys):
    sched = await harness.scheduler(run=False)
    agent = await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi"))
    bus = await harness.bus()
    await apply_cluster(bus, ClusterSpec(jobs=[JobSpec(name="j", namespace="t", queue="later", min_member=1)],
                                         tasks=[task("a")]))
    await wait_until(lambda: "t/a" in sched.specs["task"] and "t/j" in sched.specs["job"], what="applied")
    await sched.run_once(force=True)
    assert "t/a" not in sched.bindings  # skipped, as Volcano skips a podgroup whose queue is not found
    job = await lookup(bus, "get", "jobs", "t/j")
    assert job["reason"].startswith("QueueMissing: queue 'later' does not exist")
    cond = job["conditions"][-1]
    assert (cond["type"], cond["status"], cond["reason"]) == ("Unschedulable", "True", "QueueMissing")
    assert "QueueMissing" in explain.REASONS  # the code `busched explain` gives for it too
    assert await asyncio.to_thread(main, ["get", "jobs", "--nats", harness.url]) == 0
    out = capsys.readouterr().out
    assert "REASON" in out.splitlines()[0] and "QueueMissing: queue 'later' does not exist" in out
    assert await asyncio.to_thread(main, ["describe", "job", "t/j", "--nats", harness.url]) == 0
    assert "Unschedulable=True  QueueMissing  queue 'later' does not exist" in capsys.readouterr().out
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="later")]))
    await wait_until(lambda: "later" in sched.specs["queue"], what="the queue applied")
    await sched.run_once()
    await wait_until(lambda: "t/a" in held_by_node(agent)["node-00"], what="placed once its queue exists")
    job = await lookup(bus, "get", "jobs", "t/j")
    assert job["reason"] == "" and all(c["reason"] != "QueueMissing" for c in job["conditions"])


async def test_a_task_whose_job_is_missing_says_so_and_is_placed_once_the_job_is_applied(harness, capsys):
    sched = await harness.scheduler(run=False)
    agent = await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi"))
    bus = await harness.bus()
    await apply_cluster(bus, ClusterSpec(tasks=[task("a", job="ghost"), TaskSpec(name="lone", namespace="t")]))
    await wait_until(lambda: {"t/a", "t/lone"} <= set(sched.specs["task"]), what="applied")
    await sched.run_once(force=True)
    assert "t/a" not in sched.bindings and "t/lone" not in sched.bindings
    row = await lookup(bus, "get", "tasks", "t/a")
    assert (row["status"], row["reason"]) == (
        "Pending", "JobMissing: job t/ghost does not exist; the task is not scheduled until it is applied")
    assert (await lookup(bus, "get", "tasks", "t/lone"))["reason"].startswith("JobMissing: the task names no job")
    assert await asyncio.to_thread(main, ["describe", "task", "t/a", "--nats", harness.url]) == 0
    assert "reason: JobMissing: job t/ghost does not exist" in capsys.readouterr().out
    await apply_cluster(bus, ClusterSpec(jobs=[JobSpec(name="ghost", namespace="t", min_member=1)]))
    await wait_until(lambda: "t/ghost" in sched.specs["job"], what="the job applied")
    await sched.run_once()
    await wait_until(lambda: "t/a" in held_by_node(agent)["node-00"], what="placed once its job exists")
    assert (await lookup(bus, "get", "tasks", "t/a"))["reason"] == ""


async def test_exit_codes_and_reasons_of_finished_tasks_and_the_failed_mark_of_their_job(harness, capsys):
    sched = await harness.scheduler()
    agent = await harness.agent(fleet_nodes(1, cpu="4", memory="8Gi"))
    bus = await harness.bus()
    await apply_cluster(bus, ClusterSpec(jobs=[JobSpec(name="j", namespace="t", min_member=2)],
                                         tasks=[task("a"), task("b")]))
    await wait_until(lambda: {"t/a", "t/b"} <= set(held_by_node(agent)["node-00"]), what="placed")
    await agent.report_phase("node-00", "t/a", "Failed", reason="OOMKilled", exit_code=137)
    await agent.report_phase("node-00", "t/b", "Succeeded", exit_code=0)
    await wait_until(lambda: (sched.task_status("t/a"), sched.task_status("t/b")) == ("Failed", "Succeeded"),
                     what="finished")
    a = await lookup(bus, "get", "tasks", "t/a")
    assert (a["status"], a["exitCode"], a["exitReason"]) == ("Failed", 137, "OOMKilled")
    b = await lookup(bus, "get", "tasks", "t/b")
    assert (b["status"], b["exitCode"], b["exitReason"]) == ("Succeeded", 0, "")

    # the podgroup's phase is computed when a session closes
    await wait_until(lambda: getattr(sched.pg_status.get("t/j"), "phase", "") == "Completed", what="completed")
    got = await lookup(bus, "get", "jobs", "t/j")
    assert (got["phase"], got["failed"]) == ("Completed", 1)
    cond = got["conditions"][-1]
    assert (cond["type"], cond["reason"]) == ("TasksFailed", "TasksFailed")
    assert cond["message"] == "1 of 2 tasks failed: t/a (exit 137, OOMKilled)"

    assert await asyncio.to_thread(main, ["get", "tasks", "--nats", harness.url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:8] == ["NAMESPACE", "NAME", "JOB", "STATUS", "NODE", "ATTEMPT", "EXIT", "REASON"]
    assert lines[1].split() == ["t", "a", "j", "Failed", "node-00", "1", "137", "OOMKilled"]
    assert lines[2].split() == ["t", "b", "j", "Succeeded", "node-00", "1", "0"]
    assert await asyncio.to_thread(main, ["get", "jobs", "--nats", harness.url]) == 0
    out = capsys.readouterr().out
    assert "Completed (1 failed)" in out and "TasksFailed: 1 of 2 tasks failed: t/a (exit 137, OOMKilled)" in out
    assert await asyncio.to_thread(main, ["describe", "job", "t/j", "--nats", harness.url]) == 0
    out = capsys.readouterr().out
    assert "phase: Completed (1 failed)" in out and "TasksFailed=True  TasksFailed  1 of 2 tasks failed" in out
    assert await asyncio.to_thread(main, ["describe", "task", "t/a", "-o", "json", "--nats", harness.url]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["exitCode"], d["exitReason"]) == (137, "OOMKilled")


def test_a_failed_task_is_named_with_what_its_agent_said_or_why_its_attempts_ran_out():
    class R:
        what, exit_code, reason = "Failed", 3, ""

    assert references.failure("t/a", R(), "") == "t/a (exit 3)"
    assert references.failure("t/a", None, "bind lease expired 3 times") == "t/a (bind lease expired 3 times)"
    assert references.failure("t/a", None, "") == "t/a"
    failed = [f"t/x-{i}" for i in range(5)]
    (cond,) = references.job_conditions(JobSpec(name="x", namespace="t"), {"default": 1}, failed, 9)
    assert cond["message"] == "5 of 9 tasks failed: t/x-0, t/x-1, t/x-2 and 2 more"
