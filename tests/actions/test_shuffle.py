"""shuffle evicts the running tasks the victim plugins pick; the test-only plugins behave as FORMAT.md says."""

from __future__ import annotations

import pytest

from busched.actions.shuffle import ShuffleAction
from busched.api.fit import Code, FitError
from busched.api.task import TaskStatus
from busched.framework.statement import Statement
from busched.scenario.testplugins import TEST_PLUGINS, PluginArgumentError
from tests.actions.evict_helpers import config, evicted, job, node, pending, running, session, spec


def _cluster():
    return spec([node("n1", "4"), node("n2", "4")],
                [running("a", "pg1", "n1", "1", priority=10), running("b", "pg1", "n1", "1", priority=100),
                 running("c", "pg2", "n2", "1", priority=10), pending("d", "pg2", "1", priority=10),
                 {**running("e", "pg2", "n2", "1", priority=10), "deleting": True}],
                [job("pg1", 0, phase="Running"), job("pg2", 0, phase="Running")])


def test_shuffle_evicts_running_tasks_the_victim_plugin_picks():
    cfg = config("shuffle", [{"name": "test-victim-by-priority", "enabledVictim": True, "arguments": {"priority": 10}}])
    ssn = session(_cluster(), cfg, TEST_PLUGINS)
    ShuffleAction().execute(ssn)
    # d is pending and e already releasing: only running tasks are candidates.
    assert evicted(ssn) == ["c1/a", "c1/c"]
    assert ssn.jobs["c1/pg1"].tasks["c1-a"].status == TaskStatus.Releasing
    assert ssn.nodes["n1"].releasing.cpu == 1000


def test_shuffle_without_victim_plugins_evicts_nothing():
    cfg = config("shuffle", [{"name": "test-victim-by-priority", "arguments": {"priority": 10}}])  # switch off
    ssn = session(_cluster(), cfg, TEST_PLUGINS)
    ShuffleAction().execute(ssn)
    assert evicted(ssn) == []


def test_device_fit_plugin_blocks_until_the_blocking_task_releases():
    cfg = config("preempt", [{"name": "test-device-fit-after-eviction", "enablePredicate": True,
                              "arguments": {"task": "d", "blockingTask": "c"}}])
    ssn = session(_cluster(), cfg, TEST_PLUGINS)
    d = ssn.jobs["c1/pg2"].tasks["c1-d"]
    c = ssn.jobs["c1/pg2"].tasks["c1-c"]
    ssn.predicate_fn(d, ssn.nodes["n1"])  # no blocking task there
    ssn.predicate_fn(c, ssn.nodes["n2"])  # only the named task is checked
    with pytest.raises(FitError) as e:
        ssn.predicate_fn(d, ssn.nodes["n2"])
    assert e.value.code == Code.Unschedulable
    stmt = Statement(ssn)
    stmt.evict(c, "preempt")
    ssn.predicate_fn(d, ssn.nodes["n2"])  # the blocking task is Releasing now
    stmt.discard()
    with pytest.raises(FitError):
        ssn.predicate_fn(d, ssn.nodes["n2"])


@pytest.mark.parametrize("name,args", [("test-victim-by-priority", {}),
                                       ("test-victim-by-priority", {"priority": "high"}),
                                       ("test-device-fit-after-eviction", {"task": "x"})])
def test_test_plugins_reject_bad_arguments(name, args):
    with pytest.raises(PluginArgumentError, match=name):
        TEST_PLUGINS[name](args)
