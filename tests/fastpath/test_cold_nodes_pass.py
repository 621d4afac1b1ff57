"""The cold nodes loop's one pass over the tasks (busched.fastpath.lending_cold._placed_by_node) against
the per-node loop it stands for (``SharedMemo.one_pass_nodes = False``: each node's tasks sorted by the
cache's sequence, each looked up, its template kept or made again).

Random clusters (`_odd_cluster`: ended, deleting, Binding tasks, tasks without a job or on a missing node)
inserted as a restart does, then made harder for the pass: the cache's task map put out of the tasks'
order (the pass sorts instead of reading the map in order), some templates dropped, handed to a
written owner, or left of an older spec (a task upserted naming a priority class: the cache keeps no new
template for it, so the old one stays with the old spec); their nodes go task by task, and make them
again in the same order as the reference.
The whole snapshot and every record of the memo must be equal, and the pass's lists equal, node by
node, to the reference's own loop for every node it takes.
"""

from __future__ import annotations

import random

import msgspec
import pytest

from busched.api import objects as o
from busched.api.task import TaskStatus
from busched.fastpath import lending_cold
from tests.fastpath.test_lending_cold import _lent, _memo_state, _odd_cluster, _restart_cache

_ENDED = (TaskStatus.Succeeded, TaskStatus.Failed)


def _with_ended(rng: random.Random, spec):  # noqa: ANN001, ANN202
    """Some placed tasks ended (on their nodes, not placed there)."""
    tasks = [msgspec.structs.replace(t, phase=rng.choice(["Succeeded", "Failed"])) if t.node and rng.random() < 0.15
             else t for t in spec.tasks]
    return msgspec.structs.replace(spec, tasks=tasks)


def _harder(rng: random.Random, cache, shuffle: bool, drop: float, owned: float,  # noqa: ANN001
            stale: float = 0.0) -> set[str]:
    """The same changes to each cache when ``rng`` starts from the same state; the nodes of the tasks
    whose template is to be made again."""
    memo = cache._memo
    changed = set()
    if shuffle:
        items = list(cache.objects["task"].items())
        rng.shuffle(items)
        cache.objects["task"].clear()
        cache.objects["task"].update(items)
    if stale:
        cache.upsert("priorityClass", o.PriorityClassSpec(name="high", value=1000))
    written = None
    for key in sorted(memo._tasks):
        r = rng.random()
        if r < drop + owned + stale:
            changed.add(cache.objects["task"][key].node)
        if r < drop:
            del memo._tasks[key]
        elif r < drop + owned:
            if written is None:  # a job a session wrote (its templates are made again)
                written = next(iter(memo._job_templates.values()))[1]
                written.written = True
            memo._tasks[key].owner = written
        elif r < drop + owned + stale:  # the template stays, of the spec before this upsert
            cache.upsert("task", msgspec.structs.replace(cache.objects["task"][key], priority_class_name="high"), key)
            assert memo._tasks[key].spec is not cache.objects["task"][key]
    return changed - {""}


def _reference_lists(cache) -> dict[str, list[str]]:  # noqa: ANN001
    """Per node, the uids of the tasks the per-node loop places, in its order (templates as they are)."""
    out: dict[str, list[str]] = {}
    seq, specs, templates = cache.task_seq, cache.objects["task"], cache._memo._tasks
    for name, keys in cache.node_tasks.items():
        got = []
        for key in sorted(keys, key=seq.__getitem__):
            tm = templates[key]
            assert tm.spec is specs[key]
            if tm.task.status not in _ENDED:
                got.append(tm.task.uid)
        out[name] = got
    return out


@pytest.mark.parametrize("seed", range(16))
def test_one_pass_equals_the_per_node_loop(seed: int) -> None:
    rng = random.Random(seed)
    spec = _with_ended(rng, _odd_cluster(rng))
    caches = _restart_cache(spec), _restart_cache(spec)
    shuffle, drop, owned = seed % 2 == 1, (0.0, 0.0, 0.05, 0.3)[seed // 2 % 4], 0.1 if seed % 5 == 4 else 0.0
    stale = 0.1 if seed % 3 == 2 else 0.0
    state = rng.getstate()
    for c in caches:
        rng.setstate(state)
        changed = _harder(rng, c, shuffle, drop, owned, stale)
    one, ref = caches
    ref._memo.one_pass_nodes = False
    by_node, ended, redo = lending_cold._placed_by_node(one, one._memo._tasks)  # (reads only)
    assert redo == changed  # the nodes with a template to make again go task by task
    if not changed:
        want = _reference_lists(one)
        assert {n: [t.uid for t in ts] for n, ts in by_node.items()} == {n: w for n, w in want.items() if w}
        assert all(ended.get(n, 0) + len(want[n]) == len(one.node_tasks[n]) for n in want)
        assert any(ended.values())  # (some nodes hold ended tasks)
    a, b = _lent(one), _lent(ref)
    if isinstance(a, str) or isinstance(b, str):  # a node refused a Binding task: the same refusal
        assert a == b
        return
    assert _memo_state(a, one._memo) == _memo_state(b, ref._memo)


def test_a_node_whose_index_disagrees_goes_task_by_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node the pass counts differently from the cache's index (here: the pass made to miss a task) is
    placed by the per-node loop, so the snapshot is the reference's."""
    spec = _odd_cluster(random.Random(5))
    one, ref = _restart_cache(spec), _restart_cache(spec)
    ref._memo.one_pass_nodes = False
    real = lending_cold._placed_by_node

    def short(cache, templates):  # noqa: ANN001, ANN202
        by_node, ended, redo = real(cache, templates)
        name = max(by_node, key=lambda n: len(by_node[n]))
        by_node[name] = by_node[name][:-1]
        return by_node, ended, redo

    monkeypatch.setattr(lending_cold, "_placed_by_node", short)
    a, b = _lent(one), _lent(ref)
    assert not isinstance(a, str) and not isinstance(b, str)
    assert _memo_state(a, one._memo) == _memo_state(b, ref._memo)
