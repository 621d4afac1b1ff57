"""A plugin that raises on one task fails that task (a fit error naming the plugin), not the cycle."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from busched.api.fit import Code, FitError
from busched.builtin import finish_cycle, run_actions
from busched.cache.cache import Cache
from busched.fastpath import FastPathSettings
from busched.framework import plugin_errors, points
from busched.framework.config import PluginOption, Tier, load_config
from busched.plugins import PLUGINS
from tests.helpers import cluster


class Boom:
    """Raises (not a FitError) for the task named ``bad`` at one extension point."""

    point = points.PREDICATE

    def __init__(self, arguments: Any = None) -> None:
        pass

    def on_session_open(self, ssn: Any) -> None:
        def predicate(task: Any, node: Any) -> None:
            if task.name == "bad":
                raise RuntimeError("kaput")

        def node_order(task: Any, node: Any) -> float:
            if task.name == "bad":
                raise KeyError("no score")
            return 0.0

        ssn.add_fn(self.point, "boom", predicate if self.point is points.PREDICATE else node_order)


class BoomScore(Boom):
    point = points.NODE_ORDER


def run(plugin: type, fast: FastPathSettings | None = None) -> Any:
    spec = cluster([("n1", "4", "8Gi"), ("n2", "4", "8Gi")],
                   [{"name": n, "namespace": "p", "job": n, "requests": {"cpu": "1"}} for n in ("a", "bad", "c")],
                   [{"name": n, "namespace": "p", "queue": "q1", "minMember": 1, "phase": "Inqueue"}
                    for n in ("a", "bad", "c")])
    base = load_config('actions: "allocate"\ntiers:\n- plugins:\n  - name: gang\n  - name: predicates\n'
                       '  - name: nodeorder\n')
    config = dataclasses.replace(base, tiers=base.tiers + (Tier(plugins=(PluginOption("boom"),)),))
    cache = Cache(fast)
    cache.load(spec)
    return run_actions(cache.snapshot(), config, plugins=PLUGINS.with_entries({"boom": plugin}), uid="c1")


@pytest.mark.parametrize("use_kernels", [True, False])
@pytest.mark.parametrize("plugin,error", [(Boom, "RuntimeError: kaput"), (BoomScore, "KeyError: 'no score'")])
def test_a_plugin_that_raises_on_one_task_fails_that_task_only(monkeypatch: pytest.MonkeyPatch, use_kernels: bool,
                                                               plugin: type, error: str) -> None:
    before = plugin_errors.COUNTS["boom"]
    ssn = run(plugin, FastPathSettings(kernels=use_kernels))
    placed = {t.name: t.node_name for j in ssn.jobs.values() for t in j.tasks.values()}
    assert placed["a"] and placed["c"] and not placed["bad"]
    job = ssn.jobs["p/bad"]
    text = str(job.nodes_fit_errors["p-bad"])
    assert f"plugin boom failed: {error}" in text
    assert plugin_errors.COUNTS["boom"] == before + 1  # once for the task in this session, however many nodes
    finish_cycle(ssn)


def test_the_session_names_the_plugin_and_keeps_fit_errors_as_they_are() -> None:
    ssn = run(Boom)
    bad = next(t for t in ssn.jobs["p/bad"].tasks.values())
    node = ssn.nodes["n1"]
    with pytest.raises(plugin_errors.PluginFailed) as e:
        ssn.predicate_fn(bad, node)
    assert isinstance(e.value, FitError) and e.value.code == Code.Error and e.value.plugin == "boom"
    assert e.value.statuses[0].plugin == "boom" and e.value.node == "n1"
    good = next(t for t in ssn.jobs["p/a"].tasks.values())
    ssn.predicate_fn(good, node)  # no error for the others
    finish_cycle(ssn)


def test_the_count_is_exported() -> None:
    from busched.metrics import SchedulerMetrics, render

    plugin_errors.COUNTS["exported"] += 1
    text = render(SchedulerMetrics().registry).decode()
    assert 'busched_plugin_errors_total{plugin="exported"}' in text


def test_each_session_counts_its_failure_even_at_a_freed_sessions_address() -> None:
    """Counted once per session: a session freed (as the scheduler frees each one at the end of its
    cycle) and the next one made, most likely at the same address, counts again."""

    class FakeSession:
        pass

    class FakeTask:
        key = "p/reused"

    before = plugin_errors.COUNTS["reuse"]
    first = FakeSession()
    plugin_errors.failed("reuse", FakeTask(), "n1", RuntimeError("x"), first)
    plugin_errors.failed("reuse", FakeTask(), "n2", RuntimeError("x"), first)  # same session: once
    assert plugin_errors.COUNTS["reuse"] == before + 1
    for _ in range(3):
        del first
        first = FakeSession()
        plugin_errors.failed("reuse", FakeTask(), "n1", RuntimeError("x"), first)
    assert plugin_errors.COUNTS["reuse"] == before + 4
