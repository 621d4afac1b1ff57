"""The architecture, checked: import-linter's contracts (pyproject.toml, [tool.importlinter]) and no
import cycles between modules.

The contracts say: the layers from the domain (busched.api) up to the command line, each importing only
itself and what is below it, function-level imports included; actions and plugins independent of each
other; every plugin independent of every other; nats imported only by busched.bus.  A cycle between two
modules of one package is no layer violation, so it is checked here separately on grimp's import graph.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _structure():  # noqa: ANN202 - scripts/structure.py, loaded from its file (scripts/ is no package)
    spec = importlib.util.spec_from_file_location("busched_structure", ROOT / "scripts" / "structure.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_import_contracts_hold():
    run = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports; "
                          "raise SystemExit(lint_imports(no_cache=True, no_logo=True))"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "Contracts:" in run.stdout, run.stdout + run.stderr  # it ran and read the contracts
    assert run.returncode == 0, run.stdout + run.stderr


def test_contracts_cover_every_package():
    """A new top-level package or module must be placed in a layer (else nothing checks it)."""
    import tomllib

    layers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]["layers"]
    named = {n.strip(" ()") for layer in layers for n in layer.split("|")}
    pkg = ROOT / "busched"
    tops = {f"busched.{p.stem}" for p in pkg.iterdir()
            if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.stem != "__init__")}
    assert tops - named == set(), f"not in any layer: {sorted(tops - named)}"


def test_no_import_cycles():
    figures = _structure().import_figures(ROOT)
    assert figures["modules"] > 100
    assert figures["cycles"] == [], f"import cycles: {figures['cycles']}"


def test_nothing_below_the_command_line_reads_the_environment():
    """Settings are passed in: the environment is read by busched/cli (and the tests' conftest) only."""
    pkg = ROOT / "busched"
    bad = [str(p.relative_to(ROOT)) for p in sorted(pkg.rglob("*.py")) if p.relative_to(pkg).parts[0] != "cli"
           and any(s in p.read_text(encoding="utf-8") for s in ("os.environ", "getenv("))]
    assert not bad, f"modules below the command line reading the environment: {bad}"
