"""Extra scenarios transcribed by us from Volcano's Go tests (cases not in the shared set).

Each file names its Go source; topology/ holds allocate_test.go's network-topology cases.
"""

from pathlib import Path

import pytest

from busched.scenario.runner import check_report, load_scenario, run_scenario

ROOT = Path(__file__).resolve().parents[1] / "scenarios"
FILES = sorted(ROOT.rglob("*.yaml"))


def test_extra_scenarios_present():
    assert FILES


@pytest.mark.parametrize("path", FILES, ids=[f.relative_to(ROOT).as_posix() for f in FILES])
def test_extra_scenario(path):
    sc = load_scenario(path)
    assert not check_report(run_scenario(sc), sc.expect)
