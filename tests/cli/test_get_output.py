"""`busched get -o wide|json|yaml` and `get -w` over a real nats-server (issue 14, "CLI for one object"): the
wide columns, a listing that `busched apply` takes back (round trip on the same bus and on an empty one), and
a watch that prints what is added, changed and deleted."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from busched.agent import fleet_nodes
from busched.bus import Bus
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.apply import load_cluster_file
from busched.bus.server import NatsServer
from busched.cli.main import main
from tests.nats_fixture import wait_until

CLUSTER = {
    "queues": [{"name": "q1", "weight": 2, "capability": {"cpu": "8"}, "deserved": {"cpu": "4"}}],
    "jobs": [{"name": "j", "namespace": "t", "queue": "q1", "minMember": 2, "labels": {"team": "a"}}],
    "tasks": [{"name": f"j-{i}", "namespace": "t", "job": "j", "requests": {"cpu": "1", "memory": "1Gi"},
               "labels": {"team": "a"}, "created": "2026-01-02T03:04:05Z"} for i in range(2)],
}


@pytest.fixture(autouse=True)
def _here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./.busched/auth credentials discovered
    for var in ("BUSCHED_NATS", "BUSCHED_NATS_CREDS", "BUSCHED_NATS_USER", "BUSCHED_NATS_PASSWORD"):
        monkeypatch.delenv(var, raising=False)


async def cli(*argv: str) -> int:
    return await asyncio.to_thread(main, list(argv))


async def running(harness: Any, tmp_path: Path) -> Any:
    """A scheduler and an agent of two nodes running CLUSTER (applied through the command)."""
    sched = await harness.scheduler()
    agent = await harness.agent(fleet_nodes(2, cpu="4", memory="8Gi", labels={"zone": "z1"}))
    f = tmp_path / "cluster.json"
    f.write_text(json.dumps(CLUSTER))
    assert await cli("apply", "-f", str(f), "--nats", harness.url) == 0
    await wait_until(lambda: [t["status"] for t in sched.view("tasks")] == ["Running", "Running"], what="running")
    await wait_until(lambda: sched.view("jobs")[0]["phase"] == "Running", what="podgroup running")
    return sched, agent


async def specs_on_stream(url: str) -> dict[str, Any]:
    """subject -> the spec of its last upsert."""
    bus = await Bus.connect(url)
    try:
        out = {}
        for subj, _, data in await bus.last_per_subject(f"{S.STATE_PREFIX}.>"):
            msg = m.decode(data)
            for kind, cls in m.UPSERTS.items():
                if type(msg) is cls:
                    out[subj] = msgspec.to_builtins(getattr(msg, m.SPEC_FIELD[kind]))
        return out
    finally:
        await bus.close()


async def test_wide_adds_columns(harness, tmp_path, capsys):
    await running(harness, tmp_path)
    url = harness.url
    capsys.readouterr()
    assert await cli("get", "tasks", "-o", "wide", "--nats", url) == 0
    lines = capsys.readouterr().out.splitlines()
    head = lines[0].split()
    assert head[:3] == ["NAMESPACE", "NAME", "JOB"] and {"REQUESTS", "EXIT", "START", "AGE"} <= set(head)
    assert head.count("EXIT") == 1
    assert len(lines) == 3 and "cpu=1,memory=1Gi" in lines[1]
    assert lines[1].split()[-1].endswith("d")  # created 2026-01-02: days ago
    assert await cli("get", "nodes", "-o", "wide", "--nats", url) == 0
    out = capsys.readouterr().out
    assert "LABELS" in out.splitlines()[0] and "zone=z1" in out.splitlines()[1]
    assert await cli("get", "queues", "q1", "-o", "wide", "--nats", url) == 0
    head, row = capsys.readouterr().out.splitlines()
    assert "CAPABILITY" in head and "DESERVED" in head and "cpu=8" in row and "cpu=4" in row
    assert await cli("get", "jobs", "-o", "wide", "--nats", url) == 0
    head, row = capsys.readouterr().out.splitlines()
    assert "CONDITION" in head and row.split()[:2] == ["t", "j"]
    assert await cli("get", "tasks", "--nats", url) == 0  # the plain table has none of them
    assert "REQUESTS" not in capsys.readouterr().out


async def test_json_and_yaml_print_what_apply_takes_back(harness, tmp_path, capsys):
    await running(harness, tmp_path)
    url = harness.url
    before = await specs_on_stream(url)
    capsys.readouterr()
    files = []
    for kind in ("queues", "jobs", "tasks"):
        assert await cli("get", kind, "-o", "yaml", "--nats", url) == 0
        f = tmp_path / f"{kind}.yaml"
        f.write_text(capsys.readouterr().out)
        files.append(str(f))
    tasks = msgspec.yaml.decode(Path(files[2]).read_bytes())["tasks"]
    assert [t["name"] for t in tasks] == ["j-0", "j-1"]
    t0 = tasks[0]
    assert t0["requests"] == {"cpu": "1", "memory": "1Gi"} and t0["labels"] == {"team": "a"}
    assert t0["status"]["status"] == "Running" and t0["status"]["node"] and t0["status"]["attempt"] == 1
    assert "name" not in t0["status"] and "requests" not in t0["status"]
    # one object by name, as JSON: the same document with one object
    assert await cli("get", "jobs", "t/j", "-o", "json", "--nats", url) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [j["name"] for j in doc["jobs"]] == ["j"] and doc["jobs"][0]["status"]["phase"] == "Running"
    assert load_cluster_file(files[2]).tasks[0].requests == {"cpu": "1", "memory": "1Gi"}

    # applied back: checked, nothing to warn about, and the specs on the stream are the same
    args = [a for f in files for a in ("-f", f)]
    assert await cli("apply", "--dry-run", *args, "--nats", url) == 0
    out, err = capsys.readouterr()
    assert "error" not in err and "warning" not in err and "would apply 2 objects" in out
    assert await cli("apply", *args, "--nats", url) == 0
    assert capsys.readouterr().err == ""
    assert await specs_on_stream(url) == before

    # and on an empty bus they are created again, creation times included
    other = NatsServer(tmp_path / "other", host="127.0.0.1", port=0)
    other.start(timeout=10)
    try:
        assert await cli("apply", *args, "--nats", other.url) == 0
        again = await specs_on_stream(other.url)
    finally:
        other.stop()
    assert again == {s: v for s, v in before.items() if s.split(".")[2] in ("queue", "job", "task")}
    assert again[S.state_subject("task", "t/j-0")]["created"] == "2026-01-02T03:04:05Z"


async def test_apply_ignores_only_a_status_mapping(tmp_path):
    f = tmp_path / "t.yaml"
    f.write_text(json.dumps({"tasks": [{"name": "a", "status": {"node": "n1", "attempt": 3}},
                                       {"name": "b", "status": "Running"}]}))
    c = load_cluster_file(str(f))
    assert [(t.name, t.status) for t in c.tasks] == [("a", ""), ("b", "Running")]
    # the bus stays strict: a status mapping in a message is refused
    with pytest.raises(msgspec.ValidationError):
        m.decode(m.encode(m.TaskUpsert(version=1, task=c.tasks[0])).replace(b'"name":"a"',
                                                                             b'"name":"a","status":{}'))


async def read_until(proc: Any, lines: list[str], pred: Any, timeout: float = 15.0) -> None:
    async def go() -> None:
        while not pred():
            line = await proc.stdout.readline()
            if not line:
                raise AssertionError("the watch ended early:\n" + "".join(lines))
            lines.append(line.decode())
    await asyncio.wait_for(go(), timeout)


async def test_watch_prints_added_changed_and_deleted(harness, tmp_path):
    sched, agent = await running(harness, tmp_path)
    url = harness.url
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "busched.cli.main", "get", "tasks", "-w", "--interval", "0.2", "--watch-timeout", "30",
        "--nats", url, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    lines: list[str] = []
    try:
        await read_until(proc, lines, lambda: sum(line.startswith("ADDED") for line in lines) == 2)
        assert lines[0].split()[:3] == ["EVENT", "NAMESPACE", "NAME"]
        more = tmp_path / "more.json"
        more.write_text(json.dumps({"tasks": [{"name": "extra", "namespace": "t", "job": "j",
                                               "requests": {"cpu": "100"}}]}))  # never fits: stays Pending
        assert await cli("apply", "-f", str(more), "--nats", url) == 0
        await read_until(proc, lines, lambda: any(line.startswith("ADDED") and " extra " in line for line in lines))
        assert await cli("delete", "-f", str(more), "--nats", url) == 0
        await read_until(proc, lines, lambda: any(line.startswith("DELETED") and " extra " in line
                                                  for line in lines))
        await agent.report_phase(sched.view("tasks")[0]["node"], "t/j-0", "Succeeded", exit_code=0)
        await read_until(proc, lines, lambda: any(line.startswith("MODIFIED") and " j-0 " in line
                                                  and "Succeeded" in line for line in lines))
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
    assert not any(line.startswith("MODIFIED") and " j-1 " in line for line in lines), lines  # unchanged


async def test_watch_timeout_ends_the_watch_and_json_events(harness, tmp_path, capsys):
    await running(harness, tmp_path)
    capsys.readouterr()
    assert await cli("get", "jobs", "t/j", "-o", "json", "-w", "--interval", "0.1", "--watch-timeout", "0.5",
                     "--nats", harness.url) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["type"], e["kind"], e["object"]["name"]) for e in events] == [("ADDED", "jobs", "j")]


def test_a_growing_age_is_no_change(capsys):
    from busched.cli.get import Printer

    now = [1_000_000.0]
    p = Printer("tasks", "wide", watch=True, clock=lambda: now[0])
    row = {"namespace": "t", "name": "a", "job": "j", "status": "Running", "node": "n", "attempt": 1,
           "requests": {"cpu": "1"}, "exitCode": None, "spec": {"name": "a", "created": 999_990.0}}
    seen = p.first([row])
    assert capsys.readouterr().out.splitlines()[1].split()[-1] == "10s"
    now[0] += 600
    seen = p.changes(seen, [row])
    assert capsys.readouterr().out == ""
    p.changes(seen, [{**row, "status": "Succeeded", "exitCode": 0}])
    assert capsys.readouterr().out.split()[:3] == ["MODIFIED", "t", "a"]
