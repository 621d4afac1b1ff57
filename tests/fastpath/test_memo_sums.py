"""Oracle: `sums.summed` kept from session to session equals the plain in-order sum after random
changes, including sums past a float's exact range (where `sums.Running` keeps them)."""

from __future__ import annotations

import random

import pytest

from busched.api.resource import Resource
from busched.fastpath import memo, sums


class _Ssn:
    def __init__(self, state: dict) -> None:
        self.others = {"plugin_state": state}


class _Obj:
    made = 0

    def __init__(self, r: Resource | None) -> None:
        self.r = r
        _Obj.made += 1
        self.uid = f"o{_Obj.made}"


def _part(rng: random.Random, big: bool) -> Resource | None:
    if rng.random() < 0.05:
        return None
    names = rng.choice([(), (), ("pods",), ("gpu", "pods"), ("pods", "gpu")])
    if big:  # 53 significant bits at mixed magnitudes: most sums round, so their order shows
        def value() -> float:
            return rng.randrange(1, 1 << 53) * 2.0 ** rng.randrange(-20, 30)
    else:  # whole milli-units: `Sum` keeps these exactly
        def value() -> float:
            return float(rng.randrange(0, 1 << 20)) * 1000.0
    return Resource(value(), value(), {n: value() for n in names})


def _plain(objs: list[_Obj]) -> Resource:
    total = Resource()
    for o in objs:
        if o.r is not None:
            total.add(o.r)
    return total


def _same(a: Resource, b: Resource) -> bool:
    return (a.cpu, a.memory, list(a.scalars.items()), a.max_task_num) == \
        (b.cpu, b.memory, list(b.scalars.items()), b.max_task_num)


@pytest.mark.parametrize("seed", range(12))
def test_summed_equals_plain_sum_after_random_changes(seed):
    rng = random.Random(seed)
    big = seed % 3 != 0
    objs = [_Obj(_part(rng, big)) for _ in range(rng.randrange(1, 60))]
    state: dict = {}
    for _ in range(25):
        got = sums.summed(_Ssn(state), "t", list(objs), lambda o: o.r)
        want = _plain(objs)
        assert _same(got, want), (got, want)
        # a few replaced in place (new objects, as lending gives), a few appended
        for _ in range(rng.randrange(0, 4)):
            objs[rng.randrange(len(objs))] = _Obj(_part(rng, big))
        for _ in range(rng.randrange(0, 3)):
            objs.append(_Obj(_part(rng, big)))


def test_running_sums_take_over_past_the_exact_range():
    """20,000 nodes of 256Gi: the sum is no longer exact, and the running sums keep it anyway."""
    objs = [_Obj(Resource(32000.0, 256.0 * 2**30 + i, {"pods": 110.0})) for i in range(20000)]
    state: dict = {}
    sums.summed(_Ssn(state), "t", list(objs), lambda o: o.r)
    objs[7] = _Obj(Resource(32000.0, 255.0 * 2**30 + 3, {"pods": 110.0}))
    got = sums.summed(_Ssn(state), "t", list(objs), lambda o: o.r)
    assert _same(got, _plain(objs))
    assert state[("reuse", ("summed", "t"))][1].prefix is not None  # kept by the running sums
    objs[19999] = _Obj(Resource(1.0, 2.0**60, {"pods": 1.0}))
    assert _same(sums.summed(_Ssn(state), "t", list(objs), lambda o: o.r), _plain(objs))


def test_running_sums_take_a_scalar_name_no_part_had():
    """Past the exact range, a part appended with scalar names no earlier part has (a first gpu node
    joins) starts new running sums; the total still equals the plain in-order sum, names in order."""
    objs = [_Obj(Resource(32000.0, 256.0 * 2**30 + i)) for i in range(300)]
    objs[5] = _Obj(Resource(32000.0, 2.0**60 + 3))  # past a float's exact range: Running from the first update
    state: dict = {}
    sums.summed(_Ssn(state), "t", list(objs), lambda o: o.r)
    objs[9] = _Obj(Resource(16000.0, 3.0))
    assert _same(sums.summed(_Ssn(state), "t", list(objs), lambda o: o.r), _plain(objs))
    assert state[("reuse", ("summed", "t"))][1].prefix is not None
    objs.append(_Obj(Resource(8000.0, 2.0**40 + 1, {"nvidia.com/gpu": 8.0})))
    objs.append(_Obj(Resource(8000.0, 7.0, {"pods": 110.0, "nvidia.com/gpu": 4.0})))
    got = sums.summed(_Ssn(state), "t", list(objs), lambda o: o.r)
    assert state[("reuse", ("summed", "t"))][1].prefix is not None  # still the running sums
    assert _same(got, _plain(objs)), (got, _plain(objs))
    assert list(got.scalars) == ["nvidia.com/gpu", "pods"]


class _SharedSsn(_Ssn):
    def __init__(self, state: dict) -> None:
        super().__init__(state)
        self.shared: dict = {}


@pytest.mark.parametrize("seed", range(6))
def test_results_sharing_one_comparison_equal_fresh_ones(seed):
    """Several results over the same objects in one session share one list and one comparison with
    the last session's (memo._one_of, memo._changed); each still equals its from-scratch value."""
    rng = random.Random(seed)
    objs = [_Obj(_part(rng, False)) for _ in range(rng.randrange(8, 40))]
    state: dict = {}
    calls = {"update": 0}

    def count_full(os):
        return [o.r.cpu if o.r is not None else None for o in os]

    def count_update(last, pairs):
        calls["update"] += 1
        out = list(last)
        for i, _, o in pairs:
            v = o.r.cpu if o.r is not None else None
            if i < len(out):
                out[i] = v
            else:
                out.append(v)
        return out

    for _ in range(15):
        ssn = _SharedSsn(state)
        a = memo.incremental(ssn, "a", list(objs), count_full, count_update)
        b = memo.incremental(ssn, "b", list(objs), count_full, count_update)
        s = memo.split(ssn, "s", list(objs), lambda o: o.r is not None and o.r.cpu > 500 * 1000.0)
        assert a == b == count_full(objs)
        assert set(s[0]) == {o.uid for o in objs if o.r is not None and o.r.cpu > 500 * 1000.0}
        assert set(s[1]) == {o.uid for o in objs} - set(s[0])
        assert len(state["reuse.lists"][1]) == 1  # one list kept for all three
        for _ in range(rng.randrange(0, 3)):
            objs[rng.randrange(len(objs))] = _Obj(_part(rng, False))
        if rng.random() < 0.3:
            objs.append(_Obj(_part(rng, False)))
    assert calls["update"] > 0
