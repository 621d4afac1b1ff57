"""A checkpoint whose tasks share templates (format 2, busched.scheduler.checkpoint_shared) restores exactly what
the same messages whole (format 1) restore: oracles over random mixes of replicas, tasks that differ from their
group in any field, and everything the fast path must hand over (forged, malformed, oversized, invalid, deletes,
bound, ended, suspended, deleting); forged columns are refused one by one as their messages would be, and a
checkpoint whose templates or columns do not hold together is not used."""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest

from busched.api import build, build_like
from busched.api import objects as o
from busched.api.job import JobInfo
from busched.api.task import TaskInfo
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.scheduler import Scheduler
from busched.scheduler import checkpoint as C
from busched.scheduler.restore_bulk import apply_restored
from tests.scheduler.test_checkpoint import everything
from tests.scheduler.test_restore_bulk import _enc, _varied, applied, counters, ordered

# a field a task may differ from its group in, and values for it
_DIFFERENT: list[tuple[str, list[Any]]] = [
    ("labels", [{"app": "a"}, {"app": "b", "volcano.sh/preemptable": "false"}]),
    ("annotations", [{"x": "y"}, {"volcano.sh/task-priority": "7"}, {"volcano.sh/task-priority": "9" * 12}]),
    ("node_selector", [{"zone": "a"}]), ("priority", [5, -3]), ("priority_class_name", ["high"]),
    ("requests", [{"cpu": "2"}, {"cpu": "lots"}, {}]), ("limits", [{"cpu": "2", "memory": "1Gi"}]),
    ("created", ["2026-01-01T00:00:00Z", 12.5, "yesterday"]), ("start_time", [3.0]),
    ("status", ["Bound", "Releasing", "NoSuchStatus", "Pending"]),  # (Pending: on a node, no node_name)
    ("deleting", [True]), ("phase", ["Succeeded", "Bogus"]),
    ("tolerations", [[{"key": "k", "operator": "Exists"}]]), ("images", [["img"]]),
    ("host_ports", [[8080]]), ("scheduling_gates", [["gate"]]), ("command", [["/bin/true"]]),
    ("nominated_node_name", ["n1"]), ("preemption_policy", ["Never"]), ("namespace", ["u"]),
]


_JOB_DIFFERENT: list[tuple[str, list[Any]]] = [
    ("min_member", [0, 3]), ("queue", ["q"]), ("phase", ["Running", "Bogus"]), ("priority_class_name", ["high"]),
    ("annotations", [{"a": "b"}, {"volcano.sh/preemptable": "true"}]), ("labels", [{"l": "v"}]),
    ("min_task_member", [{"w": 1}]), ("min_resources", [{"cpu": "2"}, {"cpu": "lots"}]),
    ("created", ["2026-01-01T00:00:00Z", "never"]), ("suspend", [True]),
    ("conditions", [[{"type": "Ready", "status": "True"}]]),
    ("sub_group_policy", [[{"name": "g", "subGroupSize": 1, "labelSelector": {"matchLabels": {"a": "b"}}}]]),
]


def jobs_alike(rng: random.Random, n: int = 30) -> list[tuple[str, bytes]]:
    """Jobs of a few shapes (one spec but for the name), some differing in a field, some forged."""
    out: list[tuple[str, bytes]] = []
    for j in range(n):
        kw: dict[str, Any] = {"min_member": 1, "phase": rng.choice(["Running", "Pending"])}
        if rng.random() < 0.3:
            field, values = rng.choice(_JOB_DIFFERENT)
            kw[field] = rng.choice(values)
        name = f"s{j}" if rng.random() < 0.9 else f"s{j}-{'x' * 300}"  # (over the limit of 400 bytes, these)
        spec = o.JobSpec(name=name, namespace="t", **kw)
        subject = S.state_subject("job", f"t/{name}" if rng.random() < 0.95 else f"t/{name}z")  # (forged, some)
        out.append((subject, _enc(m.upsert("job", spec, 1))))
    return out


