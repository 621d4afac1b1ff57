"""A block of one template's entries applied at once (busched.scheduler.restore_blocks) restores exactly what the
entries one by one and the live path restore: oracles over long runs of replicas with every check's failure planted
among them (forged, duplicated, known, oversized, bad and ended phases, suspended and podgroup-status jobs, gated
tasks, keys deleted at a later sequence, entries over the restart's size limit), the batch conversions against the
one-object ones, and the cutting of a batch into blocks."""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest

from busched.api import build, build_like
from busched.api import objects as o
from busched.api.job import JobInfo
from busched.api.shared import one_name
from busched.api.task import TaskInfo
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.scheduler import checkpoint as C
from busched.scheduler import restore_blocks as RB
from busched.scheduler import restore_bulk
from tests.scheduler.test_checkpoint import everything
from tests.scheduler.test_checkpoint_shared import (
    _DIFFERENT,
    _JOB_DIFFERENT,
    infos,
    job_templates,
    mix,
    restored,
    task_templates,
)
from tests.scheduler.test_restore_bulk import _enc, counters, ordered

# a template's variations whose valid values keep its tasks on the block path (labels copied per task, a status or
# deletion for all; the invalid ones, a bad quantity, time, status or priority, are refused by every path); not
# tolerations: they make a template not fast (`Template.fast`), so a run of it never takes a block (_FALLS_BACK)
_FAST = ("labels", "annotations", "node_selector", "priority", "limits", "created", "status", "deleting",
         "requests", "priority_class_name")
_FALLS_BACK = ("tolerations",)


def long_runs(rng: random.Random, gated: bool) -> list[tuple[str, bytes, int]]:
    """Runs of 10-70 replicas of a few task templates, then runs of jobs of a few shapes, each with a few entries
    that fail one check of the block path (and of the one-by-one path, most); ``gated``: a binding record with a
    backoff in the middle, so that the tasks after it take the one-by-one path's effective objects."""
    out: list[tuple[str, bytes]] = [(S.state_subject("queue", "default"),
                                     _enc(m.upsert("queue", o.QueueSpec(name="default"), 1)))]
    for i in range(3):
        host = o.NodeSpec(name=f"n{i}", allocatable={"cpu": "64", "memory": "64Gi", "pods": "110"})
        out.append((S.state_subject("node", f"n{i}"), _enc(m.upsert("node", host, 1))))
    runs = rng.randint(2, 4)
    for t in range(runs):
        base: dict[str, Any] = {"requests": {"cpu": "1", "memory": "1Gi"}, "deleting": t == 0 and rng.random() < 0.6}
        roll = rng.random()
        if roll < 0.6:  # (one run in ten of a template that is not fast: all of it one by one)
            field = rng.choice(_FAST) if roll < 0.5 else rng.choice(_FALLS_BACK)
            base[field] = rng.choice(dict(_DIFFERENT)[field])
        size = rng.randint(10, 70)
        planted = set(rng.sample(range(1, size), rng.randint(1, 3)))  # (the entries failing a check: most blocks pass)
        for i in range(size):
            if gated and t == runs // 2 and i == size // 2:
                rec = m.BindingRecord(version=1, namespace="t", name=f"b{t}-0", node="n1", attempt=1, epoch=0,
                                      state="released", backoff=30.0)
                out.append((S.binding_subject(f"t/b{t}-0"), _enc(rec)))
            name, job = f"b{t}-{i}", rng.choice([f"j{t}", f"j{t}", f"j{t}", ""])
            node, phase = rng.choice([("", "Pending"), ("n0", "Running"), ("n1", "Running"), ("n2", "Running")])
            subject = S.state_subject("task", f"t/{name}")
            what = rng.random() * 0.11 if i in planted else 1.0
            if what < 0.02:
                subject = S.state_subject("task", f"t/{name}z")  # forged: another task's subject
            elif what < 0.04:
                phase = "Bogus"
            elif what < 0.06:
                phase = "Succeeded"  # ended on its node: its effective object drops the node
            elif what < 0.08:
                name = f"{name}-{'x' * 70}"  # its message could be over the limit of 400 bytes
                subject = S.state_subject("task", f"t/{name}")
            elif what < 0.1:
                subject, name = S.state_subject("task", f"t/b{t}-0"), f"b{t}-0"  # the same task again
            elif what < 0.11 and t:
                subject, name = S.state_subject("task", "t/b0-1"), "b0-1"  # a task an earlier block holds
            spec = o.TaskSpec(name=name, namespace="t", job=job, node=node, phase=phase, **base)
            out.append((subject, _enc(m.upsert("task", spec, 1))))
    for t in range(rng.randint(1, 3)):
        kw: dict[str, Any] = {"min_member": 1, "phase": "Running"}
        if rng.random() < 0.4:
            field, values = rng.choice(_JOB_DIFFERENT)
            kw[field] = rng.choice(values)
        size = rng.randint(10, 50)
        planted = set(rng.sample(range(2, size), rng.randint(1, 3)))
        for i in range(size):
            name = f"j{t}" if i == 0 else f"k{t}-{i}"
            subject = S.state_subject("job", f"t/{name}")
            what = rng.random() * 0.09 if i in planted else 1.0
            if what < 0.03:
                subject = S.state_subject("job", f"t/{name}z")
            elif what < 0.05:
                st = m.PodGroupStatus(version=1, namespace="t", name=name, phase="Running")
                out.append((S.podgroup_subject(f"t/{name}"), _enc(st)))
            elif what < 0.07:
                name = f"{name}-{'x' * 70}"
                subject = S.state_subject("job", f"t/{name}")
            elif what < 0.09:
                subject, name = S.state_subject("job", f"t/k{t}-1"), f"k{t}-1"
            out.append((subject, _enc(m.upsert("job", o.JobSpec(name=name, namespace="t", **kw), 1))))
    return [(subject, data, seq) for seq, (subject, data) in enumerate(out, start=1)]


