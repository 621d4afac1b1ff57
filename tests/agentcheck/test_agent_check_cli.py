"""`busched agent-check` as CI runs it: the command against `busched agent` in its own process, restarted
by ``--restart-cmd`` (a shell command that stops the agent and starts it again), over a real nats-server."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from busched.agentcheck import RULES


def _kill(pidfile: Path) -> None:
    try:
        pid = int(pidfile.read_text())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_agent_check_passes_busched_agent_through_a_restart(nats_server, tmp_path):
    busched = str(Path(sys.executable).with_name("busched"))
    pidfile, logfile = tmp_path / "agent.pid", tmp_path / "agent.log"
    agent = " ".join(shlex.quote(a) for a in [busched, "agent", "--nats", nats_server.url, "--nodes", "1",
                                              "--prefix", "cli", "--heartbeat", "0.1", "--log-level", "warning"])
    start = f"{agent} >>{shlex.quote(str(logfile))} 2>&1 & echo $! >{shlex.quote(str(pidfile))}"
    # stop the agent (SIGTERM, as systemd would), wait for it to be gone, start it again
    restart = (f"pid=$(cat {shlex.quote(str(pidfile))}); kill $pid; "
               f"while kill -0 $pid 2>/dev/null; do sleep 0.05; done; {start}")
    subprocess.run(["sh", "-c", start], check=True, timeout=10)
    try:
        r = subprocess.run([busched, "agent-check", "--nats", nats_server.url, "--node", "cli-00", "--timeout", "10",
                            "--restart-cmd", restart, "--json"], capture_output=True, text=True, timeout=120)
    finally:
        _kill(pidfile)
        time.sleep(0.1)
    results = json.loads(r.stdout)
    assert [x["rule"] for x in results] == list(RULES)
    assert {x["rule"]: x["detail"] for x in results if x["result"] != "pass"} == {}, logfile.read_text()
    assert r.returncode == 0


def test_agent_check_fails_when_no_agent_answers(nats_server):
    busched = str(Path(sys.executable).with_name("busched"))
    r = subprocess.run([busched, "agent-check", "--nats", nats_server.url, "--node", "nobody", "--timeout", "1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "FAIL  heartbeat" in r.stdout and "no heartbeat on busched.heartbeat.nobody" in r.stdout
    assert "0 passed, 1 failed, 13 skipped" in r.stdout
