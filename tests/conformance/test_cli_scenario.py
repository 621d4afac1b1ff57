"""`busched scenario run/check` from the command line: output shape, errors that name the field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from busched.cli.main import main

GOOD = """
config:
  actions: "enqueue, allocate, backfill"
  tiers:
  - plugins: [{name: priority}, {name: gang}, {name: conformance}]
  - plugins: [{name: drf}, {name: predicates}, {name: proportion}, {name: nodeorder}]
cluster:
  queues: [{name: q1}]
  nodes: [{name: n1, allocatable: {cpu: "2", memory: 4Gi, pods: 10}}]
  jobs: [{name: j1, namespace: ns, queue: q1, minMember: 2, phase: Pending}]
  tasks:
  - {name: t1, namespace: ns, job: j1, requests: {cpu: "1", memory: 1Gi}}
  - {name: t2, namespace: ns, job: j1, requests: {cpu: "1", memory: 1Gi}}
  - {name: t3, namespace: ns, job: j1}
expect:
  bindsCount: 3
  jobPhase: {ns/j1: Inqueue}
"""


def write(tmp_path: Path, text: str, name: str = "case.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_run_json_has_every_key(tmp_path, capsys):
    assert main(["scenario", "run", str(write(tmp_path, GOOD)), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("binds", "evicted", "pipelined", "jobPhase", "taskStatusCounts", "nodeScores",
                "predicateStatus", "jobEnqueueable"):
        assert key in out
    # the gang of two is placed by allocate, the BestEffort task by backfill
    assert out["binds"] == {"ns/t1": "n1", "ns/t2": "n1", "ns/t3": "n1"}
    assert out["taskStatusCounts"]["ns/j1"] == {"Binding": 3}


def test_check_counts_and_exit_codes(tmp_path, capsys):
    good = write(tmp_path, GOOD)
    assert main(["scenario", "check", str(good)]) == 0
    write(tmp_path, GOOD.replace("bindsCount: 3", "bindsCount: 1"), "bad.yaml")
    assert main(["scenario", "check", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "bindsCount: want 1, got 3" in out and "1 passed, 1 failed" in out


@pytest.mark.parametrize("mutation,message", [
    (('cpu: "2"', 'cpu: "2x"'), "node n1: allocatable.cpu: invalid quantity '2x'"),
    (("minMember: 2", "minMember: two"), "cluster.jobs[0].minMember"),
    (("{name: drf}", "{name: dfr}"), "config.tiers[1].plugins[0].name: unknown plugin 'dfr'"),
    (("enqueue, allocate", "enqueue, alocate"), "config.actions: unknown action 'alocate'"),
    (("phase: Pending", "phase: Waiting"), "job ns/j1: phase: unknown phase 'Waiting'"),
])
def test_errors_name_file_and_field(tmp_path, capsys, mutation, message):
    path = write(tmp_path, GOOD.replace(*mutation))
    assert main(["scenario", "run", str(path), "--json"]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and message in err


def test_console_script_runs(tmp_path):
    r = subprocess.run([sys.executable, "-m", "busched.cli.main", "scenario", "run", str(write(tmp_path, GOOD)),
                        "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and json.loads(r.stdout)["binds"]
