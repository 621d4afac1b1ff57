"""deviceshare's device bookkeeping, one node at a time: the codecs, the fits, allocate and release undoing
each other exactly (transcribed from Volcano's gpushare/vgpu/gpuexclusive tests where they have one)."""

from __future__ import annotations

from typing import Any

import pytest

from busched.api import build
from busched.api import objects as o
from busched.api.node import NodeInfo
from busched.api.task import TaskInfo, TaskStatus
from busched.plugins.deviceshare import vgpu_codec as codec
from busched.plugins.deviceshare.base import DeviceError
from busched.plugins.deviceshare.exclusive import ExclusiveVgpu, matching_rules, parse_rules
from busched.plugins.deviceshare.gpushare import GPU_INDEX, PREDICATE_TIME, GpuShareDevices
from busched.plugins.deviceshare.vgpu import (
    ASSIGNED_IDS,
    BIND_PHASE,
    VgpuDevices,
    gpu_score,
    request_of,
    type_allowed,
)

REGISTER = "volcano.sh/node-vgpu-register"


def node(allocatable: dict[str, Any], annotations: dict[str, str] | None = None) -> NodeInfo:
    return build.node_info(o.NodeSpec(name="n1", allocatable=allocatable, annotations=annotations or {}))


def task(name: str, requests: dict[str, Any], annotations: dict[str, str] | None = None,
         labels: dict[str, str] | None = None, **kw: Any) -> TaskInfo:
    spec = o.TaskSpec(name=name, namespace="default", job="pg", requests=requests,
                      annotations=annotations or {}, labels=labels or {}, **kw)
    return build.task_info(spec, {})


def vgpu_node(cards: int = 2, memory: int = 16384, share: int = 4) -> VgpuDevices:
    text = "".join(f"GPU-{i},{share},{memory},NVIDIA-A100,true,hami-core:" for i in range(cards))
    n = node({"volcano.sh/vgpu-number": cards * share, "volcano.sh/vgpu-memory": cards * memory,
              "volcano.sh/vgpu-cores": 100 * cards}, {REGISTER: text})
    d = VgpuDevices.from_node(n)
    assert d is not None
    return d


def vreq(name: str, mem: int = 4096, cores: int = 25, num: int = 1, **kw: Any) -> TaskInfo:
    return task(name, {"volcano.sh/vgpu-number": num, "volcano.sh/vgpu-memory": mem, "volcano.sh/vgpu-cores": cores},
                **kw)


# -- the codecs ---------------------------------------------------------------------------------------------
def test_register_reads_cards_by_position():
    cards = codec.decode_register("GPU-a,10,30000,NVIDIA,true,hami-core:GPU-b,x,20000,NVIDIA,false,mig:")
    assert cards is not None
    assert [(c.index, c.uuid, c.number, c.memory, c.health, c.mode) for c in cards] == [
        (0, "GPU-a", 10, 30000, True, "hami-core"), (1, "GPU-b", 0, 20000, False, "mig")]


@pytest.mark.parametrize("text", ["GPU-a,10,30000,NVIDIA,true", "no-colon",
                                  "GPU-a,10,30000,NVIDIA,true,hami-core:GPU-b,1:"])
def test_register_unreadable(text):
    assert not codec.decode_register(text)


def test_pod_devices_round_trip_and_invalid_entries_skipped():
    devs = [codec.ContainerDevice("GPU-0", "NVIDIA", 4096, 25), codec.ContainerDevice("GPU-1", "NVIDIA", 0, 100)]
    text = codec.encode_pod_devices([devs])
    assert text == "GPU-0,NVIDIA,4096,25:GPU-1,NVIDIA,0,100:"
    assert codec.decode_pod_devices(text) == [devs]
    # TestDecodeContainerDevicesRejectsInvalidUsage: negative, non-numeric, short entries are skipped
    assert codec.decode_pod_devices("GPU-0,NVIDIA,-1,0:GPU-1,NVIDIA,1,x:GPU-2,NVIDIA:GPU-3,NVIDIA,5,6:") == [
        [codec.ContainerDevice("GPU-3", "NVIDIA", 5, 6)]]


