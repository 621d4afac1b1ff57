"""The gang actions' victim bundles (busched.actions.gang_bundle), after Volcano's
pkg/scheduler/actions/utils/bundle_test.go; the candidate domains and the podgroup's preemptable
rule (busched.actions.gang_plan), after gangpreempt_test.go / util.go."""

from __future__ import annotations

from busched.actions import gang_bundle as gb
from busched.actions.gang_plan import job_preemptable_for_gang
from busched.api.job import JobInfo
from busched.api.queue import QueueInfo
from busched.api.resource import Resource
from busched.api.task import TaskInfo, TaskStatus


def _task(uid: str, cpu: float = 1.0, priority: int = 0, role: str = "worker",
          status: TaskStatus = TaskStatus.Running, job: str = "ns/j") -> TaskInfo:
    return TaskInfo(uid=uid, name=uid, namespace="ns", job=job, resreq=Resource(cpu=cpu),
                    init_resreq=Resource(cpu=cpu), status=status, priority=priority, role=role, preemptable=True)


def _job(uid: str = "ns/j", min_available: int = 0, roles: dict[str, int] | None = None,
         tasks: list[TaskInfo] = (), queue: str = "q") -> JobInfo:  # type: ignore[assignment]
    j = JobInfo(uid=uid, name=uid.split("/")[1], namespace="ns", queue=queue, min_available=min_available,
                task_min_available=dict(roles or {}))
    for t in tasks:
        j.add_task(t)
    return j


def _bundle(kind: int, job: JobInfo, uid: str, local: float, whole: float) -> gb.Bundle:
    return gb.Bundle(kind, job, [_task(uid, job=job.uid)], Resource(cpu=local), Resource(cpu=whole))


def test_safe_and_whole_split_by_ready_surplus():
    # ready 5, minAvailable 3 (worker: 3): the two lowest-priority tasks are safe, three are whole
    tasks = [_task(chr(ord("a") + i), priority=i) for i in range(5)]
    job = _job(min_available=3, roles={"worker": 3}, tasks=tasks)
    bundles = gb.job_bundles(job, list(reversed(tasks)))
    assert [b.kind for b in bundles] == [gb.SAFE, gb.WHOLE]
    assert [t.uid for t in bundles[0].tasks] == ["a", "b"]
    assert [t.uid for t in bundles[1].tasks] == ["c", "d", "e"]
    assert bundles[0].whole.is_empty()
    assert bundles[1].whole.cpu == 5.0 and bundles[1].local.cpu == 3.0


def test_role_minimum_caps_the_safe_bundle():
    # job surplus 2 but the ps role has no spare task: only a worker is safe
    tasks = [_task("ps0", role="ps"), _task("w0", role="worker"), _task("w1", role="worker")]
    job = _job(min_available=1, roles={"ps": 1}, tasks=tasks)
    bundles = gb.job_bundles(job, tasks)
    assert [t.uid for t in bundles[0].tasks] == ["w0", "w1"]
    assert [t.uid for t in bundles[1].tasks] == ["ps0"]


def test_job_not_ready_puts_everything_in_one_safe_bundle():
    tasks = [_task("a"), _task("b")]
    job = _job(min_available=3, tasks=tasks)
    bundles = gb.job_bundles(job, tasks)
    assert len(bundles) == 1 and bundles[0].kind == gb.SAFE and len(bundles[0].tasks) == 2


def test_keep_allowed_whole_is_atomic_and_safe_shrinks():
    job = _job()
    safe = gb.Bundle(gb.SAFE, job, [_task("s1"), _task("s2")], Resource(cpu=2), Resource())
    whole = gb.Bundle(gb.WHOLE, job, [_task("w1"), _task("w2")], Resource(cpu=2), Resource(cpu=4))
    kept = gb.keep_allowed([safe, whole], {"s1", "w1"})
    assert len(kept) == 1 and [t.uid for t in kept[0].tasks] == ["s1"] and kept[0].local.cpu == 1.0
    kept = gb.keep_allowed([safe, whole], {"w1", "w2"})
    assert [b.kind for b in kept] == [gb.WHOLE]


def test_sort_for_preempt_safe_first_then_roi():
    low, high = _job("ns/low"), _job("ns/high")
    low.priority, high.priority = 1, 10
    safe = _bundle(gb.SAFE, high, "s1", 1, 0)
    whole_low_roi = _bundle(gb.WHOLE, low, "w1", 1, 4)
    whole_high_roi = _bundle(gb.WHOLE, low, "w2", 1, 2)
    bundles = [whole_low_roi, safe, whole_high_roi]
    gb.sort_for_preempt(bundles, Resource(cpu=1), lambda l, r: l.priority < r.priority)
    assert [b.tasks[0].uid for b in bundles] == ["s1", "w2", "w1"]


