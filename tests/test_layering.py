"""Layering contracts, checked on the import statements of every module.

- only busched.bus imports nats (the bus is one package);
- actions talk to the session, never to plugins, and plugins never to actions;
- the domain types (busched.api) import nothing above them;
- the framework does not import actions or plugins at module level (it loads them through registries).
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "busched"


def imports(path: Path, top_level_only: bool = False) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def modules(sub: str = "") -> list[Path]:
    return sorted((PKG / sub).rglob("*.py"))


def rel(p: Path) -> str:
    return p.relative_to(PKG.parent).as_posix()


def test_package_is_there():
    assert len(modules()) > 30


def test_only_the_bus_imports_nats():
    bad = [rel(p) for p in modules() if "bus" not in p.relative_to(PKG).parts[:1]
           and any(i == "nats" or i.startswith("nats.") for i in imports(p))]
    assert not bad, f"modules outside busched/bus importing nats: {bad}"


def test_actions_never_import_plugins():
    bad = [rel(p) for p in modules("actions") if any(i.startswith("busched.plugins") for i in imports(p))]
    assert not bad


def test_plugins_never_import_actions():
    bad = [rel(p) for p in modules("plugins") if any(i.startswith("busched.actions") for i in imports(p))]
    assert not bad


def test_api_imports_nothing_above_it():
    above = ("busched.framework", "busched.actions", "busched.plugins", "busched.cache", "busched.bus",
             "busched.scheduler", "busched.cli", "busched.kernels", "busched.fastpath")
    bad = [rel(p) for p in modules("api") if any(i.startswith(above) for i in imports(p))]
    assert not bad


def test_kernels_import_neither_plugins_nor_actions():
    """The array kernels sit under the plugins they vectorise: a plugin hands its per-node
    functions over; a kernel never reaches up for them, not even inside a function."""
    bad = [rel(p) for p in [*modules("kernels"), *modules("fastpath")]
           if any(i.startswith(("busched.plugins", "busched.actions")) for i in imports(p))]
    assert not bad


def test_cache_never_imports_plugins():
    bad = [rel(p) for p in modules("cache") if any(i.startswith("busched.plugins") for i in imports(p))]
    assert not bad


def test_framework_does_not_import_actions_or_plugins_at_module_level():
    bad = [rel(p) for p in modules("framework")
           if any(i.startswith(("busched.actions", "busched.plugins")) for i in imports(p, top_level_only=True))]
    assert not bad