class _Spy:
    """Counts the entries the blocks took and the blocks left to the one-by-one path."""

    def __init__(self, monkeypatch: Any) -> None:
        self.taken = self.left = 0
        task_block, job_block = restore_bulk.task_block, restore_bulk.job_block

        def task(*a: Any) -> tuple[int, int]:
            got = task_block(*a)
            self.taken, self.left = self.taken + got[0], self.left + (not got[0])
            return got

        def job(*a: Any) -> int:
            got = job_block(*a)
            self.taken, self.left = self.taken + got, self.left + (not got)
            return got

        monkeypatch.setattr(restore_bulk, "task_block", task)
        monkeypatch.setattr(restore_bulk, "job_block", job)


def _three(items: list[tuple[str, bytes, int]], sizes: list[int], monkeypatch: Any, smallest: int, largest: int,
           built_under: int = 400) -> tuple[Any, Any, Any, _Spy]:
    """The same format-2 checkpoint restored with blocks (of ``smallest`` to ``largest`` entries), without (every
    entry one by one) and through the live path; ``built_under``: the writer's limit on a message's size (the
    restart's is 400 bytes: a larger one forges entries the writer would never make)."""
    ck = C.decode(C.encode(C.build("s", "c", max(q for *_, q in items), items, max_event_bytes=built_under)))
    assert ck.shared
    with monkeypatch.context() as mp:
        mp.setattr(RB, "SMALLEST", 10**9)
        one = restored(ck, sizes)
        live = restored(ck, sizes, live=True)
    spy = _Spy(monkeypatch)
    monkeypatch.setattr(RB, "SMALLEST", smallest)
    monkeypatch.setattr(RB, "LARGEST", largest)
    blocks = restored(ck, sizes)
    return blocks, one, live, spy


def _same(blocks: Any, one: Any, live: Any) -> None:
    assert ordered(blocks) == ordered(one) and ordered(live) == ordered(one)
    assert infos(blocks) == infos(one)
    for s in (blocks, live):
        assert everything(s) == everything(one)
        assert counters(s) == counters(one)


@pytest.mark.parametrize("seed", range(8))
def test_blocks_restore_what_the_entries_one_by_one_and_the_live_path_restore(seed, monkeypatch):
    rng = random.Random(seed)
    items = long_runs(rng, gated=seed % 3 == 2)
    sizes = [len(items)] if seed % 2 else [rng.randint(5, 80) for _ in range(len(items))]
    blocks, one, live, spy = _three(items, sizes, monkeypatch, rng.choice([2, 8, 16]), rng.choice([7, 32, 512]))
    _same(blocks, one, live)
    assert spy.taken > 10 and spy.left  # (blocks taken, and blocks a planted entry sent one by one)
    assert len(one.specs["task"]) > 30 and any("rejected" in name and n for name, n in counters(one))