def test_sort_for_preempt_uses_victim_job_order_reversed():
    a, b = _job("ns/ja"), _job("ns/jb")
    bundles = [_bundle(gb.WHOLE, a, "a", 1, 2), _bundle(gb.WHOLE, b, "b", 1, 2)]
    # the job order puts ja first, so as victims jb goes first (Go passes the reversed order itself)
    gb.sort_for_preempt(bundles, Resource(cpu=1), lambda l, r: l.uid < r.uid)
    assert bundles[0].tasks[0].uid == "b"


def test_sort_for_reclaim_queue_order_then_roi_then_uid():
    qa, qb = QueueInfo(uid="qa", name="qa"), QueueInfo(uid="qb", name="qb")
    ja, jb, jb2 = _job("ns/a", queue="qa"), _job("ns/b", queue="qb"), _job("ns/b2", queue="qb")
    bundles = [_bundle(gb.WHOLE, jb2, "b2", 1, 2), _bundle(gb.WHOLE, ja, "a", 1, 4),
               _bundle(gb.WHOLE, jb, "b", 1, 2)]
    queues = {"qa": qa, "qb": qb}
    gb.sort_for_reclaim(bundles, Resource(cpu=1), queues, lambda l, r: l.uid < r.uid)
    assert [x.tasks[0].uid for x in bundles] == ["a", "b", "b2"]  # queue qa first; then job uid ties


def test_podgroup_preemptable_unset_allows_set_follows():
    job = _job()
    job.preemptable = False
    assert job_preemptable_for_gang(job)  # unset: allowed
    job.annotations = {"volcano.sh/preemptable": "false"}
    assert not job_preemptable_for_gang(job)
    job.preemptable = True
    assert job_preemptable_for_gang(job)


def _sub_job_job(min_available: int, min_sub_jobs: dict[str, int],
                 layout: dict[str, list[tuple[str, int]]]) -> JobInfo:
    """A job whose running tasks sit in the given sub-jobs (each sub-job's minAvailable 2, as the
    Go tests' newSubJob), with the policy group minimums given."""
    from busched.api.subjob import SubJobInfo

    job = JobInfo(uid="ns/j", name="j", namespace="ns", min_available=min_available)
    job.sub_jobs = {}
    job.task_to_sub_job = {}
    job.min_sub_jobs = dict(min_sub_jobs)
    for sj_uid, tasks in layout.items():
        sj = SubJobInfo(gid="g", uid=sj_uid, job=job.uid, min_available=2)
        job.sub_jobs[sj_uid] = sj
        for uid, prio in tasks:
            t = _task(uid, priority=prio)
            job.tasks[uid] = t
            job.status_index.setdefault(TaskStatus.Running, {})[uid] = t
            job.task_to_sub_job[uid] = sj_uid
            sj.add_task(t)
    return job


def test_sub_group_slack_caps_the_safe_bundle():
    # job surplus 2 (6 ready, minAvailable 4) but the group may lose only one of its 3 ready sub-jobs
    job = _sub_job_job(4, {"g": 2}, {"sj1": [("t1a", 100), ("t1b", 101)], "sj2": [("t2a", 102), ("t2b", 103)],
                                     "sj3": [("t3a", 104), ("t3b", 105)]})
    bundles = gb.job_bundles(job, [job.tasks["t1a"], job.tasks["t2a"], job.tasks["t3a"]])
    assert [b.kind for b in bundles] == [gb.SAFE, gb.WHOLE]
    assert [t.uid for t in bundles[0].tasks] == ["t1a"]
    assert len(bundles[1].tasks) == 2


def test_an_already_broken_sub_job_stays_evictable():
    # sj1 has one pod of two (broken): evicting it costs the group nothing; the ready ones may not go
    job = _sub_job_job(3, {"g": 2}, {"sj1": [("sj1a", 1)], "sj2": [("sj2a", 2), ("sj2b", 3)],
                                     "sj3": [("sj3a", 4), ("sj3b", 5)]})
    bundles = gb.job_bundles(job, [job.tasks["sj1a"], job.tasks["sj2a"], job.tasks["sj3a"]])
    assert [t.uid for t in bundles[0].tasks] == ["sj1a"] and bundles[0].kind == gb.SAFE
    assert sorted(t.uid for t in bundles[1].tasks) == ["sj2a", "sj3a"] and bundles[1].kind == gb.WHOLE