# -- vGPU -------------------------------------------------------------------------------------------------
def test_node_without_allocatable_vgpu_or_register_has_none():
    text = "GPU-0,4,16384,NVIDIA,true,hami-core:"
    no_cores = {"volcano.sh/vgpu-number": 4, "volcano.sh/vgpu-memory": 16384}
    assert VgpuDevices.from_node(node(no_cores, {REGISTER: text})) is None
    assert VgpuDevices.from_node(node({"volcano.sh/vgpu-number": 4, "volcano.sh/vgpu-memory": 1,
                                       "volcano.sh/vgpu-cores": 100})) is None


def test_request_defaults():
    assert request_of(task("t", {"cpu": "1"})) is None
    r = request_of(task("t", {"volcano.sh/vgpu-memory": 1000}))
    assert r is not None and (r.nums, r.mem, r.mem_percent, r.cores) == (1, 1000, 101, 0)
    r = request_of(task("t", {"volcano.sh/vgpu-number": 2}))
    assert r is not None and (r.nums, r.mem, r.mem_percent) == (2, 0, 100)  # no memory: the whole card


@pytest.mark.parametrize(("annotations", "card_type", "ok"), [
    ({"nvidia.com/use-gputype": "A100"}, "NVIDIA-A100", True),
    ({"nvidia.com/use-gputype": "a100"}, "NVIDIA-A100", True),
    ({"nvidia.com/use-gputype": "V100,A100"}, "NVIDIA-A100", True),
    ({"nvidia.com/use-gputype": "V100,T4"}, "NVIDIA-A100", False),
    ({"nvidia.com/nouse-gputype": "A100"}, "NVIDIA-A100", False),
    ({"nvidia.com/nouse-gputype": "V100,T4"}, "NVIDIA-A100", True),
    ({}, "NVIDIA-A100", True),
])
def test_type_allowed(annotations, card_type, ok):  # TestCheckGPUtype
    assert type_allowed(annotations, card_type) is ok


@pytest.mark.parametrize(("policy", "use", "want"), [
    ("spread", (0, 0), 100), ("spread", (1, 4096), 0), ("binpack", (4, 16384), 100), ("binpack", (0, 0), 0),
    ("", (1, 4096), 0)])
def test_gpu_score(policy, use, want):  # TestGPUScore
    assert gpu_score(policy, use[0], use[1], 16384) == want


def test_allocate_then_release_restores_every_counter():
    d = vgpu_node()
    t = vreq("a")
    given = d.allocate(t, 5_000_000_000)
    assert given[ASSIGNED_IDS] == "GPU-1,NVIDIA,4096,25:"  # no policy: the highest index first
    assert given["volcano.sh/devices-to-allocate"] == given[ASSIGNED_IDS]
    assert given["volcano.sh/vgpu-time"] == "5" and given[BIND_PHASE] == "allocating"
    card = d.cards[1]
    assert (card.used_num, card.used_mem, card.used_cores) == (1, 4096, 25)
    keys = d.release(t)
    assert (card.used_num, card.used_mem, card.used_cores, card.tasks) == (0, 0, 0, {})
    assert set(keys) == set(given)


def test_release_keeps_annotations_once_bound():  # TestReleaseKeepsCommittedAnnotations
    d = vgpu_node()
    t = vreq("a", annotations={BIND_PHASE: "success", ASSIGNED_IDS: "GPU-0,NVIDIA,4096,25:"})
    d.add_task(t)
    assert d.cards[0].used_num == 1
    assert d.release(t) == []
    assert d.cards[0].used_num == 0


def test_add_task_counts_known_cards_once():  # TestAddResource
    d = vgpu_node()
    t = vreq("a", annotations={ASSIGNED_IDS: "GPU-0,NVIDIA,1000,10:GPU-9,NVIDIA,1000,10:"})
    d.add_task(t)
    d.add_task(t)
    assert (d.cards[0].used_num, d.cards[0].used_mem, d.cards[0].used_cores) == (1, 1000, 10)
    assert d.cards[1].used_num == 0
    d.add_task(vreq("b"))  # no annotation: nothing held
    assert sum(c.used_num for c in d.cards.values()) == 1


