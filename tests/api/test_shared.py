"""What converted tasks and decoded specs share (busched.api.shared), and that sharing changes no
message: a spec encodes as it was decoded."""

from __future__ import annotations

import msgspec
import pytest

from busched.api import build, shared
from busched.api import objects as o
from busched.fastpath.lending import Lease, SharedStateMutated
from busched.fastpath.verify import check


def _decode(raw: bytes) -> o.TaskSpec:
    return msgspec.json.decode(raw, type=o.TaskSpec)


def test_decoded_specs_share_empties_and_names_and_encode_unchanged():
    raw_a = b'{"name":"a","namespace":"team","job":"j","node":"n1","phase":"Running","requests":{"cpu":"1"}}'
    raw_b = b'{"name":"b","namespace":"team","job":"j","node":"n1","phase":"Running","labels":{"k":"v"}}'
    a, b = _decode(raw_a), _decode(raw_b)
    assert a.labels is shared.SPEC_NO_MAP and a.tolerations is shared.SPEC_NO_LIST and b.requests is shared.SPEC_NO_MAP
    assert b.labels == {"k": "v"} and b.labels is not shared.SPEC_NO_MAP
    assert a.namespace is b.namespace and a.job is b.job and a.node is b.node
    assert msgspec.json.encode(a) == raw_a and msgspec.json.encode(b) == raw_b
    c = _decode(raw_a.replace(b'"a"', b'"c"'))
    assert c.requests is a.requests == {"cpu": "1"}
    assert _decode(b'{"name":"d","requests":{"cpu":"2"}}').requests == {"cpu": "2"}
    # (numbers are not shared: 1 == 1.0 == True as keys)
    one, flag = _decode(b'{"name":"e","requests":{"cpu":1}}'), _decode(b'{"name":"f","requests":{"cpu":1.0}}')
    assert one.requests is not flag.requests and type(flag.requests["cpu"]) is float
    made = o.TaskSpec(name="c", namespace="team")  # made in code: the same
    assert made.annotations is shared.SPEC_NO_MAP and made.namespace is a.namespace


def test_task_spec_is_not_tracked_by_the_collector():
    import gc

    assert not gc.is_tracked(_decode(b'{"name":"a","labels":{"k":"v"}}'))


def test_converted_job_holds_the_shared_empties():
    j = build.job_info(msgspec.json.decode(b'{"name":"j"}', type=o.JobSpec), {})
    assert j.labels is shared.NO_MAP and j.task_min_available is shared.NO_MAP and j.conditions is shared.NO_LIST
    k = build.job_info(msgspec.json.decode(b'{"name":"k","labels":{"a":"b"}}', type=o.JobSpec), {})
    assert k.labels == {"a": "b"} and k.labels is not shared.NO_MAP


def test_job_spec_shares_empties():
    j = msgspec.json.decode(b'{"name":"j","queue":"q1"}', type=o.JobSpec)
    assert j.labels is shared.SPEC_NO_MAP and j.conditions is shared.SPEC_NO_LIST
    assert msgspec.json.encode(j) == b'{"name":"j","queue":"q1"}'


def test_converted_task_holds_the_shared_empties():
    t = build.task_info(_decode(b'{"name":"a","requests":{"cpu":"1"}}'), {})
    assert t.labels is shared.NO_MAP and t.extra is shared.NO_MAP and t.images is shared.NO_LIST
    u = build.task_info(_decode(b'{"name":"b","labels":{"x":"y"}}'), {})
    assert u.labels == {"x": "y"} and u.labels is not shared.NO_MAP


@pytest.mark.parametrize("empty", ["NO_MAP", "NO_LIST", "SPEC_NO_MAP", "SPEC_NO_LIST"])
def test_verify_names_a_filled_shared_empty(empty):
    box = getattr(shared, empty)
    lease = Lease()
    lease.prints = []
    check(lease)  # intact: nothing to say
    if isinstance(box, dict):
        box["x"] = "y"
    else:
        box.append("x")
    try:
        assert not shared.empties_intact()
        with pytest.raises(SharedStateMutated, match="share"):
            check(lease)
    finally:
        box.clear()


def test_a_shared_request_refuses_every_change_in_place_and_copies_as_itself():
    import copy
    import pickle

    from busched.api.resource import Resource
    from busched.api.shared import SharedResource

    r = SharedResource.of(Resource(1000.0, 2.0, {"nvidia.com/gpu": 1000.0}))
    for change in (lambda: r.scalars.__setitem__("x", 1.0), lambda: r.scalars.update(x=1.0),
                   lambda: r.scalars.pop("nvidia.com/gpu"), lambda: r.scalars.clear(),
                   lambda: r.fit_delta(Resource(0.0, 0.0, {"nvidia.com/gpu": 1.0}))):
        with pytest.raises(TypeError):
            change()
    assert r.scalars == {"nvidia.com/gpu": 1000.0}
    assert copy.copy(r) is r and copy.deepcopy(r) is r
    back = pickle.loads(pickle.dumps(r))
    assert type(back) is SharedResource and back == r
    plain = r.clone()
    plain.scalars["x"] = 1.0  # a clone is the caller's own
    assert "x" not in r.scalars


def test_names_are_shared_through_a_bounded_memo(monkeypatch):
    from busched.api import shared

    monkeypatch.setattr(shared, "_NAMES", {})
    monkeypatch.setattr(shared, "_NAMES_MAX", 3)
    a = shared.one_name("".join(["ns/", "job"]))
    assert shared.one_name("".join(["ns/", "job"])) is a
    for i in range(5):
        shared.one_name(f"n{i}")
    assert len(shared._NAMES) <= 3  # cleared when full: untrusted specs bring new names forever
