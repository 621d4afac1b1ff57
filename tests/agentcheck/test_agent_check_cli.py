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

BUSCHED = str(Path(sys.executable).with_name("busched"))


def _kill(pidfile: Path) -> None:
    try:
        pid = int(pidfile.read_text())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def check_agent_process(url: str, tmp_path: Path, agent_argv: list[str], node: str, *extra: str,
                        stop_signal: str = "TERM") -> list[dict]:
    """Start ``agent_argv`` in the background, run `busched agent-check --json` on ``node`` with a restart
    command that stops the agent (``stop_signal``: TERM as systemd would, KILL for a crash), waits until it is
    gone and starts it again; the results.  Every process started here is gone afterwards."""
    q = shlex.quote
    pidfile, logfile = tmp_path / "agent.pid", tmp_path / "agent.log"
    start = f"{' '.join(q(a) for a in agent_argv)} >>{q(str(logfile))} 2>&1 & echo $! >{q(str(pidfile))}"
    restart = (f"pid=$(cat {q(str(pidfile))}); kill -{stop_signal} $pid; "
               f"while kill -0 $pid 2>/dev/null; do sleep 0.05; done; {start}")
    subprocess.run(["sh", "-c", start], check=True, timeout=10)
    try:
        r = subprocess.run([BUSCHED, "agent-check", "--nats", url, "--node", node, "--timeout", "10",
                            "--restart-cmd", restart, "--json", *extra], capture_output=True, text=True, timeout=120)
    finally:
        _kill(pidfile)
        time.sleep(0.1)
    results = json.loads(r.stdout)
    assert [x["rule"] for x in results] == list(RULES)
    assert r.returncode == (1 if any(x["result"] == "fail" for x in results) else 0)
    for x in results:
        x["log"] = logfile.read_text() if x["result"] != "pass" else ""
    return results


def test_agent_check_passes_busched_agent_through_a_restart(nats_server, tmp_path):
    results = check_agent_process(nats_server.url, tmp_path, [
        BUSCHED, "agent", "--nats", nats_server.url, "--nodes", "1", "--prefix", "cli", "--heartbeat", "0.1",
        "--log-level", "warning"], "cli-00")
    assert {x["rule"]: (x["detail"], x["log"]) for x in results if x["result"] != "pass"} == {}


def test_agent_check_fails_when_no_agent_answers(nats_server):
    r = subprocess.run([BUSCHED, "agent-check", "--nats", nats_server.url, "--node", "nobody", "--timeout", "1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "FAIL  heartbeat" in r.stdout and "no heartbeat on busched.heartbeat.nobody" in r.stdout
    assert "0 passed, 1 failed, 13 skipped" in r.stdout
