"""Extra scenarios transcribed by us from Volcano's Go tests (cases not in the shared set)."""

from pathlib import Path

import pytest

from busched.scenario.runner import check_report, load_scenario, run_scenario

FILES = sorted((Path(__file__).parent / "scenarios").glob("*.yaml"))


def test_extra_scenarios_present():
    assert FILES


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_extra_scenario(path):
    sc = load_scenario(path)
    assert not check_report(run_scenario(sc), sc.expect)
