"""Fixtures of the fault-injection suite: a live cluster of separate processes per test (see README.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.faults.cluster import Cluster


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "faults: fault-injection tests against a live cluster of processes "
                                       "(tests/faults; run alone with `python -m pytest tests/faults`)")


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    for item in items:
        if "tests/faults/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.faults)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Any:
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


@pytest.fixture
async def cluster(request: Any, tmp_path: Any) -> AsyncIterator[Cluster]:
    """A nats-server and an observer; the test starts schedulers and agents.  On failure (or xfail) the tail
    of every process's output is printed; every process is ended afterwards."""
    async for c in _cluster(request, Cluster(tmp_path)):
        yield c


@pytest.fixture
async def cluster3(request: Any, tmp_path: Any) -> AsyncIterator[Cluster]:
    """As `cluster` on a NATS cluster of three servers (`cluster3.nats`, a `NatsCluster`), every stream made
    with three replicas and every process given the three URLs."""
    async for c in _cluster(request, Cluster(tmp_path, servers=3, replicas=3)):
        yield c


async def _cluster(request: Any, c: Cluster) -> AsyncIterator[Cluster]:
    tmp_path = c.dir
    await c.start()
    try:
        yield c
    finally:
        rep = getattr(request.node, "rep_call", None)
        if rep is None or rep.failed or getattr(rep, "wasxfail", None) is not None:
            print(f"\n===== process output ({tmp_path}) =====\n{c.tails()}")
            if c.observer is not None and c.observer.violations:
                print("two holders at once:\n  " + "\n  ".join(str(v) for v in c.observer.violations[:20]))
        await c.close()
