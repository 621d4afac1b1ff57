"""deviceshare in a session: its arguments, the bind's annotations, devices following allocations, undos
and evictions."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from busched.actions import ACTIONS
from busched.api.fit import FitError
from busched.api.objects import ClusterSpec, JobSpec, NodeSpec, QueueSpec, TaskSpec
from busched.builtin import open_session
from busched.cache.cache import Cache
from busched.framework.arguments import ArgumentError
from busched.framework.config import load_config
from busched.framework.session import Session
from busched.framework.statement import Statement
from busched.plugins import PLUGINS
from busched.plugins.deviceshare import DeviceSharePlugin, DeviceShareSettings
from busched.plugins.deviceshare.gpushare import GPU_INDEX, GpuShareDevices

CONF = """actions: "{actions}"
tiers:
- plugins:
  - name: gang
  - name: deviceshare
    arguments: {{deviceshare.GPUSharingEnable: true}}
"""


def test_arguments():  # TestArguments
    p = PLUGINS.get("deviceshare")({"deviceshare.VGPUEnable": True, "deviceshare.SchedulePolicy": "binpack",
                                    "deviceshare.ScheduleWeight": 10})
    assert isinstance(p, DeviceSharePlugin)
    assert (p.settings.weight, p.settings.policy, p.settings.vgpu) == (10, "binpack", True)


@pytest.mark.parametrize("args", [
    {"deviceshare.GPUSharingEnable": True, "deviceshare.GPUNumberEnable": True},
    {"deviceshare.GPUNumberEnable": True, "deviceshare.VGPUEnable": "true"},
    {"deviceshare.AscendHAMiVNPUEnable": True},
    {"deviceshare.AscendMindClusterVNPUEnable": True},
])
def test_refused_arguments(args):
    with pytest.raises(ArgumentError, match="deviceshare"):
        DeviceShareSettings.of(args)


def spec(tasks: list[dict[str, Any]]) -> ClusterSpec:
    jobs = sorted({t["job"] for t in tasks})
    return ClusterSpec(
        nodes=[NodeSpec(name="n1", allocatable={"cpu": "8", "memory": "8Gi", "pods": 110,
                                                "volcano.sh/gpu-memory": 2000, "volcano.sh/gpu-number": 2})],
        tasks=[msgspec.convert({"namespace": "c1", **t}, TaskSpec) for t in tasks],
        jobs=[JobSpec(name=j, namespace="c1", queue="q1", min_member=1, phase="Inqueue") for j in jobs],
        queues=[QueueSpec(name="q1")])


def session(tasks: list[dict[str, Any]], actions: str = "") -> Session:
    c = Cache()
    c.load(spec(tasks))
    return open_session(c.snapshot(), load_config(CONF.format(actions=actions)), now=3.0)


def cards(ssn: Session) -> GpuShareDevices:
    d = ssn.plugins["deviceshare"].devices["n1"][0]
    assert isinstance(d, GpuShareDevices)
    return d


def test_bind_carries_the_cards():
    ssn = session([{"name": "a", "job": "pa", "requests": {"volcano.sh/gpu-memory": 700}},
                   {"name": "b", "job": "pb", "requests": {"volcano.sh/gpu-memory": 700}}])
    ACTIONS["allocate"]().execute(ssn)
    binds = {d.task: d.annotations for d in ssn.decisions if d.kind == "bind"}
    assert binds == {"c1/a": {GPU_INDEX: "0", "volcano.sh/predicate-time": "3000000000"},
                     "c1/b": {GPU_INDEX: "1", "volcano.sh/predicate-time": "3000000000"}}


def test_discarded_allocation_frees_the_card_and_its_annotations():
    ssn = session([{"name": "a", "job": "pa", "requests": {"volcano.sh/gpu-memory": 700}}])
    task = ssn.jobs["c1/pa"].tasks["c1-a"]
    stmt = Statement(ssn)
    stmt.allocate(task, "n1")
    assert cards(ssn).cards[0].tasks == {"c1-a": 700}
    assert task.bind_annotations[GPU_INDEX] == "0"
    stmt.discard()
    assert cards(ssn).cards[0].tasks == {}
    assert task.bind_annotations == {}


def test_eviction_frees_the_card_and_undoing_it_holds_it_again():
    ssn = session([{"name": "r", "job": "pr", "node": "n1", "phase": "Running",
                    "requests": {"volcano.sh/gpu-memory": 900}, "annotations": {GPU_INDEX: "1"}}])
    assert cards(ssn).cards[1].tasks == {"c1-r": 900}
    task = ssn.jobs["c1/pr"].tasks["c1-r"]
    stmt = Statement(ssn)
    stmt.evict(task, "preempted")
    assert cards(ssn).cards[1].tasks == {}
    stmt.discard()
    assert cards(ssn).cards[1].tasks == {"c1-r": 900}


def test_predicate_and_no_devices():
    ssn = session([{"name": "big", "job": "pa", "requests": {"volcano.sh/gpu-memory": 1500}},
                   {"name": "cpu", "job": "pb", "requests": {"cpu": "1"}}])
    node = ssn.nodes["n1"]
    with pytest.raises(FitError) as e:
        ssn.predicate_fn(ssn.jobs["c1/pa"].tasks["c1-big"], node)
    assert e.value.reasons() == ["GpuShare no enough gpu memory on node n1"]
    ssn.predicate_fn(ssn.jobs["c1/pb"].tasks["c1-cpu"], node)  # asks for no device: passes
