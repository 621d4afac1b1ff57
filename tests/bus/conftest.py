"""Fixtures of the bus tests: a nats-server with `busched up`'s generated users."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from busched.bus.auth import AuthDir
from busched.bus.server import NatsServer

SECURED_NODE = "node-00"  # the one agent the generated users include


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[NatsServer, AuthDir]]:
    """A server with the generated users (scheduler, cli, one agent for `SECURED_NODE`) of `busched up`."""
    auth = AuthDir(tmp_path / "auth")
    srv = NatsServer(tmp_path / "nats", config_file=auth.server_config)
    auth.ensure(url=srv.url, agents={SECURED_NODE: [SECURED_NODE]})
    srv.start()
    try:
        yield srv, auth
    finally:
        srv.stop()
