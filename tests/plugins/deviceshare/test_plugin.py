"""deviceshare in a session: its arguments, the bind's annotations, devices following allocations, undos
and evictions."""

from __future__ import annotations

import random
from typing import Any

import msgspec
import numpy as np
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


def test_predicate_twin_matches_the_predicate_on_random_clusters():
    """The fast path's twins (`predicate_batch`, `score_batch`) against the per-node predicate and score."""
    rng = random.Random(7)
    seen: set[bool] = set()
    scored: set[bool] = set()
    for round_ in range(20):
        vgpu = round_ % 2 == 0
        nodes, tasks = [], []
        for i in range(8):
            if vgpu:
                cards = rng.randint(1, 3)
                reg = "".join(f"GPU-{i}-{c},{rng.randint(1, 3)},{rng.choice([8000, 16000])},NVIDIA,true,hami-core:"
                              for c in range(cards))
                alloc = {"cpu": "8", "memory": "8Gi", "pods": 110, "volcano.sh/vgpu-number": 10,
                         "volcano.sh/vgpu-memory": 48000, "volcano.sh/vgpu-cores": 300}
                nodes.append(NodeSpec(name=f"n{i}", allocatable=alloc,
                                      annotations={"volcano.sh/node-vgpu-register": reg} if i % 4 else {}))
            else:
                alloc = {"cpu": "8", "memory": "8Gi", "pods": 110}
                if i % 4:
                    alloc.update({"volcano.sh/gpu-memory": rng.choice([2000, 4000]), "volcano.sh/gpu-number": 2})
                nodes.append(NodeSpec(name=f"n{i}", allocatable=alloc))
        for j in range(10):
            if vgpu:
                req = {"volcano.sh/vgpu-number": rng.randint(1, 3),
                       "volcano.sh/vgpu-memory": rng.choice([0, 4000, 9000]),
                       "volcano.sh/vgpu-cores": rng.choice([0, 50, 100])}
            else:
                req = {"volcano.sh/gpu-memory": rng.choice([0, 500, 1500, 2500])}
            tasks.append({"name": f"t{j}", "job": f"j{j}", "requests": req if j % 5 else {"cpu": "1"}})
        args = ("{deviceshare.VGPUEnable: true, deviceshare.SchedulePolicy: binpack, deviceshare.ScheduleWeight: 3}"
                if vgpu else "{deviceshare.GPUSharingEnable: true, deviceshare.ScheduleWeight: 3}")
        conf = f'actions: ""\ntiers:\n- plugins:\n  - name: deviceshare\n    arguments: {args}\n'
        c = Cache()
        c.load(ClusterSpec(nodes=nodes, tasks=[msgspec.convert({"namespace": "c1", **t}, TaskSpec) for t in tasks],
                           jobs=[JobSpec(name=t["job"], namespace="c1", queue="q1", min_member=1, phase="Inqueue")
                                 for t in tasks], queues=[QueueSpec(name="q1")]))
        ssn = open_session(c.snapshot(), load_config(conf))
        plugin = ssn.plugins["deviceshare"]
        rows = np.arange(len(ssn.node_list))
        for job in ssn.jobs.values():
            for t in job.tasks.values():
                want = []
                for n in ssn.node_list:
                    try:
                        plugin.predicate(t, n)
                        want.append(True)
                    except FitError:
                        want.append(False)
                assert plugin.predicate_batch(t, ssn.arrays, rows).tolist() == want, (round_, t.key)
                seen.update(want)
                scores = [plugin.score(t, n) for n in ssn.node_list]
                assert plugin.score_batch(t, ssn.arrays, rows).tolist() == scores, (round_, t.key)
                scored.update(s > 0 for s in scores)
    assert seen == scored == {True, False}  # both verdicts, and scores both zero and not, were compared
