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
