"""The agent tests' safety net: runs outlive their agent by design (busched.agent.process), so whatever a
test leaves running under its tmp_path (a failed test, an agent stopped mid-run) is killed afterwards."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest


def _wrappers_under(path: Path) -> list[int]:
    me, found = str(path).encode(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if b"procwrap.py" in cmd and me in cmd:
                found.append(int(entry))
    return found


@pytest.fixture(autouse=True)
def _no_run_left_behind(tmp_path: Path) -> Iterator[None]:
    yield
    for pid in _wrappers_under(tmp_path):
        try:
            os.killpg(pid, signal.SIGKILL)  # the wrapper leads its run's process group
        except (ProcessLookupError, PermissionError):
            pass