def test_binpack_stacks_and_spread_spreads():  # TestBinpackStacksSequentialPods / TestSpreadPreventsCoLocation
    for policy, cards_used in (("binpack", 1), ("spread", 3)):
        d = vgpu_node(cards=3)
        d.policy = policy
        for name in "abc":
            d.allocate(vreq(name), 0)
        assert sum(1 for c in d.cards.values() if c.used_num) == cards_used


def test_podgroup_spread_keeps_a_group_off_a_card():
    d = vgpu_node(cards=2)
    ann = {"volcano.sh/vgpu-podgroup-policy": "spread"}
    d.allocate(vreq("a", annotations=ann), 0)
    d.allocate(vreq("b", annotations=ann), 0)
    assert all(c.used_num == 1 for c in d.cards.values())
    assert d.filter(vreq("c", annotations=ann)) == "hami-vgpuDeviceSharing error: not enough gpu fitted on this node"
    assert d.filter(vreq("c")) is None  # without the policy it may share


def test_exclusive_cores_and_full_cards():
    d = vgpu_node(cards=1)
    d.allocate(vreq("a", cores=0), 0)
    assert d.filter(vreq("b", cores=100)) is not None  # 100 cores: the card alone
    d2 = vgpu_node(cards=1)
    d2.allocate(vreq("a", cores=100), 0)
    assert d2.filter(vreq("b", cores=0)) is not None  # no room beside a task using every core


def test_mode_and_card_count():
    d = vgpu_node(cards=2)
    assert "sharing mode mig" in (d.filter(vreq("a", annotations={"volcano.sh/vgpu-mode": "mig"})) or "")
    assert d.filter(vreq("a", num=3)) == "hami-vgpuDeviceSharing error: no enough gpu cards on node n1"


def test_allocate_without_fit_raises():
    d = vgpu_node(cards=1, share=1)
    d.allocate(vreq("a"), 0)
    with pytest.raises(DeviceError):
        d.allocate(vreq("b"), 0)


# -- GPU sharing by memory and number ----------------------------------------------------------------------
def share_node(memory: int = 3000, number: int = 3, unhealthy: str = "", by_number: bool = False) -> GpuShareDevices:
    ann = {"volcano.sh/gpu-unhealthy-ids": unhealthy} if unhealthy else {}
    d = GpuShareDevices.from_node(node({"volcano.sh/gpu-memory": memory, "volcano.sh/gpu-number": number}, ann),
                                  sharing=not by_number, number=by_number)
    assert d is not None
    return d


def test_cards_split_memory_and_drop_unhealthy():
    d = share_node(memory=3001, number=3, unhealthy="1,x")
    assert {i: c.memory for i, c in d.cards.items()} == {0: 1000, 2: 1000}
    assert GpuShareDevices.from_node(node({"volcano.sh/gpu-memory": 1000}), sharing=True, number=False) is None
    assert GpuShareDevices.from_node(node({"volcano.sh/gpu-memory": 1000, "volcano.sh/gpu-number": 0}),
                                     sharing=True, number=False) is None


def test_memory_allocate_and_release():  # TestReleaseReturnsRemovedAnnotationKeys
    d = share_node()
    t = task("a", {"volcano.sh/gpu-memory": 700})
    assert d.allocate(t, 42) == {PREDICATE_TIME: "42", GPU_INDEX: "0"}
    assert d.allocate(task("b", {"volcano.sh/gpu-memory": 700}), 42)[GPU_INDEX] == "1"
    assert d.cards[0].idle_memory() == 300
    assert sorted(d.release(t)) == [GPU_INDEX, PREDICATE_TIME]
    assert d.cards[0].idle_memory() == 1000


def test_over_subscribed_card_has_no_memory_free():  # TestGetDevicesIdleGPUMemory_OverSubscribedCardReportsZero
    d = share_node(memory=1000, number=1)
    d.add_task(task("p1", {"volcano.sh/gpu-memory": 3000}, {GPU_INDEX: "0"}))
    assert d.cards[0].idle_memory() == 0
    assert d.cards_by_memory(task("p2", {"volcano.sh/gpu-memory": 500})) == []


