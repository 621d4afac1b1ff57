import pytest

from busched.api.quantity import QuantityError
from busched.api.resource import INFINITY, MIN_RESOURCE, ZERO, Resource, exceeded_part


def R(**kw):  # noqa: N802 - short for the Resource it builds, read in every assertion below
    rl = {k.replace("_", "/") if k == "nvidia_com_gpu" else k: v for k, v in kw.items()}
    if "nvidia_com_gpu" in kw:
        rl = {k: v for k, v in rl.items() if k != "nvidia/com/gpu"}
        rl["nvidia.com/gpu"] = kw["nvidia_com_gpu"]
    return Resource.from_list(rl)


def test_units():
    r = R(cpu="500m", memory="1Gi", pods=10, nvidia_com_gpu=2)
    assert r.cpu == 500 and r.memory == 2**30
    assert r.scalars["pods"] == 10 and r.max_task_num == 10
    assert r.scalars["nvidia.com/gpu"] == 2000  # scalars in thousandths, like Volcano


def test_add_sub_roundtrip():
    a, b = R(cpu="2", memory="4Gi", nvidia_com_gpu=1), R(cpu="1", memory="1Gi", nvidia_com_gpu=1)
    c = a.clone().add(b).sub(b)
    assert c == a
    assert (a + b).cpu == 3000 and (a - b).memory == 3 * 2**30


def test_less_equal_tolerance_and_defaults():
    assert R(cpu="1").less_equal(R(cpu="1"))
    assert not R(cpu="1001m").less_equal(R(cpu="1"))
    gpu = R(cpu="1", nvidia_com_gpu=1)
    assert not gpu.less_equal(R(cpu="2"), ZERO)       # missing scalar counts as zero
    assert gpu.less_equal(R(cpu="2"), INFINITY)        # ... or as unlimited
    assert not R(cpu="1").less_equal(R(cpu="2", nvidia_com_gpu=1), INFINITY)  # rr dim absent on left
    ok, names = R(cpu="3", memory="1Gi").less_equal_with_names(R(cpu="2", memory="2Gi"))
    assert not ok and names == ["cpu"]


def test_negative_idle_fails_zero_request():
    idle = R(cpu="1").sub(R(cpu="2"))
    assert not Resource().less_equal(idle)


def test_is_empty_ignores_pods():
    assert Resource.from_list({"pods": 1}).is_empty()
    assert not R(cpu="100m").is_empty()
    assert Resource.from_list({"cpu": "0.00001"}).is_empty() is False  # 1 millicore rounds up


def test_less_and_partly():
    assert R(cpu="1", memory="1").less(R(cpu="2", memory="2"))
    assert not R(cpu="1", memory="3").less(R(cpu="2", memory="2"))
    assert R(cpu="1", memory="3").less_partly(R(cpu="2", memory="2"))
    assert not R(cpu="3", memory="3").less_equal_partly(R(cpu="2", memory="2"))


def test_exceeded_part_and_min_dimension():
    e = exceeded_part(R(cpu="3", memory="1Gi"), R(cpu="2", memory="2Gi"))
    assert e.cpu == 1000 and e.memory == 0
    m = R(cpu="3", nvidia_com_gpu=2).min_dimension(R(cpu="2"), ZERO)
    assert m.cpu == 2000 and m.scalars["nvidia.com/gpu"] == 0


def test_bad_quantity_names_field():
    with pytest.raises(QuantityError, match=r"node n1\.memory"):
        Resource.from_list({"memory": "lots"}, field="node n1")


def test_unschedulable_names_are_dropped():
    r = Resource.from_list({"cpu": "1", "rdma": "4", "example.com/foo": "2", "hugepages-2Mi": "1Mi",
                            "requests.example.com/x": "1", "count/pods": "3"})
    assert set(r.scalars) == {"example.com/foo", "hugepages-2Mi"}


def _less_equal_reference(l: Resource, r: Resource, default: int) -> bool:
    """Volcano's LessEqual, dimension by dimension (a missing scalar takes the default)."""
    def le(a: float, b: float) -> bool:
        return a < b or abs(a - b) < MIN_RESOURCE
    if not le(l.cpu, r.cpu) or not le(l.memory, r.memory):
        return False
    if default == INFINITY and any(n not in l.scalars for n in r.scalars):
        return False
    for n, lv in l.scalars.items():
        if n not in r.scalars:
            if default == INFINITY:
                continue
            if not le(lv, 0.0):
                return False
        elif not le(lv, r.scalars[n]):
            return False
    return True


def test_less_equal_matches_reference():
    import random

    rng = random.Random(5)
    values = [0.0, 0.05, 0.1, 0.15, 1.0, 1.05, 2.0, -1.0]
    for _ in range(5000):
        def res() -> Resource:
            return Resource(rng.choice(values), rng.choice(values),
                            {n: rng.choice(values) for n in ("pods", "nvidia.com/gpu") if rng.random() < 0.4})
        a, b = res(), res()
        for default in (ZERO, INFINITY):
            assert a.less_equal(b, default) == _less_equal_reference(a, b, default)
