"""Fixtures every test folder may use, found by pytest without imports: a real nats-server per test (or a
cluster of three, `nats_cluster`) and an in-process `Harness` on it (tests/nats_fixture.py holds the helpers
they are built from).  It is also the tests' edge for the fast path's switches: ``BUSCHED_KERNELS`` and
``BUSCHED_VERIFY_SHARED`` are read from the environment here and made the default (busched.fastpath), so the
whole suite can be run with the kernels off or the lending verified.

tests/faults/conftest.py adds the fault suite's own (a cluster of separate processes)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from busched import fastpath
from busched.api import shared
from busched.bus.server_cluster import NatsCluster
from busched.framework import arguments
from tests.nats_fixture import Harness, NatsServer

fastpath.use_by_default(fastpath.FastPathSettings.from_env(os.environ))
arguments.STRICT = True  # a plugin or action reading an argument it does not declare fails its test at once


@pytest.fixture(autouse=True)
def _shared_stay_unchanged() -> Iterator[None]:
    """After every test the containers and request maps many objects share (busched.api.shared) are as
    they were: a test, or the code it runs, that filled one would have changed every object holding it."""
    yield
    assert shared.empties_intact(), "a shared empty container was filled in place"
    changed = [k for k, m in shared._REQUESTS.items() if tuple(m.items()) != k]
    assert not changed, f"shared request maps changed in place: {changed[:3]}"


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A fresh nats-server per test; stopped (and its data dropped with tmp_path) afterwards."""
    srv = NatsServer(tmp_path / "nats", host="127.0.0.1", port=0)
    srv.start(timeout=10)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def nats_cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    """Three nats-servers routed into one JetStream cluster (a meta leader elected); stopped afterwards."""
    c = NatsCluster(tmp_path / "nats-cluster")
    c.start(timeout=30)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
async def harness(nats_server: NatsServer) -> AsyncIterator[Harness]:
    """Schedulers and agents on `nats_server`, each on its own connection; all stopped afterwards."""
    h = Harness(nats_server.url)
    try:
        yield h
    finally:
        await h.close()
