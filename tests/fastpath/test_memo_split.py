"""Oracle: `memo.split` kept from session to session holds exactly the objects a fresh split of the
same list gives, after random replacements, deletions (which shift the later objects down a place)
and additions, the changes a churning cluster makes between cycles."""

from __future__ import annotations

import random

import pytest

from busched.fastpath import memo


class _Ssn:
    def __init__(self, state: dict) -> None:
        self.others = {"plugin_state": state}


class _Obj:
    made = 0

    def __init__(self, good: bool) -> None:
        _Obj.made += 1
        self.uid = f"o{_Obj.made}"
        self.good = good


def _test(o: _Obj) -> bool:
    return o.good


def _fresh(objs: list[_Obj]) -> tuple[set[str], set[str]]:
    return {o.uid for o in objs if o.good}, {o.uid for o in objs if not o.good}


def test_a_deleted_object_and_an_added_one_keep_the_object_that_shifted():
    objs = [_Obj(i % 2 == 0) for i in range(12)]
    state: dict = {}
    memo.split(_Ssn(state), "k", list(objs), _test)
    objs = objs[:10] + objs[11:] + [_Obj(True)]  # [.., B, C] -> [.., C, D]: B gone, D new
    yes, no = memo.split(_Ssn(state), "k", list(objs), _test)
    assert (set(yes), set(no)) == _fresh(objs)


@pytest.mark.parametrize("seed", range(20))
def test_split_kept_equals_a_fresh_split_after_random_churn(seed):
    rng = random.Random(seed)
    objs = [_Obj(rng.random() < 0.5) for _ in range(rng.randrange(8, 80))]
    state: dict = {}
    updated = 0
    for _ in range(30):
        for _ in range(rng.randrange(0, 3)):  # deletions: what follows moves down a place
            if len(objs) > 4:
                del objs[rng.randrange(len(objs))]
        for _ in range(rng.randrange(0, 3)):  # replacements in place
            objs[rng.randrange(len(objs))] = _Obj(rng.random() < 0.5)
        objs.extend(_Obj(rng.random() < 0.5) for _ in range(rng.randrange(0, 4)))
        before = state.get(("reuse", "k"))
        yes, no = memo.split(_Ssn(state), "k", list(objs), _test)
        assert (set(yes), set(no)) == _fresh(objs)
        assert all(yes[u].uid == u for u in yes) and all(no[u].uid == u for u in no)
        if before is not None and state[("reuse", "k")][1][0] is before[1][0]:
            updated += 1  # the kept maps were updated in place (not rebuilt)
    assert updated > 0  # the incremental branch ran


def test_by_name_follows_every_change() -> None:
    """`memo.by_name` kept from session to session gives what a fresh map of the objects gives: objects
    replaced in place, appended, removed and renamed at random (the plain reference: a dict built anew)."""
    import random
    from types import SimpleNamespace

    from busched.fastpath import memo

    rng = random.Random(5)
    state: dict = {}
    objs = [SimpleNamespace(name=f"n{i}") for i in range(40)]
    updated = 0
    for step in range(300):
        ssn = SimpleNamespace(others={"plugin_state": state}, shared={})
        kind = rng.random()
        objs = list(objs)
        if kind < 0.6:  # a few replaced in place (lent nodes assembled again)
            for i in rng.sample(range(len(objs)), rng.randint(0, 3)):
                objs[i] = SimpleNamespace(name=objs[i].name)
        elif kind < 0.75:
            objs.append(SimpleNamespace(name=f"m{step}"))
        elif kind < 0.85 and len(objs) > 5:
            del objs[rng.randrange(len(objs))]
        elif kind < 0.95:  # a renamed place, or a name appended twice
            objs[rng.randrange(len(objs))] = SimpleNamespace(name=f"r{step}")
        else:
            objs.append(SimpleNamespace(name=objs[0].name))
        before = state.get(("reuse", "nodes"))
        got = memo.by_name(ssn, "nodes", objs)
        want = {o.name: o for o in objs}
        assert list(got.items()) == list(want.items()), step
        updated += before is not None and got is before[1]
    assert updated > 100  # most steps were updates in place, not rebuilt


def test_names_of_follows_by_name() -> None:
    """The kept name set is the names of the map `by_name` gives, whatever changed."""
    import random
    from types import SimpleNamespace

    from busched.fastpath import memo

    rng = random.Random(9)
    state: dict = {}
    objs = [SimpleNamespace(name=f"n{i}") for i in range(30)]
    kept = 0
    last = None
    for step in range(200):
        ssn = SimpleNamespace(others={"plugin_state": state}, shared={})
        objs = list(objs)
        kind = rng.random()
        if kind < 0.5:
            i = rng.randrange(len(objs))
            objs[i] = SimpleNamespace(name=objs[i].name)
        elif kind < 0.7:
            objs.append(SimpleNamespace(name=f"m{step}"))
        elif kind < 0.85 and len(objs) > 5:
            del objs[rng.randrange(len(objs))]
        elif kind < 0.95:
            objs[rng.randrange(len(objs))] = SimpleNamespace(name=f"r{step}")
        names = memo.names_of(ssn, "nodes", memo.by_name(ssn, "nodes", objs))
        assert names == frozenset(o.name for o in objs), step
        kept += names is last
        last = names
    assert kept > 50  # kept while the names stayed
