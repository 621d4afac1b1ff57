"""Hot reload of the scheduler's configuration file (what Volcano's scheduler does when its
ConfigMap changes): `busched run --config FILE` re-reads the file when it changes, and at once on
SIGHUP.

A file that does not parse, or names an unknown action or plugin, is refused with the field named
(logged, ``busched_config_reloads_total{result="refused"}``, ``busched_config_last_reload_successful``
0) and the previous configuration stays in force; a valid one goes to `Scheduler.use_config` and
decides from the next cycle on.  A change is what the file holds, not its timestamp: a write of the
same text does nothing.  The file is read here, at the command line (it is the command's argument).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from busched.framework.config import ConfigError, SchedulerConfig
from busched.metrics import SchedulerMetrics

__all__ = ["ConfigFile", "watch", "install_sighup"]

log = logging.getLogger("busched.run")


class ConfigFile:
    """The configuration file a scheduler runs with, and what it held when last read."""

    def __init__(self, path: str | Path, load: Callable[[str], SchedulerConfig],
                 apply: Callable[[SchedulerConfig], None], metrics: SchedulerMetrics) -> None:
        self.path = Path(path)
        self.load = load  # path -> configuration, raising ConfigError / OSError (cli.run.load_scheduler_config)
        self.apply = apply
        self.metrics = metrics
        self._digest = self._read_digest()
        self.last_error = ""

    def state(self) -> dict[str, str]:
        """What the status page shows of the file (`busched.scheduler.overview`): its path, and why its
        last read was refused ("" when it was applied: the configuration in force is the file's)."""
        return {"file": str(self.path), "error": self.last_error}

    def _read_digest(self) -> str | None:
        try:
            return hashlib.sha256(self.path.read_bytes()).hexdigest()
        except OSError:
            return None

    def check(self) -> str:
        """Read the file again: "unchanged", "applied" or "refused" (the previous configuration stays)."""
        digest = self._read_digest()
        if digest is None or digest == self._digest:
            return "unchanged"  # (a file being replaced may be missing for a moment: the next check sees it)
        self._digest = digest
        try:
            config = self.load(str(self.path))
        except (ConfigError, OSError, ValueError) as e:
            self.last_error = str(e)
            self.metrics.config_reloads.labels("refused").inc()
            self.metrics.config_reload_ok.set(0)
            log.error("configuration %s refused, the previous one stays in force: %s", self.path, e)
            return "refused"
        self.last_error = ""
        self.apply(config)
        log.info("configuration %s applied (actions: %s)", self.path, ", ".join(config.actions) or "none")
        return "applied"


async def watch(cfg: ConfigFile, interval: float, stop: asyncio.Event) -> None:
    """Check ``cfg`` every ``interval`` seconds until ``stop`` is set."""
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), interval)
        except asyncio.TimeoutError:
            pass
        if not stop.is_set():
            cfg.check()  # (on the event loop: applying touches the scheduler's state)


def install_sighup(loop: Any, cfg: ConfigFile) -> None:
    """SIGHUP reads the file at once (where the platform has the signal)."""
    import signal

    if hasattr(signal, "SIGHUP"):
        loop.add_signal_handler(signal.SIGHUP, cfg.check)
