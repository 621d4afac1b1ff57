"""scripts/sync_conformance.py: the repository's copy of the shared cases follows upstream."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("sync_conformance", ROOT / "scripts" / "sync_conformance.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _upstream(base: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(text)
    return base


def test_sync_copies_removes_and_checks(tmp_path: Path, capsys) -> None:
    sync = _script()
    src = _upstream(tmp_path / "up", {"FORMAT.md": "f1", "cases/a/1.yaml": "one", "cases/b/2.yaml": "two"})
    dst = tmp_path / "copy"
    args = ["--source", str(src), "--target", str(dst)]
    assert sync.main([*args, "--check"]) == 1
    assert sync.main(args) == 0
    assert (dst / "cases/a/1.yaml").read_text() == "one" and (dst / "FORMAT.md").read_text() == "f1"
    assert sync.main([*args, "--check"]) == 0
    (src / "cases/b/2.yaml").unlink()
    (src / "cases/a/1.yaml").write_text("one, edited")
    capsys.readouterr()
    assert sync.main([*args, "--check"]) == 1
    out = capsys.readouterr().out
    assert "differs: cases/a/1.yaml" in out and "not upstream: cases/b/2.yaml" in out
    assert (dst / "cases/b/2.yaml").exists()  # --check changes nothing
    assert sync.main(args) == 0
    assert not (dst / "cases/b").exists() and (dst / "cases/a/1.yaml").read_text() == "one, edited"
    assert sync.main([*args, "--check"]) == 0


def test_missing_upstream_is_an_error(tmp_path: Path) -> None:
    assert _script().main(["--source", str(tmp_path / "nowhere"), "--target", str(tmp_path / "c")]) == 2
