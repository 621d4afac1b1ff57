"""A restart's messages applied in bulk (busched.scheduler.restore_bulk) leave the scheduler exactly as the live
path (`StateFeed.handle_state_batch`) does, refusals included: an oracle over random mixes of plain objects
and every kind of message the fast path must hand over (forged, malformed, oversized, invalid, deletes,
statuses and records read before their object, suspended jobs, objects seen twice); and over a real
nats-server, a checkpoint with forged contents refuses those objects one by one, naming object and field,
while the rest of the restart goes on from the checkpoint."""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest

from busched.api import objects as o
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.scheduler import Scheduler, SchedulerSettings
from busched.scheduler import checkpoint as C
from busched.scheduler.records import SUSPENDED_GATE
from busched.scheduler.restore_bulk import apply_restored
from tests.scheduler.test_checkpoint import everything, quiet, settled_cluster
from tests.scheduler.test_trust import rejected


def _enc(msg: Any) -> bytes:
    return msgspec.json.encode(msg)


def _task(name: str, job: str, **kw: Any) -> o.TaskSpec:
    return o.TaskSpec(name=name, namespace="t", job=job, requests={"cpu": kw.pop("cpu", "1")}, **kw)


def messages(rng: random.Random, n: int = 60) -> list[tuple[str, bytes]]:
    """``(subject, data)``: nodes, jobs and tasks, most plain, the rest what the fast path must hand over."""
    out: list[tuple[str, bytes]] = [(S.state_subject("queue", "default"),
                                     _enc(m.upsert("queue", o.QueueSpec(name="default"), 1)))]
    for i in range(3):
        node = o.NodeSpec(name=f"n{i}", allocatable={"cpu": "8", "memory": "8Gi", "pods": "110"})
        out.append((S.state_subject("node", f"n{i}"), _enc(m.upsert("node", node, 1))))
    for j in range(n // 3):
        job = f"j{j}"
        spec = o.JobSpec(name=job, namespace="t", min_member=1, suspend=rng.random() < 0.1)
        if rng.random() < 0.1:  # its podgroup status first: the job's effective object is not its spec alone
            st = m.PodGroupStatus(version=1, namespace="t", name=job, phase="Running")
            out.append((S.podgroup_subject(f"t/{job}"), _enc(st)))
        out.append((S.state_subject("job", f"t/{job}"), _enc(m.upsert("job", spec, 1))))
        for i in range(rng.randint(1, 3)):
            name = f"{job}-{i}"
            subject = S.state_subject("task", f"t/{name}")
            what = rng.random()
            if what < 0.55:
                data = _enc(m.upsert("task", _task(name, job), 1))
            elif what < 0.6:  # placed and ended: the effective object drops its node
                data = _enc(m.upsert("task", _task(name, job, node="n0", phase="Succeeded"), 1))
            elif what < 0.65:
                data = _enc(m.upsert("task", _task(name, job, node=f"n{rng.randint(0, 2)}", phase="Running"), 1))
            elif what < 0.7:  # a payload for another task: forged
                data = _enc(m.upsert("task", _task(f"{name}x", job), 1))
            elif what < 0.75:  # passes the decoder, refused by the cache's validation
                data = _enc(m.upsert("task", _task(name, job, cpu="lots"), 1))
            elif what < 0.8:
                data = b'{"kind":"task.upsert","version":1,"task":{"name":'
            elif what < 0.83:
                data = _enc(m.upsert("task", _task(name, job, annotations={"pad": "x" * 300}), 1))  # oversized
            elif what < 0.87:
                data = _enc(m.delete("task", _task(name, job), 2))
            elif what < 0.9:  # a job's payload on a task subject
                data = _enc(m.upsert("job", o.JobSpec(name=name, namespace="t"), 1))
            elif what < 0.92:  # its binding record first, then the task
                rec = m.BindingRecord(version=1, namespace="t", name=name, node="n1", attempt=1, epoch=0)
                out.append((S.binding_subject(f"t/{name}"), _enc(rec)))
                data = _enc(m.upsert("task", _task(name, job), 1))
            elif what < 0.95:  # a name its subject escapes ("." -> %2E): the live path reads that subject
                name = f"{name}.x"
                subject = S.state_subject("task", f"t/{name}")
                data = _enc(m.upsert("task", _task(name, job), 1))
            elif what < 0.97:  # a subject of more tokens than a key has, its payload for a key it could be
                subject = f"{S.STATE_PREFIX}.task.t.{name}.x"
                data = _enc(m.upsert("task", _task(f"{name}/x", job), 1))
            else:  # the same subject twice (a tail's message over the checkpoint's)
                out.append((subject, _enc(m.upsert("task", _task(name, job, cpu="2"), 1))))
                data = _enc(m.upsert("task", _task(name, job), 2))
            out.append((subject, data))
    return out


def applied(items: list[tuple[str, bytes, int]], bulk: bool) -> Scheduler:
    s = Scheduler(None, None, SchedulerSettings(require_heartbeat=False, max_event_bytes=400))  # type: ignore[arg-type]
    for i in range(0, len(items), 16):
        if bulk:
            apply_restored(s.feed, items[i:i + 16])
        else:
            s.handle_state_batch(items[i:i + 16])
    return s


def cached(s: Scheduler) -> tuple[Any, ...]:
    """The cache whole: every object as held (a job with its podgroup status overlaid), its indexes and versions."""
    c = s.cache
    return ({kind: dict(objs) for kind, objs in c.objects.items()}, c.task_seq, c.job_tasks, c.node_tasks,
            c.job_version, c.node_version, c.capacity_epoch, s.effective.dirty_tasks, s.effective.dirty_jobs)


def counters(s: Scheduler) -> list[tuple[str, float]]:
    return sorted((f"{metric.name}{sorted(sample.labels.items())}", sample.value)
                  for metric in (s.metrics.events, s.metrics.events_rejected) for metric in metric.collect()
                  for sample in metric.samples if sample.name.endswith("_total"))


@pytest.mark.parametrize("seed", range(6))
def test_bulk_apply_leaves_the_scheduler_as_the_live_path_does(seed):
    rng = random.Random(seed)
    items = [(subject, data, seq) for seq, (subject, data) in enumerate(messages(rng), start=1)]
    plain, bulk = applied(items, False), applied(items, True)
    assert cached(bulk) == cached(plain)
    assert everything(bulk) == everything(plain)
    assert bulk.feed.rejected_at_catchup == plain.feed.rejected_at_catchup
    assert counters(bulk) == counters(plain)
    assert bulk.effective.suspended == plain.effective.suspended and bulk.cache.generation == plain.cache.generation
    assert len(bulk.specs["task"]) > 10  # (the mix is mostly plain objects)


def test_the_fast_path_takes_the_plain_objects_and_hands_over_the_rest():
    job = o.JobSpec(name="j", namespace="t", min_member=1)
    items = [(S.state_subject("job", "t/j"), _enc(m.upsert("job", job, 1)), 1),
             (S.state_subject("task", "t/a"), _enc(m.upsert("task", _task("a", "j"), 1)), 2),
             (S.state_subject("task", "t/b"), _enc(m.upsert("task", _task("c", "j"), 1)), 3),  # forged
             (S.state_subject("task", "t/d"), _enc(m.upsert("task", _task("d", "j", cpu="lots"), 1)), 4)]
    s = applied([], True)
    assert apply_restored(s.feed, items) == 2
    assert sorted(s.specs["task"]) == ["t/a"] and sorted(s.cache.objects["task"]) == ["t/a"]
    assert s.feed.seqs[("task", "t/a")] == 2 and s.feed.seqs[("job", "t/j")] == 1
    assert rejected(s, "mismatch", "task") == 1 and rejected(s, "invalid", "task") == 1
    assert s.feed.rejected_at_catchup == {S.state_subject("task", "t/b"): 3, S.state_subject("task", "t/d"): 4}


def test_an_unforeseen_error_in_one_message_falls_back_to_the_live_path_and_the_rest_applies(monkeypatch):
    """An error the fast path's checks did not foresee (here the task conversion raising KeyError on one task)
    is handled as the live feed handles it: that message logged and not applied, the batch going on."""
    from busched.api import build

    job = o.JobSpec(name="j", namespace="t", min_member=1)
    items = [(S.state_subject("job", "t/j"), _enc(m.upsert("job", job, 1)), 1)]
    items += [(S.state_subject("task", f"t/{n}"), _enc(m.upsert("task", _task(n, "j"), 1)), i)
              for i, n in enumerate(["a", "bad", "c", "d"], start=2)]
    convert = build.task_info

    def broken(spec: Any, *args: Any) -> Any:
        if spec.name == "bad":
            raise KeyError("a converter's bug")
        return convert(spec, *args)
    monkeypatch.setattr(build, "task_info", broken)

    def run(bulk: bool) -> Scheduler:
        s = applied([], True)
        if bulk:
            assert apply_restored(s.feed, items) == 4
        else:
            s.handle_state_batch(items)
        return s

    plain, bulk = run(False), run(True)
    assert sorted(plain.cache.objects["task"]) == ["t/a", "t/c", "t/d"]
    assert sorted(bulk.cache.objects["task"]) == ["t/a", "t/c", "t/d"]
    assert cached(bulk) == cached(plain)


# -- over the bus ------------------------------------------------------------------------------------------------
async def test_forged_checkpoint_contents_are_refused_one_by_one_and_the_restart_goes_on(harness, caplog):
    bus, sched, agent, _ = await settled_cluster(harness)
    assert await sched.checkpoints.write_once(force=True) > 0
    await quiet(agent, sched)
    ck = C.whole(C.decode(await bus.checkpoint_get(C.OBJECT)))  # (every message whole, as format 1 has them)
    at = {subject: i for i, subject in enumerate(ck.subjects)}
    data = list(ck.data)
    other = msgspec.json.decode(data[at[S.state_subject("task", "t/b-1")]])
    data[at[S.state_subject("task", "t/b-0")]] = msgspec.json.encode(other)  # another task's spec
    bad = msgspec.json.decode(data[at[S.state_subject("task", "t/a-0")]])
    bad["task"]["requests"] = {"cpu": "lots"}
    data[at[S.state_subject("task", "t/a-0")]] = msgspec.json.encode(bad)  # a field the cache refuses
    data[at[S.state_subject("task", "t/a-1")]] = b"\xff not json"
    assert await bus.checkpoint_put(C.OBJECT, C.encode(msgspec.structs.replace(ck, data=data)))
    caplog.set_level("INFO", logger="busched.scheduler")

    again = await harness.scheduler(run=False)
    full = await harness.scheduler(run=False, checkpoint=C.CheckpointSettings(read=False))
    assert again.restored is not None and again.restored.messages >= len(ck.subjects)  # not the full read
    assert rejected(again, "mismatch", "task") == 1 and rejected(again, "invalid", "task") == 1
    assert rejected(again, "malformed", "task") == 1
    assert "task t/a-0: requests.cpu: invalid quantity 'lots'" in caplog.text and "t/b-1" in caplog.text
    # each refused object is what its history before the refused message made it (here: not there yet);
    # every other object is the full read's
    forged = {"t/b-0", "t/a-0", "t/a-1"}
    assert not forged & set(again.specs["task"]) and forged <= set(full.specs["task"])
    assert {k: v for k, v in full.specs["task"].items() if k not in forged} == again.specs["task"]
    assert again.specs["job"] == full.specs["job"] and again.specs["node"] == full.specs["node"]


def _insert_new(c: Any, objs: list[tuple[str, Any, str]]) -> None:
    """``objs`` (new tasks and jobs) inserted as one run."""
    from busched.api import build
    from busched.cache.inserts import NewObjects

    run = NewObjects(c.generation)
    for kind, spec, key in objs:
        if kind == "task":
            run.add_task(key, spec, build.task_info(spec, {}))
        else:
            run.add_job(key, spec, build.job_info(spec, {}))
    c.insert_new(run)


@pytest.mark.parametrize("seed", range(4))
def test_cache_insert_new_is_upsert_of_each_new_object_in_turn(seed):
    """`Cache.insert_new` of runs of new tasks and jobs (and `insert_task` / `insert_job`, runs of one) leaves the
    cache as `upsert` of each in turn does: objects,
    indexes, versions, epochs, the change record, the lending's templates, every dict in the same order; objects
    it holds already go through `upsert` between the runs."""
    from busched.cache.cache import Cache

    rng = random.Random(7 + seed)
    objs: list[tuple[str, Any, str]] = []
    for j in range(30):
        objs.append(("job", o.JobSpec(name=f"j{j}", namespace="t", min_member=rng.randint(0, 2),
                                      priority_class_name=rng.choice(["", "", "high"])), f"t/j{j}"))
        for i in range(rng.randint(1, 3)):
            node, phase = rng.choice([("", "Pending"), ("n0", "Running"), ("n0", "Succeeded"), ("n0", "Failed"),
                                      ("n1", "Pending")])
            objs.append(("task", _task(f"j{j}-{i}", rng.choice([f"j{j}", f"j{j}", ""]), node=node, phase=phase,
                                       deleting=rng.random() < 0.2,
                                       priority_class_name=rng.choice(["", "", "high"])), f"t/j{j}-{i}"))
    rng.shuffle(objs)
    # runs of new objects, and now and then one held already, changed (the cache's own upsert, in both)
    steps: list[tuple[bool, list[tuple[str, Any, str]]]] = []
    i = 0
    while i < len(objs):
        size = rng.randint(1, 12)
        steps.append((True, objs[i:i + size]))
        i += size
        if rng.random() < 0.3:
            kind, spec, key = objs[rng.randrange(i)]
            steps.append((False, [(kind, msgspec.structs.replace(spec, labels={"again": str(i)}), key)]))
    a, b, one = Cache(), Cache(), Cache()
    for c in (a, b, one):
        c.upsert("node", o.NodeSpec(name="n0", allocatable={"cpu": "4"}), "n0")
    for new, part in steps:
        for kind, spec, key in part:
            a.upsert(kind, spec, key)
            (one.insert_task if kind == "task" else one.insert_job)(key, spec)  # (a run of one; held: upsert)
        if new:
            _insert_new(b, part)
        else:
            b.upsert(*part[0])
    state = [(list(c.objects["task"].items()), list(c.objects["job"].items()), list(c.task_seq.items()),
              [(k, sorted(v)) for k, v in c.job_tasks.items()], [(k, sorted(v)) for k, v in c.node_tasks.items()],
              list(c.job_version.items()), list(c.node_version.items()), c.generation, c.capacity_epoch,
              list(c.unfit.job_versions.items()), list(c.changes.jobs), list(c.changes.nodes), c.changes.jobs_removed,
              c.changes.nodes_moved, c._next_seq, [(k, t.spec, t.task.uid, t.task.job, t.task.status)
                                                  for k, t in c._memo._tasks.items()],
              [(k, spec, j.uid) for k, (spec, j) in c._memo._job_templates.items()]) for c in (a, b, one)]
    assert state[0] == state[1] == state[2]
    assert state[0][8] > 0 and state[0][4]  # (ended or deleting tasks on a node among them: the capacity epoch moved)


# -- runs: the plain messages applied together (Cache.insert_new) -------------------------------------------------
def _varied(rng: random.Random, n: int = 90) -> list[tuple[str, bytes]]:
    """`messages`, and more of what a run gathers: jobless tasks, priority classes, tasks being deleted on a node,
    released binding records with a backoff (a gated task's effective object), a job suspended before its tasks."""
    out = messages(rng, n)
    for j in range(n // 6):
        job = f"v{j}"
        spec = o.JobSpec(name=job, namespace="t", min_member=rng.randint(0, 2), suspend=rng.random() < 0.15,
                         priority_class_name=rng.choice(["", "", "high"]))
        if rng.random() < 0.7:
            out.append((S.state_subject("job", f"t/{job}"), _enc(m.upsert("job", spec, 1))))
        for i in range(rng.randint(1, 4)):
            name = f"{job}-{i}"
            if rng.random() < 0.1:  # released with a backoff before the task is read: gated from then on
                rec = m.BindingRecord(version=1, namespace="t", name=name, node="n1", attempt=1, epoch=0,
                                      state="released", backoff=30.0)
                out.append((S.binding_subject(f"t/{name}"), _enc(rec)))
            node, phase = rng.choice([("", "Pending"), ("n0", "Running"), ("n1", "Running"), ("n2", "Failed"),
                                      ("n9", "Running")])
            task = _task(name, rng.choice([job, job, ""]), node=node, phase=phase, deleting=rng.random() < 0.15,
                         priority_class_name=rng.choice(["", "", "", "high"]))
            out.append((S.state_subject("task", f"t/{name}"), _enc(m.upsert("task", task, 1))))
    # the kinds interleaved as a live stream's last messages are, the queue and nodes first
    head, rest = out[:4], out[4:]
    rng.shuffle(rest)
    return head + rest


def ordered(s: Scheduler) -> tuple[Any, ...]:
    """Every table the bulk apply writes, as ordered lists (dict order is the base scan order and the change
    record's), the lending's templates by what they hold."""
    c, memo = s.cache, s.cache._memo
    return ({kind: list(objs.items()) for kind, objs in c.objects.items()},
            {kind: list(objs.items()) for kind, objs in s.specs.items()},
            list(c.task_seq.items()), [(k, sorted(v)) for k, v in c.job_tasks.items()],
            [(k, sorted(v)) for k, v in c.node_tasks.items()], list(c.job_version.items()),
            list(c.node_version.items()), list(c.unfit.job_versions.items()), list(c.changes.jobs),
            list(c.changes.nodes), c.changes.jobs_removed, c.changes.nodes_moved, c._next_seq, c.generation,
            c.capacity_epoch, [(k, t.spec, t.task.uid, t.task.job, t.task.node_name, t.task.status, t.task.priority)
                               for k, t in memo._tasks.items()],
            [(k, spec, j.uid, j.min_available, j.priority) for k, (spec, j) in memo._job_templates.items()],
            list(s.feed.seqs.items()), list(s.feed.refused.items()), list(s.feed.rejected_at_catchup.items()),
            sorted(s.effective.dirty_tasks), sorted(s.effective.dirty_jobs), sorted(s.effective.suspended),
            sorted(s.table.deleting), list(s.feed.counts.items()))


def _applied_in(items: list[tuple[str, bytes, int]], sizes: list[int], bulk: bool) -> Scheduler:
    s = applied([], True)
    s.clock = lambda: 1000.0  # type: ignore[method-assign]  (a backoff's deadline: the same in both)
    s.table.clock = s.clock
    i = 0
    for size in sizes:
        part = items[i:i + size]
        i += size
        if bulk:
            apply_restored(s.feed, part)
        else:
            s.handle_state_batch(part)
    return s


@pytest.mark.parametrize("seed", range(8))
def test_runs_leave_every_table_as_the_live_path_does_in_the_same_order(seed):
    """Batches of random sizes (one whole, or many small: runs cut by the batch and by the live path's messages)
    over a random interleaved mix: every table the apply writes is the live path's, entry for entry, in order."""
    rng = random.Random(100 + seed)
    items = [(subject, data, seq) for seq, (subject, data) in enumerate(_varied(rng), start=1)]
    sizes = [len(items)] if seed % 2 else [rng.randint(1, 40) for _ in range(len(items))]
    plain, bulk = _applied_in(items, sizes, False), _applied_in(items, sizes, True)
    assert ordered(bulk) == ordered(plain)
    assert cached(bulk) == cached(plain) and everything(bulk) == everything(plain)
    assert counters(bulk) == counters(plain)
    gated = [k for k, t in bulk.cache.objects["task"].items() if t is not bulk.specs["task"][k]]
    assert len(bulk.specs["task"]) > 40 and len(bulk.specs["job"]) > 20
    assert gated or seed % 4  # (most mixes hold a task whose effective object is not its spec)


def test_a_run_is_applied_before_a_message_the_live_path_takes():
    """A suspended job (live path) between two runs of its tasks: the first run's tasks are in the cache as plain
    objects before the job is, the second run's are gated by the suspension, as one by one."""
    job = o.JobSpec(name="j", namespace="t", min_member=1, suspend=True)
    items = [(S.state_subject("task", "t/a"), _enc(m.upsert("task", _task("a", "j"), 1)), 1),
             (S.state_subject("job", "t/j"), _enc(m.upsert("job", job, 1)), 2),
             (S.state_subject("task", "t/b"), _enc(m.upsert("task", _task("b", "j"), 1)), 3)]
    plain, bulk = _applied_in(items, [3], False), _applied_in(items, [3], True)
    assert ordered(bulk) == ordered(plain)
    assert bulk.cache.objects["task"]["t/b"] is not bulk.specs["task"]["t/b"]  # gated: its effective object
    assert bulk.cache.task_seq == {"t/a": 0, "t/b": 1} and bulk.cache.job_version["t/j"] > 0


@pytest.mark.parametrize("bulk", [False, True], ids=["live", "restore"])
def test_a_refused_job_neither_suspends_nor_resumes_its_tasks(bulk):
    """A job upsert that is refused (here an unknown phase) is not admitted in any part: its suspend flag is not
    taken either (before, the flip ran before the validation: the tasks were gated and their attempts due to
    stop by a job that was refused)."""
    ok = o.JobSpec(name="j", namespace="t")
    bad = o.JobSpec(name="j", namespace="t", suspend=True, phase="Nope")
    items = [(S.state_subject("job", "t/j"), _enc(m.upsert("job", ok, 1)), 1),
             (S.state_subject("task", "t/a"), _enc(m.upsert("task", _task("a", "j"), 1)), 2),
             (S.state_subject("job", "t/j"), _enc(m.upsert("job", bad, 2)), 3)]
    s = applied(items, bulk)
    assert s.specs["job"]["t/j"] == ok  # the refused spec is not taken
    assert not s.effective.suspended and not s.effective.suspend_changed
    s.effective.sync_cache()
    assert SUSPENDED_GATE not in s.cache.objects["task"]["t/a"].scheduling_gates
    # and one refused while suspended does not resume it
    items2 = [(S.state_subject("job", "t/j"), _enc(m.upsert("job", o.JobSpec(name="j", namespace="t", suspend=True),
                                                             3)), 4),
              (S.state_subject("job", "t/j"), _enc(m.upsert("job", o.JobSpec(name="j", namespace="t", phase="Nope"),
                                                             4)), 5)]
    s.handle_state_batch(items2)
    assert s.effective.suspended == {"t/j"}
