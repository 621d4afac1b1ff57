"""Volcano's own cases, one test each.

The cases are the repository's copy, tests/conformance/cases (synced from
../shared/conformance by scripts/sync_conformance.py); ``$BUSCHED_CASES`` names
another folder.  Cases listed in known_failures.txt (beside this module) are strict
xfails: the list may only shrink (a listed case that starts passing fails the
suite until it is removed from the list).  The summary line of this module is
the pass count.

Other tests parametrised over the cases (determinism here, lent-vs-private
snapshots in test_shared_snapshot.py) take ``LOAD_PARAMS``: every case, where a
known failure that does not even load (an action or plugin busched lacks) is a
strict xfail on ``ScenarioError``, and one that loads runs like any other.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from busched.scenario.runner import ScenarioError, check_report, load_scenario, run_scenario

ROOT = Path(__file__).resolve().parents[2]
CASES = Path(os.environ.get("BUSCHED_CASES", ROOT / "tests" / "conformance" / "cases"))
KNOWN = ROOT / "tests" / "conformance" / "known_failures.txt"


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


def _loads(path: Path) -> bool:
    try:
        load_scenario(path)
    except ScenarioError:
        return False
    return True


def _load_params() -> list:
    """Every case for the tests that only need it to load; a known failure that does not load is a
    strict xfail there too (it starts running the day its action or plugin exists)."""
    out = []
    for p in CASE_PARAMS:
        path = p.values[0]
        marks = [pytest.mark.xfail(strict=True, raises=ScenarioError, reason="known failure: does not load")] \
            if p.marks and not _loads(path) else []
        out.append(pytest.param(path, id=p.id, marks=marks))
    return out


LOAD_PARAMS = _load_params()


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


@pytest.mark.parametrize("path", LOAD_PARAMS[::3])
def test_case_output_is_deterministic(path: Path) -> None:
    """The same file gives byte-identical output on every run (and with a fresh seed object)."""
    import json

    first = json.dumps(run_scenario(load_scenario(path)))
    assert json.dumps(run_scenario(load_scenario(path))) == first
