"""The static checks run by the test suite, so CI fails when they fail: ruff (the rules in pyproject.toml)
over the package, tests and scripts, and mypy over the package (strict on api/, framework/, actions/ and
plugins/, as pyproject.toml's [tool.mypy] says)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff():
    run = _run("ruff", "check", "--no-cache", "busched", "tests", "scripts")
    assert run.returncode == 0, run.stdout + run.stderr


def test_mypy():
    run = _run("mypy", "busched")
    assert "Success" in run.stdout, run.stdout + run.stderr
    assert run.returncode == 0, run.stdout + run.stderr
