"""The cold lending's node loop (busched.fastpath.lending_cold._copy_in: each task's copy made as it is
accounted) against ``node.add_task(task, task.copy())`` for each task: the same node to the bit (maps
and their order, every sum, the written flag), the same node names on the tasks, copies that are
fresh objects equal field by field to ``task.copy()``, and the same refusal at the same task."""

from __future__ import annotations

import random

import pytest

from busched.api.node import NodeAccountingError, NodeInfo
from busched.api.resource import Resource
from busched.api.task import TaskInfo, TaskStatus
from busched.fastpath.lending_cold import _copy_in
from tests.api.test_assemble import _node, _node_state, _tasks

_FIELDS = TaskInfo.__slots__


def _bare_node(rng: random.Random) -> NodeInfo:
    """A node whose allocatable names no extended resource (no pods, no gpu): its idle has no scalars, so the
    requests' scalars are not taken off it (`_copy_in`'s ``is_`` branch, as `NodeInfo.add_task`)."""
    return NodeInfo.new("n1", Resource(64000.0, 2.0**38, {}))


def _add(node: NodeInfo, tasks: list[TaskInfo], cold: bool) -> str:
    try:
        if cold:
            _copy_in(node, tasks)
        else:
            for t in tasks:
                node.add_task(t, t.copy())
    except NodeAccountingError as e:
        return str(e)
    return ""


@pytest.mark.parametrize("seed", range(40))
def test_copy_in_is_add_task_of_a_copy_for_each(seed: int) -> None:
    rng = random.Random(seed)
    statuses = [TaskStatus.Running, TaskStatus.Releasing, TaskStatus.Pipelined, TaskStatus.Bound,
                TaskStatus.Allocated, TaskStatus.Unknown]
    tasks = _tasks(rng, rng.randrange(0, 15), node="n1")
    for t in tasks:
        t.status = rng.choice(statuses)
    if tasks and seed % 5 == 1:
        tasks.insert(rng.randrange(len(tasks)), tasks[0])  # refused: already on the node
    if tasks and seed % 5 == 2:
        tasks[-1].node_name = "n2"  # refused: on another node
    make = _bare_node if seed % 3 == 0 else _node
    cold, plain = make(random.Random(seed)), make(random.Random(seed))
    c_tasks = [t.copy() for t in tasks]
    p_tasks = [t.copy() for t in tasks]
    got, want = _add(cold, c_tasks, True), _add(plain, p_tasks, False)
    assert got == want
    assert _node_state(cold) == _node_state(plain)
    assert [t.node_name for t in c_tasks] == [t.node_name for t in p_tasks]
    held = list(cold.tasks.values())
    assert not any(c is t for c in held for t in c_tasks)  # the node holds copies of its own
    assert [[getattr(c, f) for f in _FIELDS] for c in held] == [[getattr(c, f) for f in _FIELDS]
                                                                for c in plain.tasks.values()]
    if tasks and not got:
        assert cold.written and held


def test_a_node_written_before_keeps_its_first_map() -> None:
    """The first task accounted gives the node a task map of its own (`NodeInfo._first_write`): the map
    a reader took before is left as it was, and the tasks go into the new one."""
    node = _node(random.Random(1))
    before = node.tasks
    tasks = _tasks(random.Random(2), 3, node="n1")
    for t in tasks:
        t.status = TaskStatus.Running
    _copy_in(node, tasks)
    assert before == {} and node.tasks is not before and list(node.tasks) == [t.uid for t in tasks]