def replicas(rng: random.Random, n: int = 40) -> list[tuple[str, bytes]]:
    """Jobs of replicas (one spec but for name, job, node and phase), some tasks differing from their group in a
    field, some with names long enough that their message could exceed the limit, forged names, bad phases."""
    out: list[tuple[str, bytes]] = []
    for j in range(n // 4):
        job = f"r{j}"
        out.append((S.state_subject("job", f"t/{job}"), _enc(m.upsert("job", o.JobSpec(name=job, namespace="t"), 1))))
        base: dict[str, Any] = {"requests": {"cpu": "1", "memory": "1Gi"}}
        if rng.random() < 0.3:
            field, values = rng.choice(_DIFFERENT)
            base[field] = rng.choice(values)
        for i in range(rng.randint(1, 6)):
            kw = dict(base)
            name = f"{job}-{i}"
            node, phase = rng.choice([("", "Pending"), ("n0", "Running"), ("n1", "Running"), ("n2", "Succeeded"),
                                      ("n9", "Running"), ("n0", "Failed")])
            what = rng.random()
            if what < 0.15:
                field, values = rng.choice(_DIFFERENT)
                kw[field] = rng.choice(values)
            elif what < 0.2:
                name = f"{name}-{'x' * rng.choice([40, 60, 70])}"  # near the limit of 400 bytes (or over it)
            elif what < 0.23:
                phase = "Bogus"
            ns = kw.pop("namespace", "t")
            spec = o.TaskSpec(name=name, namespace=ns, job=rng.choice([job, job, job, ""]), node=node,
                              **{"phase": phase, **kw})
            subject = S.state_subject("task", f"t/{name}")
            if rng.random() < 0.04:  # a payload for another task: forged
                subject = S.state_subject("task", f"t/{name}z")
            out.append((subject, _enc(m.upsert("task", spec, rng.choice([1, 1, 2])))))
    return out


def _not_canonical(data: bytes, how: int) -> bytes:
    """The same message in bytes no busched publisher writes (a trailing space, the keys reordered, the default phase
    given): the live path reads it as its canonical form, so a checkpoint must keep it whole, byte for byte."""
    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return data
    body = doc.get("task") or doc.get("job") if type(doc) is dict else None
    if how == 0 or type(body) is not dict:
        return data + b" "
    if how == 1:
        return msgspec.json.encode({k: doc[k] for k in reversed(doc)})
    body.setdefault("phase", "Pending")
    return msgspec.json.encode(doc)


def mix(seed: int) -> list[tuple[str, bytes, int]]:
    rng = random.Random(seed)
    msgs = _varied(rng, 60) + replicas(rng) + jobs_alike(rng)
    # (every seventh message from the sixtieth, replicas and jobs most, in bytes of its own: not the canonical form)
    msgs[60::7] = [(subject, _not_canonical(data, i % 3)) for i, (subject, data) in enumerate(msgs[60::7])]
    head, rest = msgs[:4], msgs[4:]
    rng.shuffle(rest)
    return [(subject, data, seq) for seq, (subject, data) in enumerate(head + rest, start=1)]


def restored(ck: C.Checkpoint, sizes: list[int], *, entries: bool = True, live: bool = False) -> Scheduler:
    """A fresh scheduler fed ``ck`` in batches of ``sizes`` (the entries as `restore` hands them with ``entries``;
    ``live``: through the live path, `handle_state_batch`, messages whole)."""
    s = applied([], True)
    s.clock = lambda: 1000.0  # type: ignore[method-assign]
    s.table.clock = s.clock
    merged = C.Merged(ck, [])
    items = [it for batch in merged.batches(release=False, entries=entries and not live) for it in batch]
    i = 0
    for size in sizes:
        part = items[i:i + size]
        i += size
        if live:
            s.handle_state_batch(part)
        else:
            apply_restored(s.feed, part)
    return s


def infos(s: Scheduler) -> tuple[Any, ...]:
    """Every field of every conversion the restart kept (the lending's task and job templates)."""
    memo = s.cache._memo
    return ([(k, t.spec, [getattr(t.task, f) for f in TaskInfo.__slots__]) for k, t in memo._tasks.items()],
            [(k, spec, [getattr(j, f) for f in JobInfo.__slots__]) for k, (spec, j) in memo._job_templates.items()])


def test_the_shared_form_stands_for_every_message_byte_for_byte():
    items = mix(0)
    ck = C.build("s", "c", len(items), items)
    assert ck.templates and ck.shared and sum(1 for t in ck.shared if t) >= len(ck.templates) * 2
    again = C.decode(C.encode(ck))
    assert C.whole(again).data == [data for _, data, _ in items]
    assert len(C.encode(ck)) < len(C.encode(C.whole(ck)))


@pytest.mark.parametrize("seed", range(6))
def test_a_shared_checkpoint_restores_what_the_whole_messages_restore(seed):
    items = mix(seed)
    rng = random.Random(seed)
    sizes = [len(items)] if seed % 2 else [rng.randint(1, 25) for _ in range(len(items))]
    one = C.Checkpoint(stream="s", created="c", seq=len(items), subjects=[it[0] for it in items],
                       seqs=[it[2] for it in items], data=[it[1] for it in items])
    two = C.decode(C.encode(C.build("s", "c", len(items), items)))
    assert two.shared
    a, b = restored(one, sizes), restored(two, sizes)
    live = restored(two, sizes, live=True)
    # (the tables as applied first: `everything` reads the cache through what settles the pending effective objects)
    assert ordered(b) == ordered(a) and ordered(live) == ordered(a)
    assert infos(b) == infos(a)
    for s in (b, live):
        assert everything(s) == everything(a)
        assert counters(s) == counters(a)
    assert len(a.specs["task"]) > 20 and a.feed.rejected_at_catchup  # (refusals among them, plain ones most)


def _forged(ck: C.Checkpoint, **columns: Any) -> C.Checkpoint:
    return msgspec.structs.replace(ck, **columns)


def test_forged_columns_are_refused_one_by_one_as_their_messages_are(caplog):
    tasks = [o.TaskSpec(name=f"a-{i}", namespace="t", job="a", node="n0", phase="Running",
                        requests={"cpu": "1"}) for i in range(6)]
    items = [(S.state_subject("task", f"t/{t.name}"), _enc(m.upsert("task", t, 1)), i)
             for i, t in enumerate(tasks, start=1)]
    ck = C.build("s", "c", len(items), items)
    assert ck.shared == [1] * 6
    names, phases = list(ck.names), list(ck.phases)
    names[1] = "a-5"  # another task's name under a-1's subject: forged
    phases[2] = "Bogus"  # a phase the conversion refuses
    names[3] = "a-3" + "y" * 500  # a message over the limit of 400 bytes (and a subject it does not match)
    forged = _forged(ck, names=names, phases=phases)
    caplog.set_level("INFO", logger="busched.scheduler")
    got = restored(forged, [6])
    want = restored(forged, [6], live=True)
    assert ordered(got) == ordered(want) and counters(got) == counters(want)
    assert sorted(got.specs["task"]) == ["t/a-0", "t/a-4", "t/a-5"]
    assert "task t/a-2: phase: unknown phase 'Bogus'" in caplog.text

    # a template the conversion refuses: each of its tasks refused by the live path, naming the field
    bad = msgspec.json.decode(ck.templates[0])
    bad["task"]["requests"] = {"cpu": "lots"}
    caplog.clear()
    got = restored(_forged(ck, templates=[msgspec.json.encode(bad)]), [6])
    assert not got.specs["task"] and len(got.feed.rejected_at_catchup) == 6
    assert "task t/a-0: requests.cpu: invalid quantity 'lots'" in caplog.text


@pytest.mark.parametrize("columns, why", [
    ({"templates": [b'{"name": ""']}, "a template"),
    ({"templates": [b'{"type": "task.upsert", "task": {"name": "", "bogus": 1}}']}, "a template"),
    ({"templates": [b'{"type": "node.upsert", "node": {"name": ""}}']}, "not a task's or a job's"),
    ({"shared": [2] * 6}, "a template there is not"),
    ({"shared": [1] * 5}, "different lengths"),
    ({"names": ["a-0"]}, "do not match"),
    ({"shared": [-1] * 6}, "a template there is not"),
])
def test_a_shared_checkpoint_that_does_not_hold_together_is_not_used(columns, why):
    tasks = [o.TaskSpec(name=f"a-{i}", namespace="t", requests={"cpu": "1"}) for i in range(6)]
    items = [(S.state_subject("task", f"t/{t.name}"), _enc(m.upsert("task", t, 1)), i)
             for i, t in enumerate(tasks, start=1)]
    blob = C.encode(_forged(C.build("s", "c", 6, items), **columns))
    with pytest.raises(C.CheckpointError, match=why):
        C.Merged(C.decode(blob), [])


def test_columns_of_the_wrong_type_make_the_checkpoint_corrupt():
    ck = C.build("s", "c", 1, [(S.state_subject("task", "t/a"), _enc(m.upsert("task", o.TaskSpec(name="a"), 1)), 1)])
    raw = msgspec.msgpack.decode(msgspec.msgpack.encode(ck))
    raw.update(shared=[1, 1], templates=[b"{}"], names=[1, 2], jobs=["", ""], nodes=["", ""], phases=["", ""],
               versions=[-1, 0])
    blob = C.MAGIC + C.FORMAT.to_bytes(2, "big") + b"r" + msgspec.msgpack.encode(raw)
    with pytest.raises(C.CheckpointError, match="corrupt"):
        C.decode(blob)


def task_templates(rng: random.Random, n: int) -> Any:
    """Up to ``n`` random task templates (a spec without name, job, node or phase) with their conversions; those
    `build.task_info` refuses are left out."""
    for _ in range(n):
        kw: dict[str, Any] = {"requests": rng.choice([{"cpu": "1"}, {}, {"cpu": "2", "memory": "1Gi"}])}
        for field in ("labels", "annotations", "node_selector", "priority", "limits", "created", "status",
                      "deleting"):
            if rng.random() < 0.3:
                kw[field] = rng.choice(dict(_DIFFERENT)[field])
        template = o.TaskSpec(name="", namespace=rng.choice(["t", "u"]), **kw)
        try:
            yield template, build.task_info(template, {})
        except build.SpecError:
            continue


@pytest.mark.parametrize("seed", range(4))
def test_task_info_like_is_task_info(seed):
    """`build_like.task_info_like` of a template's conversion is `build.task_info` of the spec, every field."""
    rng = random.Random(seed)
    for template, info in task_templates(rng, 60):
        for _ in range(5):
            s = msgspec.structs.replace(template, name=f"x{rng.randint(0, 9)}", job=rng.choice(["", "j"]),
                                        node=rng.choice(["", "n1"]), phase=rng.choice(sorted(build.TASK_PHASES)))
            want, got = build.task_info(s, {}), build_like.task_info_like(info, s)
            assert [getattr(got, f) for f in TaskInfo.__slots__] == [getattr(want, f) for f in TaskInfo.__slots__]
            for f in ("labels", "annotations", "node_selector"):  # (each its own copy, as task_info's)
                assert getattr(got, f) is not getattr(info, f) or not getattr(got, f)


def job_templates(rng: random.Random, n: int) -> Any:
    """Up to ``n`` random job templates (a spec without name) with their conversions; those `build.job_info`
    refuses are left out."""
    for _ in range(n):
        kw: dict[str, Any] = {}
        for field, values in _JOB_DIFFERENT:
            if rng.random() < 0.2:
                kw[field] = rng.choice(values)
        template = o.JobSpec(name="", namespace="t", **kw)
        try:
            yield template, build.job_info(template, {})
        except build.SpecError:
            continue


@pytest.mark.parametrize("seed", range(4))
def test_job_info_like_is_job_info(seed):
    """`build_like.job_info_like` of a template's conversion is `build.job_info` of the spec, every field, its
    containers each its own."""
    rng = random.Random(seed)
    for template, info in job_templates(rng, 60):
        s = msgspec.structs.replace(template, name=f"x{rng.randint(0, 9)}")
        want, got = build.job_info(s, {}), build_like.job_info_like(info, s)
        assert [getattr(got, f) for f in JobInfo.__slots__] == [getattr(want, f) for f in JobInfo.__slots__]
        for f in ("tasks", "status_index", "allocated", "total_request", "nodes_fit_errors", "sub_jobs", "derived"):
            assert getattr(got, f) is not getattr(info, f)
        for f in ("annotations", "labels", "task_min_available"):  # (each its own copy, or the shared empty map)
            assert getattr(got, f) is not getattr(info, f) or not getattr(got, f)


@pytest.mark.parametrize("seed", range(3))
def test_a_checkpoint_built_on_the_last_one_stands_for_the_same_messages(seed):
    """The writer's next checkpoint carries the last one's entries over (their templates and fields, not encoded
    again) and adds the tail's messages: whole, it is the last message of every subject, byte for byte."""
    items = mix(seed)
    rng = random.Random(seed)
    last = C.decode(C.encode(C.build("s", "c", len(items), items)))
    tail = [(subject, len(items) + i, data) for i, (subject, data) in enumerate(
        [(s, d) for s, d, _ in rng.sample(items, 20)] + replicas(rng, 12), start=1)]
    merged = C.Merged(last, tail)
    carried = [it for batch in merged.batches(entries=True) for it in batch]
    assert any(type(data) is tuple for _, data, _ in carried)
    again = C.decode(C.encode(C.build("s", "c", len(items) + len(tail), carried)))
    want = C.merge(C.whole(C.decode(C.encode(C.build("s", "c", len(items), items)))), tail)
    got = C.whole(again)
    assert list(zip(got.subjects, got.data, got.seqs)) == want
    assert again.shared and len(set(again.templates)) == len(again.templates)  # (a template once)


def test_batches_let_the_entries_columns_go_as_they_are_handed_over():
    items = mix(1)
    ck = C.build("s", "c", len(items), items)
    def plain(batches: Any) -> list[Any]:  # (an entry's template by its message: each `Merged` decodes its own)
        return [(subject, (data[0].raw, *data[1:]) if type(data) is tuple else data, seq)
                for batch in batches for subject, data, seq in batch]
    want = plain(C.Merged(ck, []).batches(7, entries=True))
    got = plain(C.Merged(ck, []).batches(7, release=True, entries=True))
    assert got == want and any(type(data) is tuple for _, data, _ in got)
    assert not any(ck.data) and set(ck.names) == set(ck.jobs) == set(ck.versions) == {None}


def _big_template_checkpoint(size: int) -> C.Checkpoint:
    """Two entries of one task template of ``size`` bytes (an annotation that long): over the message limit."""
    tmpl = msgspec.json.encode({"type": "task.upsert", "task": {"name": "", "namespace": "t",
                                                                "annotations": {"a": "v" * size}}})
    return C.Checkpoint(stream=S.STATE_STREAM, created="c", seq=2, subjects=[S.state_subject("task", f"t/a-{i}")
                                                                            for i in range(2)],
                        seqs=[1, 2], data=[b"", b""], shared=[1, 1], templates=[tmpl], names=["a-0", "a-1"],
                        jobs=["", ""], nodes=["", ""], phases=["Pending", "Pending"], versions=[1, 1])


def test_a_template_over_the_message_limit_is_corrupt_and_never_decoded(monkeypatch):
    """Format 1 refuses a message over the limit by its length, undecoded; a template longer than the limit (each of
    its entries' messages longer still) makes the checkpoint corrupt, before anything decodes it."""
    decoded: list[int] = []
    real = m.decode
    monkeypatch.setattr(m, "decode", lambda data, *a, **kw: decoded.append(len(data)) or real(data, *a, **kw))
    ck = C.decode(C.encode(_big_template_checkpoint(1 << 20)))
    with pytest.raises(C.CheckpointError, match="corrupt: a template of .* over the limit"):
        C.Merged(ck, [], max_event_bytes=256 * 1024)
    assert not decoded
    # (a template within the limit is decoded, and used)
    assert C.Merged(C.decode(C.encode(_big_template_checkpoint(1000))), [], max_event_bytes=256 * 1024).templates


def test_the_writer_keeps_a_message_over_the_limit_whole():
    """A message over the limit is never made a template (the reader would not use the checkpoint): kept whole."""
    big = o.TaskSpec(name="", namespace="t", annotations={"a": "v" * 500})
    items = [(S.state_subject("task", f"t/a-{i}"), _enc(m.upsert("task", msgspec.structs.replace(big, name=f"a-{i}"),
                                                                 1)), i) for i in range(1, 4)]
    small = [(S.state_subject("task", f"t/b-{i}"), _enc(m.upsert("task", o.TaskSpec(name=f"b-{i}", namespace="t"), 1)),
              i) for i in range(4, 7)]
    ck = C.build("s", "c", 6, items + small, max_event_bytes=400)
    assert ck.shared == [0, 0, 0, 1, 1, 1] and all(len(t) <= 400 for t in ck.templates)
    assert ck.data[:3] == [data for _, data, _ in items]
    assert C.whole(ck).data == [data for _, data, _ in items + small]
    assert C.build("s", "c", 6, items + small, max_event_bytes=1 << 20).shared == [1, 1, 1, 2, 2, 2]


def test_entries_that_fail_their_own_checks_rebuild_no_more_than_the_checkpoint_holds(monkeypatch):
    """One template just under the limit and many entries whose names do not match their subjects: each would be
    rebuilt (`materialize`) and decoded again to be refused.  The bytes rebuilt for entries that fail their own
    checks are bounded by what the checkpoint holds (or a floor of 16 messages at the limit); past that, an entry is
    refused unbuilt (as corrupt), and every one is still refused, its history replayed after the catch-up."""
    from busched.scheduler import SchedulerSettings
    from busched.scheduler import checkpoint_shared as shared_form

    n, size = 40, 200_000
    tmpl = msgspec.json.encode({"type": "task.upsert", "task": {"name": "", "namespace": "t",
                                                                "annotations": {"a": "v" * size}}})
    subjects = [S.state_subject("task", f"t/a-{i}") for i in range(n)]
    ck = C.Checkpoint(stream=S.STATE_STREAM, created="c", seq=n, subjects=subjects, seqs=list(range(1, n + 1)),
                      data=[b""] * n, shared=[1] * n, templates=[tmpl], names=[f"b-{i}" for i in range(n)],
                      jobs=[""] * n, nodes=[""] * n, phases=["Pending"] * n, versions=[1] * n)
    built: list[int] = []
    real = shared_form.materialize
    monkeypatch.setattr(shared_form, "materialize", lambda e: built.append(len(b := real(e))) or b)
    s = Scheduler(None, None, SchedulerSettings(require_heartbeat=False))  # type: ignore[arg-type]
    for batch in C.Merged(C.decode(C.encode(ck)), []).batches(release=True, entries=True):
        apply_restored(s.feed, batch)
    assert sorted(s.feed.rejected_at_catchup) == sorted(subjects) and not s.specs["task"]
    assert built and sum(built) <= 16 * s.settings.max_event_bytes + size + 1000 < n * size


def _shared_containers(objs: dict[str, Any], slots: tuple[str, ...]) -> set[tuple[str, str, str]]:
    """``(field, key, other key)`` for every two objects whose field holds (or holds within it) one mutable container,
    but for what every object may share: the shared empty maps and lists and a `SharedResource`."""
    from busched.api.resource import Resource
    from busched.api.shared import NO_LIST, NO_MAP, SPEC_NO_LIST, SPEC_NO_MAP, SharedResource

    allowed = {id(NO_MAP), id(NO_LIST), id(SPEC_NO_MAP), id(SPEC_NO_LIST)}
    owners: dict[tuple[str, int], set[str]] = {}

    def walk(f: str, key: str, v: Any, depth: int) -> None:
        if isinstance(v, SharedResource) or id(v) in allowed or depth > 4:
            return
        if isinstance(v, (dict, list, set, bytearray, Resource)):
            owners.setdefault((f, id(v)), set()).add(key)
        if isinstance(v, dict):
            for x in v.values():
                walk(f, key, x, depth + 1)
        elif isinstance(v, (list, tuple, set)):
            for x in v:
                walk(f, key, x, depth + 1)
        elif hasattr(v, "__struct_fields__"):  # (a spec's struct within a conversion: its containers)
            for name in v.__struct_fields__:
                walk(f, key, getattr(v, name), depth + 1)

    for key, obj in objs.items():
        for f in slots:
            walk(f, key, getattr(obj, f, None), 0)
    return {(f, a, b) for (f, _), keys in owners.items() for a in keys for b in keys if a < b}


@pytest.mark.parametrize("seed", range(6))
def test_a_shared_checkpoint_shares_no_container_the_live_path_does_not(seed):
    """Entries are copies of their template's conversion: no two restored tasks or jobs may hold one mutable container
    (a toleration's list, a label map, ...) unless the live path's, each built from its own message, do too."""
    items = mix(seed)
    # (and groups of replicas with each field whose conversion holds containers of its own, and jobs with maps)
    for g, (field, value) in enumerate([("tolerations", [{"key": "k", "operator": "Exists"}]), ("images", ["img"]),
                                        ("host_ports", [8080]), ("labels", {"a": "b"}),
                                        ("annotations", {"x": "y"}), ("node_selector", {"zone": "a"})]):
        for i in range(3):
            spec = o.TaskSpec(name=f"g{g}-{i}", namespace="t", requests={"cpu": "1"}, **{field: value})
            items.append((S.state_subject("task", f"t/g{g}-{i}"), _enc(m.upsert("task", spec, 1)), len(items) + 1))
    for field, value in [("annotations", {"a": "b"}), ("labels", {"l": "v"}), ("min_task_member", {"w": 1})]:
        for i in range(3):
            job = o.JobSpec(name=f"{field}-{i}", namespace="t", min_member=1, **{field: value})
            items.append((S.state_subject("job", f"t/{job.name}"), _enc(m.upsert("job", job, 1)), len(items) + 1))
    one = C.Checkpoint(stream="s", created="c", seq=len(items), subjects=[it[0] for it in items],
                       seqs=[it[2] for it in items], data=[it[1] for it in items])
    two = C.decode(C.encode(C.build("s", "c", len(items), items)))
    got, want = restored(two, [len(items)]), restored(one, [len(items)], live=True)

    def tables(s: Scheduler) -> tuple[set[Any], set[Any]]:
        memo = s.cache._memo
        return (_shared_containers({k: t.task for k, t in memo._tasks.items()}, TaskInfo.__slots__),
                _shared_containers({k: j for k, (_, j) in memo._job_templates.items()}, JobInfo.__slots__))

    (got_tasks, got_jobs), (want_tasks, want_jobs) = tables(got), tables(want)
    assert got_tasks <= want_tasks and got_jobs <= want_jobs
    assert len(got.cache._memo._tasks) > 20


def test_a_task_its_spec_calls_pending_has_no_node_even_on_one():
    """``status: Pending`` wins over phase and node: no ``node_name`` from the conversion, nor its copy."""
    template = o.TaskSpec(name="", namespace="t", status="Pending", requests={"cpu": "1"})
    info = build.task_info(template, {})
    for node, phase in [("n1", "Running"), ("n1", "Pending"), ("", "Pending")]:
        s = msgspec.structs.replace(template, name="a", job="j", node=node, phase=phase)
        got = build_like.task_info_like(info, s)
        assert got.node_name == build.task_info(s, {}).node_name == ""


def test_the_fields_allowance_covers_the_worst_case():
    """``_FIELDS_BYTES``: what an entry's fields add to its template's message beyond their characters (the keys and
    quotes of the fields the template omits, the version's digits) at most, for a task and for a job."""
    from busched.scheduler import checkpoint_shared as shared_form

    top = 2**63 - 1
    task = o.TaskSpec(name="", namespace="t", requests={"cpu": "1"})
    base = len(m.encode(m.TaskUpsert(task=task)))
    full = msgspec.structs.replace(task, name="a", job="b", node="c", phase="R")
    task_extra = len(m.encode(m.TaskUpsert(task=full, version=top))) - base - 4
    job = o.JobSpec(name="", namespace="t")
    job_extra = len(m.encode(m.JobUpsert(job=msgspec.structs.replace(job, name="a"), version=top))) - \
        len(m.encode(m.JobUpsert(job=job))) - 1
    assert 0 < job_extra <= task_extra <= shared_form._FIELDS_BYTES


def test_the_scheduler_bounds_its_checkpoints_by_its_own_message_limit():
    from busched.scheduler import SchedulerSettings

    s = Scheduler(None, None, SchedulerSettings(require_heartbeat=False, max_event_bytes=400))  # type: ignore[arg-type]
    assert s.checkpoint_settings.max_event_bytes == s.checkpoints.settings.max_event_bytes == 400
