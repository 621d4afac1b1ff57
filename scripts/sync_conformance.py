#!/usr/bin/env python3
"""Copy the shared conformance cases into this repository (stdlib only).

The cases and their format are kept upstream in ``../shared/conformance`` (beside this
checkout); the repository carries a copy so that a clean checkout (CI) tests against
exactly the cases it was last synced with:

    ../shared/conformance/cases/**   ->  tests/conformance/cases/**
    ../shared/conformance/FORMAT.md  ->  tests/conformance/FORMAT.md

Every file is copied (folders kept, content only: modes are not), files that vanished
upstream are removed, and folders left empty go too.  ``--check`` changes nothing and
exits 1 when the copy differs from upstream (listing what differs); ``--source DIR``
names another upstream ``conformance`` folder.

    python3 scripts/sync_conformance.py            # sync
    python3 scripts/sync_conformance.py --check    # is the copy current?
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = ROOT.parent / "shared" / "conformance"
TARGET = ROOT / "tests" / "conformance"


def _files(base: Path) -> dict[str, Path]:
    """Every file under base, by its posix path relative to base."""
    if not base.is_dir():
        return {}
    return {p.relative_to(base).as_posix(): p for p in sorted(base.rglob("*")) if p.is_file()}


def plan(source: Path, target: Path) -> tuple[dict[str, Path], list[str], list[str]]:
    """What syncing would do: (files to write, by target-relative path -> source file;
    target-relative paths to remove; the unchanged ones)."""
    want = {f"cases/{rel}": p for rel, p in _files(source / "cases").items()}
    want["FORMAT.md"] = source / "FORMAT.md"
    have = {f"cases/{rel}": p for rel, p in _files(target / "cases").items()}
    if (target / "FORMAT.md").is_file():
        have["FORMAT.md"] = target / "FORMAT.md"
    write = {rel: src for rel, src in want.items()
             if rel not in have or have[rel].read_bytes() != src.read_bytes()}
    remove = sorted(set(have) - set(want))
    same = sorted(set(want) - set(write))
    return write, remove, same


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if the copy differs")
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE,
                    help=f"the upstream conformance folder (default {DEFAULT_SOURCE})")
    ap.add_argument("--target", type=Path, default=TARGET, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    source, target = args.source.resolve(), args.target.resolve()
    if not (source / "cases").is_dir() or not (source / "FORMAT.md").is_file():
        print(f"sync_conformance: no cases/ and FORMAT.md under {source}", file=sys.stderr)
        return 2
    write, remove, same = plan(source, target)
    if args.check:
        for rel in sorted(write):
            print(f"{'differs' if (target / rel).exists() else 'missing'}: {rel}")
        for rel in remove:
            print(f"not upstream: {rel}")
        if write or remove:
            print(f"sync_conformance: copy is stale ({len(write)} to write, {len(remove)} to remove); "
                  f"run python3 scripts/sync_conformance.py", file=sys.stderr)
            return 1
        print(f"sync_conformance: {len(same)} files current")
        return 0
    for rel, src in sorted(write.items()):
        dst = target / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(src.read_bytes())
    for rel in remove:
        (target / rel).unlink()
    for d in sorted((p for p in (target / "cases").rglob("*") if p.is_dir()), reverse=True):
        if not any(d.iterdir()):
            d.rmdir()
    print(f"sync_conformance: {len(write)} written, {len(remove)} removed, {len(same)} unchanged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
