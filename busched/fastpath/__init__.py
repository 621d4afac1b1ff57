"""The fast path: array kernels, lent snapshots and cross-session memos, behind one border.

Everything here only makes the scheduler faster; the framework's plain loops are the
reference it is tested against (tests/fastpath/test_kernels*.py, tests/fastpath/test_shared_snapshot.py).
Whether it runs is a setting, `FastPathSettings`, chosen once: a `Cache` takes it (it lends
objects only with the kernels on, and verifies the lending when asked), hands it to each
snapshot, and the session opened over that snapshot holds its `FastPath` as ``ssn.fast``
(None with the kernels off: then every caller takes its plain path).

No module here reads the environment: the edges (the command line, the tests' conftest)
read ``BUSCHED_KERNELS`` / ``BUSCHED_VERIFY_SHARED`` with `FastPathSettings.from_env` and
pass the value in, or make it the default with `use_by_default`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["FastPathSettings", "FastPath", "SETTINGS_KEY", "default_settings", "use_by_default",
           "settings_of", "open_for"]

# where a snapshot carries its cache's settings (ClusterSnapshot.others)
SETTINGS_KEY = "fastpath"


@dataclass(frozen=True)
class FastPathSettings:
    """``kernels``: array kernels, lent snapshots and memos (False: the plain reference loops).
    ``verify``: fingerprint every lent object and check it when its lease comes back."""

    kernels: bool = True
    verify: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> FastPathSettings:
        """For the edges only: ``BUSCHED_KERNELS=0`` turns the kernels off,
        ``BUSCHED_VERIFY_SHARED`` (anything but "" or "0") turns verification on."""
        return cls(kernels=env.get("BUSCHED_KERNELS", "1") != "0",
                   verify=env.get("BUSCHED_VERIFY_SHARED", "") not in ("", "0"))


_default = FastPathSettings()


def default_settings() -> FastPathSettings:
    """What a cache (or a session over a hand-built snapshot) given no settings takes."""
    return _default


def use_by_default(settings: FastPathSettings) -> FastPathSettings:
    """Make ``settings`` the default (an edge's choice); returns the one it replaces."""
    global _default
    was, _default = _default, settings
    return was


def settings_of(others: Mapping[str, Any]) -> FastPathSettings:
    """A snapshot's settings (its ``others``), or the default for a snapshot built by hand."""
    s = others.get(SETTINGS_KEY)
    return s if isinstance(s, FastPathSettings) else _default


class FastPath:
    """A session's fast path, chosen as it opens (``ssn.fast``); sessions with the kernels off
    have none.  What the framework calls, each the twin of a plain loop it keeps:

    * ``predicate_nodes(ssn, search, nodes, failures, lazy, scan)`` and ``kept_reasons(arrays, request,
      explain)``: a node search decided by masks (`busched.fastpath.search`);
    * ``scores(ssn, task, nodes)``, ``pick_unless_nan(ssn, nodes, scores)``,
      ``gradients(ssn, task, nodes, soft)``: scoring, choosing and bucketing nodes
      (`busched.fastpath.select`);
    * ``gradients_found(ssn, task, nodes, fn, start, to_find)``: allocate's search and bucketing
      in one pass, for its common case (`busched.fastpath.select_run`);
    * ``batch_choose(ssn, task, nodes, fn, start, to_find)``: the node allocate would choose, from
      vectors kept for the task's template across tasks (`busched.fastpath.batch`).

    The functions are looked up once, here (the array modules are imported only by a session
    that uses them); calling them costs what calling the modules' functions costs.
    """

    __slots__ = ("settings", "predicate_nodes", "kept_reasons", "scores", "pick_unless_nan", "gradients",
                 "gradients_found", "batch_choose")

    def __init__(self, settings: FastPathSettings) -> None:
        from busched.fastpath import batch, search, select, select_run

        self.settings = settings
        self.predicate_nodes = search.predicate_nodes
        self.kept_reasons = search.KeptReasons
        self.scores = select.scores
        self.pick_unless_nan = select.pick_unless_nan
        self.gradients = select.gradients
        self.gradients_found = select_run.gradients_found
        self.batch_choose = batch.choose


def open_for(others: Mapping[str, Any]) -> FastPath | None:
    """The fast path for a session over a snapshot with these ``others``, or None (kernels off)."""
    s = settings_of(others)
    return FastPath(s) if s.kernels else None
