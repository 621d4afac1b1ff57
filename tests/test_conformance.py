"""Volcano's own cases, one test each.

Cases listed in conformance_known_failures.txt are strict xfails: the list may
only shrink (a listed case that starts passing fails the suite until it is
removed from the list).  The summary line of this module is the pass count.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from busched.scenario.runner import check_report, load_scenario, run_scenario

ROOT = Path(__file__).resolve().parent.parent
CASES = Path(os.environ.get("BUSCHED_CASES", ROOT.parent / "shared" / "conformance" / "cases"))
KNOWN = ROOT / "tests" / "conformance_known_failures.txt"


def _known() -> set[str]:
    if not KNOWN.exists():
        return set()
    return {ln.split("#")[0].strip() for ln in KNOWN.read_text().splitlines() if ln.split("#")[0].strip()}


def _cases() -> list:
    files = sorted(CASES.rglob("*.yaml")) if CASES.is_dir() else []
    known = _known()
    out = []
    for f in files:
        rel = f.relative_to(CASES).as_posix()
        marks = [pytest.mark.xfail(strict=True, reason="known failure")] if rel in known else []
        out.append(pytest.param(f, id=rel, marks=marks))
    return out


CASE_PARAMS = _cases()


def test_cases_are_present() -> None:
    """The suite must not pass vacuously: the shared cases have to be there."""
    assert CASES.is_dir(), f"conformance cases not found at {CASES}"
    assert len(CASE_PARAMS) > 100


def test_known_failures_name_real_cases() -> None:
    names = {p.id for p in CASE_PARAMS}
    stale = sorted(_known() - names)
    assert not stale, f"known failures that are not cases: {stale}"


@pytest.mark.parametrize("path", CASE_PARAMS)
def test_case(path: Path) -> None:
    sc = load_scenario(path)
    misses = check_report(run_scenario(sc), sc.expect)
    assert not misses, "\n".join(misses)


@pytest.mark.parametrize("path", [p for p in CASE_PARAMS if not p.marks][::3])
def test_case_output_is_deterministic(path: Path) -> None:
    """The same file gives byte-identical output on every run (and with a fresh seed object)."""
    import json

    first = json.dumps(run_scenario(load_scenario(path)))
    assert json.dumps(run_scenario(load_scenario(path))) == first
