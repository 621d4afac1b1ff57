"""Structural figures of the busched package, for before/after comparisons of a redesign.

    python scripts/structure.py [--root DIR] [--json] [--no-mypy]

Prints: import cycles between modules (function-level imports count; imports made only for the type
checker do not), imports that go
upward against the layer order below, the mypy error count (whole package, and strict on the
layers the issue asks to be strict), and the largest modules and functions.  ``--root`` points
at another checkout (an A/B from outside the working tree).
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

# lowest first; a module may import its own layer or any lower one (grimp sees function-level imports too)
LAYERS: list[tuple[str, ...]] = [
    ("busched.api",),
    ("busched.fastpath", "busched.kernels"),
    ("busched.cache",),
    ("busched.framework",),
    ("busched.actions", "busched.plugins"),
    ("busched.builtin", "busched.metrics"),
    ("busched.bus",),
    ("busched.scheduler", "busched.agent"),
    ("busched.replay", "busched.scenario", "busched.web"),
    ("busched.bench",),
    ("busched.cli",),
]
STRICT = ("api", "framework", "actions", "plugins")


def layer_of(module: str) -> int | None:
    for i, names in enumerate(LAYERS):
        if any(module == n or module.startswith(n + ".") for n in names):
            return i
    return None


def import_figures(root: Path) -> dict[str, object]:
    import grimp

    # grimp finds the package where Python would; `main` puts --root first on the path before anything
    # imports busched (a caller inside a test process must not have its modules unloaded under it)
    graph = grimp.build_graph("busched", cache_dir=None)
    # cycles are counted on the imports that run (function-level ones included); an import under
    # `if TYPE_CHECKING:` only names a type for the checker (Session and Statement naming each other)
    runtime = grimp.build_graph("busched", cache_dir=None, exclude_type_checking_imports=True)
    modules = sorted(graph.modules)
    # strongly connected components of the module graph (Tarjan, iterative)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    sccs: list[list[str]] = []
    counter = 0
    for start in modules:
        if start in index:
            continue
        work = [(start, iter(sorted(runtime.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(runtime.find_modules_directly_imported_by(w)))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        sccs.append(sorted(comp))
    upward = []
    for m in modules:
        lm = layer_of(m)
        for i in graph.find_modules_directly_imported_by(m):
            li = layer_of(i)
            if lm is not None and li is not None and li > lm:
                upward.append(f"{m} -> {i}")
    plugin_edges = [f"{m} -> {i}" for m in modules if m.startswith("busched.plugins.")
                    for i in graph.find_modules_directly_imported_by(m)
                    if i.startswith("busched.plugins.") and i.split(".")[2] != m.split(".")[2]]
    return {"modules": len(modules), "cycles": sccs, "upward_imports": sorted(upward),
            "plugin_to_plugin_imports": sorted(plugin_edges)}


def size_figures(root: Path, top: int = 10) -> dict[str, object]:
    files = sorted((root / "busched").rglob("*.py"))
    mods = sorted(((len(p.read_text().splitlines()), str(p.relative_to(root))) for p in files), reverse=True)
    funcs = []
    for p in files:
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                funcs.append((node.end_lineno - node.lineno + 1, f"{p.relative_to(root)}:{node.name}"))
    funcs.sort(reverse=True)
    return {"largest_modules": mods[:top], "modules_over_400": sum(1 for n, _ in mods if n > 400),
            "largest_functions": funcs[:top], "functions_over_60": sum(1 for n, _ in funcs if n > 60)}


def mypy_figures(root: Path) -> dict[str, int]:
    def count(args: list[str]) -> int:
        out = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--config-file", "/dev/null",
                              "--ignore-missing-imports", *args], cwd=root, capture_output=True, text=True).stdout
        return sum(1 for line in out.splitlines() if ": error:" in line)

    strict_paths = [f"busched/{p}" for p in STRICT if (root / "busched" / p).exists()]
    return {"errors": count(["busched"]), "strict_errors": count(["--strict", *strict_paths])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-mypy", action="store_true")
    a = ap.parse_args()
    root = a.root.resolve()
    sys.path.insert(0, str(root))
    out: dict[str, object] = {**import_figures(root), **size_figures(root)}
    if not a.no_mypy:
        out.update(mypy_figures(root))
    if a.json:
        print(json.dumps(out, indent=1))
        return 0
    cycles = out["cycles"]
    print(f"modules: {out['modules']}")
    print(f"import cycles: {len(cycles)} ({sum(len(c) for c in cycles)} modules)")  # type: ignore[arg-type]
    for c in cycles:  # type: ignore[attr-defined]
        print("   ", " <-> ".join(c))
    print(f"upward imports: {len(out['upward_imports'])}")  # type: ignore[arg-type]
    for u in out["upward_imports"]:  # type: ignore[attr-defined]
        print("   ", u)
    print(f"plugin -> plugin imports: {len(out['plugin_to_plugin_imports'])}")  # type: ignore[arg-type]
    if "errors" in out:
        print(f"mypy errors: {out['errors']} (strict on {', '.join(STRICT)}: {out['strict_errors']})")
    print(f"modules over 400 lines: {out['modules_over_400']}; functions over 60 lines: {out['functions_over_60']}")
    print("largest modules:", ", ".join(f"{p} {n}" for n, p in out["largest_modules"]))  # type: ignore[attr-defined]
    print("largest functions:", ", ".join(f"{p} {n}" for n, p in out["largest_functions"]))  # type: ignore[attr-defined]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
