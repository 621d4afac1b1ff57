"""The plugin registry: plugins declare what they need, stand alone, and keep state only where handed it."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from busched.api.snapshot import ClusterSnapshot
from busched.builtin import open_session, quiet_cycles
from busched.framework.arguments import Arguments
from busched.framework.config import load_config
from busched.framework.plugin_state import state_of
from busched.plugins import PLUGINS

PLUGINS_DIR = Path(__file__).resolve().parents[2] / "busched" / "plugins"
# (numa-aware keeps cpus taken across cycles, extender asks a service whose state changes without a cluster
# event: their cycles are never skipped as quiet either)
CLOCK_READERS = {"sla", "tdm", "rescheduling", "usage", "cdp", "numa-aware", "extender"}


def _config(*names: str) -> Any:
    plugins = "".join(f"  - name: {n}\n" for n in names)
    return load_config(f'actions: "allocate"\ntiers:\n- plugins:\n{plugins}')


def test_every_plugin_declares_reads_clock() -> None:
    for name in PLUGINS:
        cls = PLUGINS[name].plugin_class()  # type: ignore[attr-defined]
        assert isinstance(cls.__dict__.get("reads_clock"), bool), name
    assert {n for n in PLUGINS if PLUGINS.reads_clock(n)} == CLOCK_READERS


def test_quiet_cycles_asks_the_registry() -> None:
    assert quiet_cycles(_config("priority", "gang", "predicates")).enabled
    for name in CLOCK_READERS:
        assert not quiet_cycles(_config("priority", name)).enabled, name

    class Ticking:
        name = "ticking"
        reads_clock = True

        def __init__(self, arguments: Arguments) -> None:
            pass

        def on_session_open(self, ssn: Any) -> None:
            pass

    registry = PLUGINS.with_entries({"ticking": Ticking})
    config = load_config('actions: "allocate"\ntiers:\n- plugins:\n  - name: priority\n  - name: ticking\n',
                         known_plugins=registry)
    assert not quiet_cycles(config, registry).enabled
    assert quiet_cycles(_config("priority"), registry).enabled


def test_the_registry_hands_plugins_arguments() -> None:
    plugin = PLUGINS["binpack"]({"binpack.weight": 3})
    assert isinstance(plugin.arguments, Arguments) and plugin.weights.weight == 3


def _plugin_imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            mods = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        else:
            continue
        out.update(m for m in mods if m.startswith("busched.plugins."))
    return out


def test_no_plugin_imports_another_plugin() -> None:
    for path in PLUGINS_DIR.rglob("*.py"):
        rel = path.relative_to(PLUGINS_DIR)
        if rel.name == "__init__.py" and rel.parent == Path("."):
            continue  # the registry itself
        own = rel.parts[0].removesuffix(".py")  # a module, or a package's first part
        for mod in _plugin_imports(path):
            assert mod.split(".")[2] == own, f"{rel} imports {mod}"


def test_state_is_the_handed_dict_or_a_fresh_one_per_session() -> None:
    config = _config("priority")
    handed: dict[str, Any] = {}
    snap = ClusterSnapshot()
    snap.others["plugin_state"] = handed
    ssn = open_session(snap, config)
    state_of(ssn, "tdm")["last"] = 1.0
    assert handed["tdm"] == {"last": 1.0}

    first = open_session(ClusterSnapshot(), config)
    state_of(first, "tdm")["last"] = 2.0
    assert state_of(first, "tdm") == {"last": 2.0}  # kept for the session
    second = open_session(ClusterSnapshot(), config)
    assert state_of(second, "tdm") == {}  # nothing leaks through the process
