"""`GangCounts.ready_task_num` (the index's entries walked) against `ready_task_num_plain` (each ready
status asked, as Volcano's ReadyTaskNum), and `valid_task_num` (a loop with one set) against
`valid_task_num_plain`: random task indexes, empty status maps included, and counts from the tasks."""

from __future__ import annotations

import random

import pytest

from busched.api.job import JobInfo
from busched.api.resource import Resource
from busched.api.task import TaskInfo, TaskStatus


@pytest.mark.parametrize("seed", range(20))
def test_ready_task_num_is_the_plain_count(seed):
    rng = random.Random(seed)
    job = JobInfo(uid="ns/j", name="j", namespace="ns", queue="q", min_available=1)
    for i in range(rng.randint(0, 12)):
        job.add_task(TaskInfo(uid=f"t{i}", name=f"t{i}", namespace="ns", job="ns/j",
                              resreq=Resource(), init_resreq=Resource(), status=rng.choice(list(TaskStatus))))
    for s in rng.sample(list(TaskStatus), rng.randint(0, 2)):
        job.status_index.setdefault(s, {})  # an emptied map left in the index counts nothing either way
    want = sum(1 for t in job.tasks.values()
               if t.status in (TaskStatus.Bound, TaskStatus.Binding, TaskStatus.Running, TaskStatus.Allocated,
                               TaskStatus.Succeeded))
    assert job.ready_task_num() == job.ready_task_num_plain() == want
    valid = sum(1 for t in job.tasks.values()
                if t.status not in (TaskStatus.Releasing, TaskStatus.Failed, TaskStatus.Unknown))
    assert job.valid_task_num() == job.valid_task_num_plain() == valid