@pytest.mark.parametrize("seed", range(4))
def test_blocks_of_a_few_entries_over_every_kind_of_message(seed, monkeypatch):
    """The earlier format-2 mix (forged, malformed, oversized, invalid, deleted, bound, ended, suspended, deleting,
    gated, not canonical), cut into blocks of two to five entries."""
    items = mix(seed)
    rng = random.Random(seed)
    sizes = [len(items)] if seed % 2 else [rng.randint(1, 25) for _ in range(len(items))]
    blocks, one, live, spy = _three(items, sizes, monkeypatch, 2, 5)
    _same(blocks, one, live)
    assert spy.taken


def test_blocks_cut_a_batch_into_runs_of_one_template():
    rng = random.Random(7)
    tmpls = [object() for _ in range(3)]
    for _ in range(200):
        items = []
        while len(items) < rng.randint(0, 120):
            t = rng.choice([None, *tmpls])
            items += [("s", (t,) if t is not None else b"x", 0)] * rng.randint(1, 30)
        cut = RB.blocks(items)
        assert [i for a, b, _ in cut for i in range(a, b)] == list(range(len(items)))  # (in order, each once)
        for k, (a, b, t) in enumerate(cut):
            if t is None:
                assert k == 0 or cut[k - 1][2] is not None  # (the one-by-one items between blocks: one piece)
                continue
            assert RB.SMALLEST <= b - a <= RB.LARGEST or cut[k - 1][2] is t  # (a long run: blocks of LARGEST)
            assert all(d[0] is t for _, d, _ in items[a:b])
        # (a run of one template at least SMALLEST long is never left to the one-by-one path)
        for a, b, t in cut:
            if t is None:
                run = longest = 0
                for i in range(a, b):
                    u = items[i][1][0] if type(items[i][1]) is tuple else None
                    run = 0 if u is None else run + 1 if i > a and items[i - 1][1][0:1] == (u,) else 1
                    longest = max(longest, run)
                assert longest < RB.SMALLEST


@pytest.mark.parametrize("seed", range(3))
def test_task_infos_like_is_task_info_like_of_each(seed):
    """`build_like.task_infos_like` over a template's replicas gives `task_info_like` of each (and so `task_info`),
    every field, the label maps each its own."""
    rng = random.Random(seed)
    for template, info in task_templates(rng, 40):
        specs = [msgspec.structs.replace(template, name=f"x{i}", job=rng.choice(["", "j", "k"]),
                                         node=rng.choice(["", "n1", "n2"]), phase=rng.choice(sorted(build.TASK_PHASES)))
                 for i in range(rng.randint(1, 12))]
        got = build_like.task_infos_like(info, specs)
        assert len(got) == len(specs)
        for t, s in zip(got, specs):
            want = build.task_info(s, {})
            assert [getattr(t, f) for f in TaskInfo.__slots__] == [getattr(want, f) for f in TaskInfo.__slots__]
            for f in ("labels", "annotations", "node_selector"):
                assert getattr(t, f) is not getattr(info, f) or not getattr(t, f)
        assert len({id(t) for t in got}) == len(got)
    assert build_like.task_infos_like(info, []) == []


@pytest.mark.parametrize("seed", range(3))
def test_job_infos_like_is_job_info_of_each(seed):
    rng = random.Random(seed)
    for template, info in job_templates(rng, 40):
        specs = [msgspec.structs.replace(template, name=f"x{i}") for i in range(rng.randint(1, 6))]
        got = build_like.job_infos_like(info, specs)
        for j, s in zip(got, specs, strict=True):
            want = build.job_info(s, {})
            assert [getattr(j, f) for f in JobInfo.__slots__] == [getattr(want, f) for f in JobInfo.__slots__]
            for f in ("tasks", "status_index", "allocated", "total_request", "nodes_fit_errors", "sub_jobs",
                      "derived"):
                assert getattr(j, f) is not getattr(info, f)
                assert all(getattr(j, f) is not getattr(other, f) for other in got if other is not j)
            for f in ("annotations", "labels", "task_min_available"):
                assert getattr(j, f) is not getattr(info, f) or not getattr(j, f)


