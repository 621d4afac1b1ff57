"""Run a NATS cluster of local nats-server processes (JetStream on each), for tests and benchmarks.

Three servers on loopback, each with its own client, route and monitoring port and its own JetStream
store, routed to the other two under one cluster name.  A cluster is ready when every running server says
it is healthy (its monitoring ``/healthz`` answers 200 only once it has recovered the JetStream meta layer,
in contact with an elected meta leader, and its replicas of streams and consumers are current; the
``js-enabled-only`` and ``js-server-only`` variants answer 200 before that) and one names the meta leader
(``/jsz``) — the server's own readiness checks, polled with a deadline.

A server can be killed (SIGKILL: no goodbye to its peers, as a crashed machine) and started again on
the same ports and store, where it rejoins and catches up its stream replicas by itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from busched.bus.server import NatsServer, NatsServerError, free_port

__all__ = ["NatsCluster"]


class NatsCluster:
    """``size`` nats-servers routed into one JetStream cluster, data under ``root``."""

    def __init__(self, root: str | os.PathLike[str], *, size: int = 3, host: str = "127.0.0.1",
                 name: str = "busched", binary: str | None = None) -> None:
        if size < 1:
            raise ValueError("a cluster needs at least one server")
        self.root = Path(root)
        self.name = name
        self.host = host
        self.size = size
        self.binary = binary
        self.servers: list[NatsServer] = self._plan()

    def _plan(self) -> list[NatsServer]:
        """The servers, on ports free as this is called (client, route and monitoring ports of each)."""
        host, name = self.host, self.name
        routes = [free_port(host) for _ in range(self.size)]
        servers = []
        for i, route in enumerate(routes):
            others = ",".join(f"nats://{host}:{p}" for j, p in enumerate(routes) if j != i)
            args = ["--cluster", f"nats://{host}:{route}", "--cluster_name", name, "--routes", others]
            servers.append(NatsServer(self.root / f"n{i}", host=host, monitor_port=free_port(host),
                                      binary=self.binary, log_file=str(self.root / f"n{i}.log"), args=args,
                                      server_name=f"{name}-n{i}"))
        return servers

    @property
    def url(self) -> str:
        """Every server's client URL, comma separated (what ``--nats`` takes)."""
        return ",".join(s.url for s in self.servers)

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def start(self, timeout: float = 30.0, attempts: int = 3) -> NatsCluster:
        """Start every server and wait until the cluster is ready.  A port found free when planned can be
        taken before its server binds it: the kernel hands the same range out as the source ports of
        outgoing connections, the first servers' routes among them.  Such a start is made again on newly
        chosen ports, at most ``attempts`` times in all (each its own bounded wait)."""
        for attempt in range(1, attempts + 1):
            try:
                for s in self.servers:
                    s.start(timeout=timeout)
                self.wait_ready(timeout)
                return self
            except NatsServerError as e:
                self.stop()
                if attempt == attempts or not _port_taken(e):
                    raise
                self.servers = self._plan()
            except BaseException:
                self.stop()
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def stop(self) -> None:
        for s in self.servers:
            s.stop()

    def kill(self, i: int) -> None:
        """SIGKILL server ``i``; its ports and store stay for `restart`."""
        s = self.servers[i]
        p = s.proc
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGKILL)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not refused
                pass
        s.stop()  # forget the process, close its stderr file

    def restart(self, i: int, timeout: float = 30.0) -> None:
        """Start server ``i`` again on its ports and store and wait until the cluster is healthy again."""
        self.servers[i].start(timeout=timeout)
        self.wait_ready(timeout)

    def __enter__(self) -> NatsCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- readiness -------------------------------------------------------------------------------------------------
    def _get(self, srv: NatsServer, path: str) -> tuple[int, dict[str, object]]:
        try:
            with urllib.request.urlopen(f"http://{self.host}:{srv.monitor_port}{path}", timeout=2) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, {}
        except (OSError, ValueError):
            return 0, {}

    def running(self) -> list[NatsServer]:
        return [s for s in self.servers if s.proc is not None and s.proc.poll() is None]

    def healthy(self) -> bool:
        """Every running server says it is healthy: meta layer recovered, its stream and consumer replicas current."""
        up = self.running()
        return bool(up) and all(self._get(s, "/healthz")[0] == 200 for s in up)

    def meta_leader(self) -> str | None:
        """The server name of the JetStream meta leader, as the first running server that knows it says."""
        for s in self.running():
            status, jsz = self._get(s, "/jsz")
            meta = jsz.get("meta_cluster") if status == 200 else None
            if isinstance(meta, dict) and meta.get("leader"):
                return str(meta["leader"])
        return None

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.healthy() and self.meta_leader():
                return
            time.sleep(0.1)
        raise NatsServerError(f"the NATS cluster {self.name} did not elect a JetStream meta leader within "
                              f"{timeout:g}s (logs under {self.root})")

    def clients(self, i: int) -> list[str]:
        """The names of the client connections server ``i`` holds (its monitoring ``/connz``)."""
        status, connz = self._get(self.servers[i], "/connz?limit=1024")
        conns = connz.get("connections") if status == 200 else None
        return [str(c.get("name", "")) for c in conns if isinstance(c, dict)] if isinstance(conns, list) else []

    def server_of(self, client: str) -> int | None:
        """Which running server holds the client connection named ``client`` (None: none does now)."""
        for i, s in enumerate(self.servers):
            if s in self.running() and client in self.clients(i):
                return i
        return None

    def index_of(self, server_name: str) -> int:
        """Which of ours is the server named ``server_name`` (as JetStream names leaders)."""
        for i, s in enumerate(self.servers):
            if s.server_name == server_name:
                return i
        raise KeyError(server_name)


def _port_taken(e: NatsServerError) -> bool:
    """Whether a server could not start because one of its ports was taken (by `NatsServer.check_ports`, or
    nats-server's own "address already in use" when the port went between that check and its bind)."""
    text = str(e)
    return "already in use" in text
