"""`allocate_topology.routes` (which jobs take the topology path; asked of every job allocate pops)
against its definition, ``job.contains_hard_topology() or job.contains_sub_job_policy()``, on the jobs of
random clusters with hard and soft network topologies and sub-group policies, and on jobs whose sub-jobs
were given network topologies of their own."""

from __future__ import annotations

import random

import pytest

from busched.actions import allocate_topology
from busched.builtin import open_session
from busched.fastpath import FastPathSettings
from busched.framework.config import load_config
from tests.actions.test_allocate_stream import cluster, routed
from tests.fastpath.test_kernels_select import CONFIGS
from tests.kernel_cases import cache_of


def reference(job) -> bool:
    return job.contains_hard_topology() or job.contains_sub_job_policy()


@pytest.mark.parametrize("seed", range(4))
def test_routes_is_its_definition(seed):
    spec = routed(cluster(seed), random.Random(seed))
    ssn = open_session(cache_of(spec, FastPathSettings(kernels=True)).snapshot(), load_config(CONFIGS["default"]))
    rng = random.Random(seed)
    answers = set()
    for job in ssn.jobs.values():
        answers.add(reference(job))
        assert allocate_topology.routes(job) == reference(job), job.uid
        # the same job with a sub-job given a topology of its own (hard with a tier, soft, or hard
        # without one: never hard), whatever the job's own
        for sj in job.sub_jobs.values():
            sj.network_topology = rng.choice([{"mode": "hard", "highestTierAllowed": 1}, {"mode": "soft"},
                                               {"mode": "hard"}, None])
            answers.add(reference(job))
            assert allocate_topology.routes(job) == reference(job), job.uid
    assert answers == {True, False}
