"""A real headless Chromium for the status page's tests and its screenshot (Debian's ``chromium``
package; ``.ci/run`` installs it when it is missing).

`dump_dom` gives the page as the browser rendered it, `screenshot` saves a PNG; both run one
``chromium --headless`` process with a throwaway profile, bounded by a timeout.  `require` decides
what a missing browser means: a failure under CI (``CI`` set: CI must have it), a skip elsewhere,
with how to install it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

__all__ = ["CHROMIUM", "require", "dump_dom", "screenshot"]

CHROMIUM = "/usr/bin/chromium"
TIMEOUT = 60.0
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars")


def find() -> str | None:
    return CHROMIUM if os.access(CHROMIUM, os.X_OK) else shutil.which("chromium")


def require() -> str:
    """Chromium's path; without one, fail under CI and skip elsewhere."""
    path = find()
    if path is None:
        why = (f"no Chromium at {CHROMIUM}: install Debian's package "
               "(sudo apt-get update && sudo apt-get install -y chromium)")
        if os.environ.get("CI"):
            pytest.fail(f"{why}; CI must have it (.ci/run installs it)")
        pytest.skip(why)
    return path


def _run(browser: str, *args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="busched-chromium-") as profile:
        return subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                              text=True, timeout=timeout, check=False)


def dump_dom(browser: str, url: str, *, timeout: float = TIMEOUT) -> str:
    """The DOM after the page loaded, serialised."""
    done = _run(browser, "--dump-dom", url, timeout=timeout)
    assert done.returncode == 0 and done.stdout, f"chromium --dump-dom: {done.returncode}: {done.stderr[-2000:]}"
    return done.stdout


def screenshot(browser: str, url: str, out: Path, *, size: str = "1280,1000", timeout: float = TIMEOUT) -> Path:
    """A PNG of the page at ``size`` (width,height) in ``out``."""
    out = out.resolve()
    out.unlink(missing_ok=True)
    done = _run(browser, f"--screenshot={out}", f"--window-size={size}", url, timeout=timeout)
    assert done.returncode == 0 and out.exists(), f"chromium --screenshot: {done.returncode}: {done.stderr[-2000:]}"
    return out
