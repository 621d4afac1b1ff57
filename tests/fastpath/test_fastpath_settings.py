"""The fast path's switches are settings (busched.fastpath.FastPathSettings): read from the
environment only at the edges, held by the cache, handed to each snapshot, and chosen once by
the session opened over it."""

from __future__ import annotations

import random

from busched import fastpath
from busched.builtin import run_cycle
from busched.fastpath import FastPath, FastPathSettings
from busched.framework.config import DEFAULT_CONFIG, load_config
from tests.kernel_cases import cache_of, random_cluster


def test_settings_from_the_environment() -> None:
    assert FastPathSettings.from_env({}) == FastPathSettings(kernels=True, verify=False)
    assert FastPathSettings.from_env({"BUSCHED_KERNELS": "0"}).kernels is False
    assert FastPathSettings.from_env({"BUSCHED_KERNELS": "1", "BUSCHED_VERIFY_SHARED": "1"}).verify is True
    assert FastPathSettings.from_env({"BUSCHED_VERIFY_SHARED": "0"}).verify is False


def test_the_cache_settings_choose_the_session_path() -> None:
    spec = random_cluster(random.Random(3), nodes=6, jobs=8)
    cfg = load_config(DEFAULT_CONFIG)
    on = cache_of(spec, FastPathSettings())
    snap = on.snapshot()
    assert snap.lease is not None  # lent
    ssn = run_cycle(snap, cfg, uid="c0")
    assert isinstance(ssn.fast, FastPath) and ssn.fast.settings == FastPathSettings()

    off = cache_of(spec, FastPathSettings(kernels=False))
    snap = off.snapshot()
    assert snap.lease is None  # converted afresh, nothing lent
    ssn_off = run_cycle(snap, cfg, uid="c0")
    assert ssn_off.fast is None
    assert [(d.kind, d.task, d.node) for d in ssn.decisions] == [(d.kind, d.task, d.node) for d in ssn_off.decisions]


def test_verification_is_the_cache_setting() -> None:
    spec = random_cluster(random.Random(4), nodes=4, jobs=5)
    assert cache_of(spec, FastPathSettings(verify=True)).snapshot().lease.prints is not None
    assert cache_of(spec, FastPathSettings()).snapshot().lease.prints is None


def test_the_default_is_the_edge_choice() -> None:
    was = fastpath.use_by_default(FastPathSettings(kernels=False))
    try:
        assert cache_of(random_cluster(random.Random(5), nodes=3, jobs=2)).fast.kernels is False
    finally:
        fastpath.use_by_default(was)