def test_number_takes_idle_cards_in_order_and_finished_tasks_hold_no_memory():
    d = share_node(by_number=True)
    d.add_task(task("p1", {"volcano.sh/gpu-number": 1}, {GPU_INDEX: "1"}))
    assert d.allocate(task("p2", {"volcano.sh/gpu-number": 2}), 0)[GPU_INDEX] == "0,2"
    assert d.filter(task("p3", {"volcano.sh/gpu-number": 1})) == "GpuNumber no enough gpu number on node n1"
    done = task("p4", {"volcano.sh/gpu-memory": 600}, {GPU_INDEX: "0"}, phase="Succeeded")
    assert done.status == TaskStatus.Succeeded
    m = share_node()
    m.add_task(done)
    assert m.cards[0].idle_memory() == 1000 and not m.cards[0].idle()


def test_gpu_index_malformed_is_none():
    d = share_node()
    d.add_task(task("p1", {"volcano.sh/gpu-memory": 500}, {GPU_INDEX: "0,x"}))
    assert all(c.idle() for c in d.cards.values())


# -- exclusivity rules --------------------------------------------------------------------------------------
RULES = [{"app": "training", "team": "ml"}, {"workload": "inference"}]


def test_parse_rules_edge_cases():  # TestParseExclusiveRulesHandlesEdgeCases, TestLoadGPUExclusiveConfig
    assert parse_rules(None) == [] and parse_rules("not a slice") == [] and parse_rules([]) == []
    assert parse_rules([{}]) == []
    assert parse_rules([{"app": "training", "n": 1}, {"workload": "inference"}]) == [{"app": "training"},
                                                                                   {"workload": "inference"}]


@pytest.mark.parametrize(("labels", "want"), [
    ({"app": "training", "team": "ml"}, [0]), ({"app": "training", "team": "ml", "env": "prod"}, [0]),
    ({"app": "training"}, []), ({"app": "training", "team": "data"}, []), ({"workload": "inference"}, [1]),
    ({"app": "training", "team": "ml", "workload": "inference"}, [0, 1]), ({}, [])])
def test_matching_rules(labels, want):  # TestPodMatchesRule, TestMatchingRules
    assert matching_rules(labels, RULES) == want


def test_release_keeps_a_card_reserved_while_another_rule_task_is_on_it():
    inner = vgpu_node(cards=2)
    train = {"app": "training", "team": "ml"}
    a = vreq("a", labels=train, annotations={ASSIGNED_IDS: "GPU-0,NVIDIA,1000,0:"})
    b = vreq("b", labels=train, annotations={ASSIGNED_IDS: "GPU-0,NVIDIA,1000,0:"})
    inner.add_task(a)
    inner.add_task(b)
    ex = ExclusiveVgpu.open(inner, RULES, [a, b])
    assert ex.reserved_for(vreq("c", labels=train)) == {0}
    assert ex.reserved_for(vreq("c", labels={"workload": "inference"})) == frozenset()
    ex.release(a)
    assert ex.rule_cards == {0: {0}}
    ex.release(b)
    assert ex.rule_cards == {}


def test_allocated_rule_task_reserves_its_card():
    ex = ExclusiveVgpu.open(vgpu_node(cards=2), RULES, [])
    train = {"app": "training", "team": "ml"}
    ex.allocate(vreq("a", labels=train), 0)
    assert ex.rule_cards == {0: {1}}
    assert ex.filter(vreq("b", labels=train, num=2)) is not None
    assert ex.filter(vreq("b", labels={"app": "serving"}, num=2)) is None


def test_uuid_constraints():  # TestGPUUUIDConstraints
    d = vgpu_node()
    assert "volcano.sh/vgpu-use-gpuuuid" in (d.filter(vreq("a", annotations={"volcano.sh/vgpu-use-gpuuuid":
                                                                          "GPU-unknown"})) or "")
    assert "volcano.sh/vgpu-nouse-gpuuuid" in (d.filter(vreq("a", annotations={"volcano.sh/vgpu-nouse-gpuuuid":
                                                                            "GPU-0,GPU-1"})) or "")
    given = d.allocate(vreq("a", annotations={"volcano.sh/vgpu-use-gpuuuid": "GPU-0"}), 0)
    assert given[ASSIGNED_IDS].startswith("GPU-0,")
    given = d.allocate(vreq("b", annotations={"volcano.sh/vgpu-nouse-gpuuuid": "GPU-1"}), 0)
    assert given[ASSIGNED_IDS].startswith("GPU-0,")