def _planted(case: str) -> list[tuple[str, bytes, int]]:
    """40 replicas and 40 jobs of one shape each, with what ``case`` plants among them (a block must refuse it)."""
    first: list[tuple[str, bytes, int]] = []
    if case == "deleted-task":  # (forged: a delete at a later sequence read first; the replica after it is stale)
        first.append((S.state_subject("task", "t/w19"), _enc(m.TaskDelete(version=1, namespace="t", name="w19")), 1000))
    elif case == "deleted-job":
        first.append((S.state_subject("job", "t/k19"), _enc(m.JobDelete(version=1, namespace="t", name="k19")), 1000))
    out: list[tuple[str, bytes]] = [(S.state_subject("node", "n0"), _enc(m.upsert("node", o.NodeSpec(
        name="n0", allocatable={"cpu": "64", "memory": "64Gi", "pods": "110"}), 1)))]
    if case == "podgroup":  # (statuses read before their jobs: a job's effective object is not its spec alone)
        for name in ("k7", "k30"):
            st = m.PodGroupStatus(version=1, namespace="t", name=name, phase="Running")
            out.append((S.podgroup_subject(f"t/{name}"), _enc(st)))
    for i in range(40):
        name = f"w{i}"
        subject = S.state_subject("task", f"t/{name}")
        if case == "escaped" and i == 9:  # a subject's escape taken for the name itself: forged
            name = "w9%2Ex"
            subject = f"{S.STATE_PREFIX}.task.t.{name}"
        elif case == "oversized-task" and i == 39:  # (forged: a message over the restart's limit, last of its block)
            name = f"w39{'x' * 500}"
            subject = S.state_subject("task", f"t/{name}")
        spec = o.TaskSpec(name=name, namespace="t", job=f"k{i // 2}", node="n0", phase="Running",
                          requests={"cpu": "1"})
        out.append((subject, _enc(m.upsert("task", spec, 1))))
    for i in range(40):
        name = f"k39{'x' * 500}" if case == "oversized-job" and i == 39 else f"k{i}"
        job = o.JobSpec(name=name, namespace="t", min_member=1, suspend=case == "suspend")
        out.append((S.state_subject("job", f"t/{name}"), _enc(m.upsert("job", job, 1))))
    return first + [(subject, data, seq) for seq, (subject, data) in enumerate(out, start=1)]


@pytest.mark.parametrize("case", ["podgroup", "escaped", "suspend", "deleted-task", "deleted-job", "oversized-task",
                                  "oversized-job", "none"])
def test_a_block_leaves_to_the_one_by_one_path_what_it_must(case, monkeypatch):
    items = _planted(case)
    # (an oversized entry the writer would never make: the checkpoint written under a larger limit than the restart's)
    built_under = 10**6 if case.startswith("oversized") else 400
    blocks, one, live, spy = _three(items, [len(items)], monkeypatch, 16, 256, built_under)
    _same(blocks, one, live)
    assert spy.taken >= 32 and bool(spy.left) == (case != "none")
    for key, spec in blocks.specs["task"].items():  # (the names interned as the decoder interns them)
        assert spec.job is one_name(spec.job) and spec.node is one_name(spec.node), key
    if case.startswith("deleted"):  # (the replica older than the delete is stale: not restored)
        assert "t/w19" not in blocks.specs["task"] if case == "deleted-task" else "t/k19" not in blocks.specs["job"]
    if case.startswith("oversized"):  # (refused as oversized, as the live path refuses it)
        kind = case.removeprefix("oversized-")
        assert len(blocks.specs[kind]) == 39 and any("oversized" in name and n for name, n in counters(blocks))


def test_a_block_its_template_alone_refuses_is_not_cut_in_halves(monkeypatch):
    """A run of a task template that is not fast (tolerations) and one of a suspended job's: each block of them is
    refused for its template alone, so it goes one by one at once (its halves would be refused the same), and
    restores what the one-by-one and live paths restore."""
    out: list[tuple[str, bytes]] = [(S.state_subject("node", "n0"), _enc(m.upsert("node", o.NodeSpec(
        name="n0", allocatable={"cpu": "64", "memory": "64Gi", "pods": "110"}), 1)))]
    for i in range(64):
        spec = o.TaskSpec(name=f"w{i}", namespace="t", job=f"k{i}", node="n0", phase="Running", requests={"cpu": "1"},
                          tolerations=[{"key": "k", "operator": "Exists"}])
        out.append((S.state_subject("task", f"t/w{i}"), _enc(m.upsert("task", spec, 1))))
    for i in range(64):
        job = o.JobSpec(name=f"k{i}", namespace="t", min_member=1, suspend=True)
        out.append((S.state_subject("job", f"t/k{i}"), _enc(m.upsert("job", job, 1))))
    items = [(subject, data, seq) for seq, (subject, data) in enumerate(out, start=1)]
    blocks, one, live, spy = _three(items, [len(items)], monkeypatch, 16, 256)
    _same(blocks, one, live)
    assert len(one.specs["task"]) == len(one.specs["job"]) == 64
    assert spy.taken == 0 and spy.left == 2  # (one try a run: not 1 + 2 + 4 of 64, 32 and 16 entries)
