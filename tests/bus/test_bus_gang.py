"""A gang job applied with `busched apply` runs on agents, no node over its allocatable (real nats-server)."""

from __future__ import annotations

import asyncio
import json

import yaml

from busched.agent import fleet_nodes
from busched.cli.main import main
from tests.nats_fixture import assert_no_overcommit, held_by_node, wait_until

TRAIN = {
    "queues": [{"name": "default"}],
    "jobs": [{"name": "train", "namespace": "ml", "queue": "default", "minMember": 8}],
    "tasks": [{"name": f"train-{i}", "namespace": "ml", "job": "train", "requests": {"cpu": "2", "memory": "1Gi"}}
              for i in range(8)],
}
# applied once train fills the cluster: a gang that cannot fit, so none of its tasks may be bound
BIG = {
    "jobs": [{"name": "big", "namespace": "ml", "queue": "default", "minMember": 2}],
    "tasks": [{"name": f"big-{i}", "namespace": "ml", "job": "big", "requests": {"cpu": "3", "memory": "1Gi"}}
              for i in range(2)],
}


def cli(*argv: str) -> int:
    return main(list(argv))


async def test_gang_job_applied_through_cli_runs_on_agents(harness, tmp_path, capsys):
    sched = await harness.scheduler()  # the default configuration
    agent = await harness.agent(fleet_nodes(4, cpu="4", memory="8Gi"))
    f = tmp_path / "scenario.yaml"  # a whole scenario file: its cluster: block is applied
    f.write_text(yaml.safe_dump({"name": "gang", "cluster": TRAIN}))

    rc = await asyncio.to_thread(cli, "apply", "-f", str(f), "--nats", harness.url)
    assert rc == 0
    assert "applied 10 objects" in capsys.readouterr().out

    def train_running() -> bool:
        held = held_by_node(agent)
        return sum(1 for tasks in held.values() for k in tasks if k.startswith("ml/train-")) == 8
    await wait_until(train_running, timeout=10, what="all 8 train tasks running on agents")
    assert_no_overcommit(agent)
    # the gang filled all four nodes, two tasks each
    assert sorted(len(t) for t in held_by_node(agent).values()) == [2, 2, 2, 2]

    g = tmp_path / "big.yaml"  # a bare cluster block
    g.write_text(yaml.safe_dump(BIG))
    assert await asyncio.to_thread(cli, "apply", "-f", str(g), "--nats", harness.url) == 0
    await wait_until(lambda: any(c["type"] == "Unschedulable" for j in sched.view("jobs") if j["name"] == "big"
                                 for c in j["conditions"]), what="big marked Unschedulable")

    await wait_until(lambda: all(t["status"] == "Running" for t in sched.view("tasks") if t["job"] == "train"),
                     what="scheduler sees train Running")
    capsys.readouterr()
    assert await asyncio.to_thread(cli, "get", "tasks", "-o", "json", "--nats", harness.url) == 0
    # a cluster file: each task's spec, and the scheduler's view of it under status
    tasks = {t["name"]: t for t in json.loads(capsys.readouterr().out)["tasks"]}
    assert {t["status"]["status"] for n, t in tasks.items() if n.startswith("train-")} == {"Running"}
    assert all(tasks[f"train-{i}"]["status"]["node"] for i in range(8))
    assert {tasks["big-0"]["status"]["status"], tasks["big-1"]["status"]["status"]} == {"Pending"}
    assert not tasks["big-0"]["status"]["node"] and not tasks["big-1"]["status"]["node"]
    assert all({"namespace", "name", "job"} <= set(t) and {"node", "status"} <= set(t["status"])
               for t in tasks.values())

    assert await asyncio.to_thread(cli, "get", "nodes", "-o", "json", "--nats", harness.url) == 0
    nodes = json.loads(capsys.readouterr().out)["nodes"]
    assert len(nodes) == 4
    for n in nodes:
        assert n["status"]["used"]["cpu"] == "4" and n["allocatable"]["cpu"] == "4", n

    await wait_until(lambda: {j["name"]: j["phase"] for j in sched.view("jobs")}.get("train") == "Running",
                     what="podgroup train Running")
    assert await asyncio.to_thread(cli, "get", "jobs", "--nats", harness.url) == 0
    out = capsys.readouterr().out
    assert "train" in out and "Running=8" in out
    big = next(j for j in sched.view("jobs") if j["name"] == "big")
    assert big["phase"] in ("Pending", "Inqueue")
    assert any(c["type"] == "Unschedulable" for c in big["conditions"]), big
    assert not any(k.startswith("ml/big-") for t in held_by_node(agent).values() for k in t)
