"""proportion's allocate event in two halves (the queue's allocated per task, its share per task or once per run:
`ProportionPlugin._allocated`) against the one handler it was split from (`_on_event`, whose share comes from
`QueueAttr.update_share`, separate code): the same decisions and the same plugin state, runs on and off.

The split's two forms share `share`'s arithmetic, so comparing them with each other cannot see a mistake made in
both (a review planted a cpu-only share in both: nothing else failed)."""

from __future__ import annotations

import random

import pytest

from busched.plugins import proportion as P
from tests.fastpath.test_batch_choice import with_replicas
from tests.framework.test_handler_runs import CONFIGS, run
from tests.kernel_cases import random_cluster


def _one_handler(self, ssn):  # noqa: ANN001, ANN202 - the form before the split: allocated and share together
    return (lambda t: self._on_event(ssn, t, +1)), (lambda t: None), None


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("on", [True, False], ids=["runs", "per-task"])
def test_the_split_handlers_decide_as_the_one_they_replace(monkeypatch, config, seed, on):
    rng = random.Random(4400 + seed)
    spec = with_replicas(rng, random_cluster(rng, nodes=rng.choice([8, 60, 150]), fancy=seed % 3 != 2),
                         sized=seed % 2 == 0)
    got = run(spec, CONFIGS[config], seed, on, monkeypatch, [])
    if "proportion" not in got["handlers"]:
        pytest.skip("this configuration has no proportion")
    with monkeypatch.context() as m:
        m.setattr(P.ProportionPlugin, "_allocated", _one_handler)
        want = run(spec, CONFIGS[config], seed, on, m, [])
    assert got == want
