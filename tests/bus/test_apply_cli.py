"""`busched apply`: warnings about missing queues/jobs (in the files and on the bus) and --dry-run, over a real
nats-server."""

from __future__ import annotations

import asyncio
import json

import pytest

from busched.bus import Bus
from busched.bus import subjects as S
from busched.bus.apply import load_cluster_file, missing_references
from busched.cli.main import main

Q1 = {"name": "q1", "weight": 1}
J1 = {"name": "j1", "namespace": "ns", "queue": "q1", "minMember": 1}
T1 = {"name": "t1", "namespace": "ns", "job": "j1", "requests": {"cpu": "1", "memory": "1Gi"}}
J2 = {"name": "j2", "namespace": "ns", "queue": "nowhere", "minMember": 1}  # a missing queue
T2 = {"name": "t2", "namespace": "ns", "job": "ghost", "requests": {"cpu": "1", "memory": "1Gi"}}  # a missing job


def doc(queues=(), jobs=(), tasks=()) -> str:  # noqa: ANN001
    return json.dumps({"queues": list(queues), "jobs": list(jobs), "tasks": list(tasks)})


@pytest.fixture(autouse=True)
def _here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./.busched/auth credentials discovered
    for var in ("BUSCHED_NATS", "BUSCHED_NATS_CREDS", "BUSCHED_NATS_USER", "BUSCHED_NATS_PASSWORD"):
        monkeypatch.delenv(var, raising=False)


def _file(tmp_path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def _subjects(url: str) -> set[str]:
    async def go() -> set[str]:
        bus = await Bus.connect(url)
        try:
            await bus.ensure_streams()
            info = await bus.js.stream_info(S.STATE_STREAM, subjects_filter=">")
            return set(info.state.subjects or {})
        finally:
            await bus.close()
    return asyncio.run(go())


def test_missing_references_within_the_file(tmp_path):
    c = load_cluster_file(_file(tmp_path, "a.yaml", doc([Q1], [J1], [T1])))
    assert missing_references(c) == []
    c = load_cluster_file(_file(tmp_path, "b.yaml", doc([], [J2], [T1, T2])))
    assert missing_references(c) == [("job", "ns/j2", "queue", "nowhere"), ("task", "ns/t1", "job", "ns/j1"),
                                      ("task", "ns/t2", "job", "ns/ghost")]


def test_apply_warns_about_what_neither_the_file_nor_the_bus_has(nats_server, tmp_path, capsys):
    url = nats_server.url
    assert main(["apply", "-f", _file(tmp_path, "base.yaml", doc([Q1], [J1])), "--nats", url]) == 0
    capsys.readouterr()
    # t1's job j1 is on the bus: no warning; the orphans are warned about, and still applied
    rc = main(["apply", "-f", _file(tmp_path, "more.yaml", doc([], [J2], [T1, T2])), "--nats", url])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "applied 3 objects" in out
    assert "job ns/j2 names queue nowhere, which is neither in the files nor on the bus" in err
    assert "task ns/t2 names job ns/ghost, which is neither in the files nor on the bus" in err
    assert "ns/j1" not in err and "q1" not in err
    # a job deleted from the bus counts as missing
    assert main(["delete", "-f", _file(tmp_path, "job.yaml", doc([], [J1])), "--nats", url]) == 0
    capsys.readouterr()
    assert main(["apply", "-f", _file(tmp_path, "task.yaml", doc([], [], [T1])), "--nats", url]) == 0
    assert "task ns/t1 names job ns/j1, which is neither" in capsys.readouterr().err


def test_references_across_files_of_one_apply_are_not_warned_about(nats_server, tmp_path, capsys):
    files = [_file(tmp_path, "q.yaml", doc([Q1])), _file(tmp_path, "j.yaml", doc([], [J1])),
             _file(tmp_path, "t.yaml", doc([], [], [T1]))]
    assert main(["apply", *sum((["-f", f] for f in files), []), "--nats", nats_server.url]) == 0
    assert "warning" not in capsys.readouterr().err


def test_dry_run_publishes_nothing(nats_server, tmp_path, capsys):
    url = nats_server.url
    f = _file(tmp_path, "all.yaml", doc([Q1], [J1, J2], [T1, T2]))
    assert main(["apply", "--dry-run", "-f", f, "--nats", url]) == 0
    out, err = capsys.readouterr()
    assert "would apply 5 objects (dry run: nothing published)" in out
    lines = [line.strip() for line in out.splitlines()[1:]]
    assert lines[0] == f"upsert queue q1 -> {S.state_subject('queue', 'q1')}"
    assert lines[-1].startswith("upsert job ") and any(line.startswith("upsert task ns/t2") for line in lines)
    assert "queue nowhere" in err and "job ns/ghost" in err
    assert _subjects(url) == set()
    assert main(["delete", "--dry-run", "-f", f, "--nats", url]) == 0
    out = capsys.readouterr().out
    assert "would delete 5 objects" in out and out.splitlines()[1].strip().startswith("delete job ")


def test_dry_run_without_a_bus_checks_the_file_only(tmp_path, capsys):
    from busched.bus.server import free_port
    f = _file(tmp_path, "o.yaml", doc([], [J2], [T2]))
    assert main(["apply", "--dry-run", "-f", f, "--nats", f"nats://127.0.0.1:{free_port()}"]) == 0
    out, err = capsys.readouterr()
    assert "would apply 2 objects" in out
    assert "cannot check the references against the bus" in err
    assert "job ns/j2 names queue nowhere, which is not in the files (the bus was not asked)" in err


def test_dry_run_still_refuses_a_bad_file(tmp_path, capsys):
    bad = doc([], [], [{**T1, "requests": {"cpu": "2 cores"}}])
    assert main(["apply", "--dry-run", "-f", _file(tmp_path, "bad.yaml", bad)]) == 2
    assert "error:" in capsys.readouterr().err
