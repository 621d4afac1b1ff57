"""`busched up`: nats-server, scheduler, fleet and demo in one command; bounded mode and Ctrl-C both stop cleanly."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

UP = [sys.executable, "-m", "busched.cli.main", "up", "--nats-port", "0", "--nats-monitor-port", "-1",
      "--http", "127.0.0.1:0", "--period", "0.1", "--heartbeat", "0.2", "--duration", "0.5", "--nodes", "3"]


async def _spawn(tmp_path, *extra: str) -> asyncio.subprocess.Process:  # noqa: ANN001
    return await asyncio.create_subprocess_exec(*UP, *extra, cwd=tmp_path, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL,
                                                env={**os.environ, "PYTHONUNBUFFERED": "1"})


async def _read_until(proc: asyncio.subprocess.Process, needle: str, out: list[str], timeout: float) -> None:
    async def loop() -> None:
        while True:
            line = await proc.stdout.readline()
            if not line:
                raise AssertionError(f"exited before {needle!r}:\n" + "".join(out))
            out.append(line.decode())
            if needle in out[-1]:
                return
    await asyncio.wait_for(loop(), timeout)


async def test_up_bounded_mode_runs_the_demo_and_stops_by_itself(tmp_path):
    proc = await _spawn(tmp_path, "--exit-after", "3")
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    text = out.decode()
    assert proc.returncode == 0, text
    assert "metrics at http://127.0.0.1:" in text and "/metrics" in text
    assert "3 simulated nodes" in text and "applied the demo workload" in text
    assert "Succeeded" in text, text
    assert text.rstrip().endswith("nats-server stopped"), text
    assert (tmp_path / ".busched" / "nats-server.log").exists()


async def test_up_stops_everything_on_ctrl_c(tmp_path):
    proc = await _spawn(tmp_path)
    out: list[str] = []
    try:
        await _read_until(proc, "Succeeded", out, 20)
        proc.send_signal(signal.SIGINT)
        rest, _ = await asyncio.wait_for(proc.communicate(), 15)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    text = "".join(out) + rest.decode()
    assert proc.returncode == 0, text
    assert "stopping" in text and text.rstrip().endswith("nats-server stopped"), text


async def test_up_says_when_the_port_is_taken_and_exits_non_zero(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = str(s.getsockname()[1])
        proc = await asyncio.create_subprocess_exec(*UP, "--nats-port", port, "--exit-after", "3", cwd=tmp_path,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                                                    stdin=asyncio.subprocess.DEVNULL)
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    text = out.decode()
    assert proc.returncode == 1, text
    assert f"127.0.0.1:{port} is already in use" in text, text


def test_nats_server_start_raises_with_the_cause(tmp_path):
    import socket

    import pytest

    from busched.bus.server import NatsServer, NatsServerError
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(NatsServerError, match="already in use"):
            NatsServer(tmp_path / "a", port=port).start()
        with pytest.raises(NatsServerError, match="monitoring port .* already in use"):
            NatsServer(tmp_path / "b", monitor_port=port).start()
    with pytest.raises(NatsServerError, match="Parse error"):  # what nats-server says before its log is open
        NatsServer(tmp_path / "c", config="not valid: {{{").start()


async def test_up_notices_earlier_state_and_reset_starts_fresh(tmp_path):
    first = await _spawn(tmp_path, "--exit-after", "2", "--demo-every", "0.3")
    out, _ = await asyncio.wait_for(first.communicate(), 30)
    assert first.returncode == 0, out.decode()
    assert "a new demo job every 0.3s" in out.decode()
    creds = sorted(p.name for p in (tmp_path / ".busched" / "auth").iterdir())
    again = await _spawn(tmp_path, "--exit-after", "1", "--no-demo")
    out, _ = await asyncio.wait_for(again.communicate(), 30)
    assert again.returncode == 0 and "holds the JetStream state of an earlier run" in out.decode(), out.decode()
    assert "busched up --reset" in out.decode()
    fresh = await _spawn(tmp_path, "--exit-after", "1", "--no-demo", "--reset")
    out, _ = await asyncio.wait_for(fresh.communicate(), 30)
    text = out.decode()
    assert fresh.returncode == 0 and "--reset: deleted" in text, text
    assert "holds the JetStream state" not in text, text
    assert "Succeeded" not in text and "Running" not in text, text  # nothing of the earlier runs came back
    assert sorted(p.name for p in (tmp_path / ".busched" / "auth").iterdir()) == creds  # credentials kept


def test_arrivals_make_small_gangs_with_durations():
    from busched.agent import DURATION_KEY
    from busched.cli.up import Arrivals

    a = Arrivals(10.0, 1.0, seed=1)
    specs = [a.make() for _ in range(5)]
    names = {s.jobs[0].name for s in specs}
    assert len(names) == 5 and all(n.startswith(a.prefix) for n in names)
    for s in specs:
        assert s.jobs[0].min_member == len(s.tasks) and 1 <= len(s.tasks) <= 3
        assert all(t.job == s.jobs[0].name and 3 <= float(t.annotations[DURATION_KEY]) <= 10 for t in s.tasks)
