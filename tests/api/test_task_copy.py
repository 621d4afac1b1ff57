"""TaskInfo is slotted and copied field by field: the copy must name every field."""

from __future__ import annotations

import dataclasses

import pytest

from busched.api.resource import Resource
from busched.api.task import TaskInfo, TaskStatus


def _distinct_task() -> TaskInfo:
    """A task whose every field holds a value of its own (no two fields equal, none the default)."""
    t = TaskInfo(uid="ns-a", name="a", namespace="ns", job="ns/j", resreq=Resource(1000, 2.0),
                 init_resreq=Resource(500, 1.0, {"nvidia.com/gpu": 1000}))
    for i, f in enumerate(dataclasses.fields(TaskInfo)):
        v = getattr(t, f.name)
        if isinstance(v, Resource):
            continue
        if isinstance(v, bool):
            v = not v
        elif isinstance(v, TaskStatus) or f.name == "last_status":
            v = TaskStatus(3 + i % 7)
        elif isinstance(v, (int, float)):
            v = type(v)(100 + i)
        elif isinstance(v, str):
            v = f"{f.name}-{i}"
        elif isinstance(v, dict) or f.name == "affinity":
            v = {f.name: i}
        elif isinstance(v, list):
            v = [f.name, i]
        setattr(t, f.name, v)
    return t


def test_task_has_no_instance_dict():
    t = _distinct_task()
    assert not hasattr(t, "__dict__")
    with pytest.raises(AttributeError):
        t.ad_hoc = 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("how", ["copy", "clone"])
def test_copy_names_every_field(how):
    t = _distinct_task()
    c = getattr(t, how)()  # (a field it left out would be an unset slot: getattr raises)
    assert type(c) is TaskInfo and c is not t
    for f in dataclasses.fields(TaskInfo):
        a, b = getattr(t, f.name), getattr(c, f.name)
        if isinstance(a, Resource):
            assert a.to_dict() == b.to_dict(), f.name
            # a copy shares the requests with its task (they are replaced, never changed in place);
            # a clone has its own
            assert (a is b) == (how == "copy"), f.name
        else:
            assert a is b and a == b, f.name  # shallow: the very values

