"""The running sums of a task's move between statuses: a job's total request and allocated, taken and
put back as `Resource.sub` and `Resource.add` would, written out.

Apart from the job's index because they are arithmetic only, shared by `JobInfo._move` and
`JobInfo._move_sole` (busched.api.job) and by the runs of moves (busched.api.moves); each keeps the
order of additions of the `Resource` methods it stands for, so the floats are bit for bit theirs
(tests/api/test_placing_sums.py, tests/api/test_move_sole.py)."""

from __future__ import annotations

from busched.api.resource import Resource

__all__ = ["sole_sums", "take_request", "put_request"]


def sole_sums(total: Resource, allocated: Resource, r: Resource, was: bool, now: bool) -> None:
    """`take_request` then `put_request` (``was``: the old status counted as allocated, ``now``: the new
    one does), as one: each sum gets the same subtraction then addition in the same order (a scalar
    name first seen where `put_request` would first see it), so the floats are bit for bit theirs.
    `JobInfo._move_sole`'s sums (tests/api/test_move_sole.py compares them with `_move`'s)."""
    rc, rm, rs = r.cpu, r.memory, r.scalars
    total.cpu = total.cpu - rc + rc
    total.memory = total.memory - rm + rm
    if rs:
        have = total.scalars
        if have:
            for n, v in rs.items():
                have[n] = have.get(n, 0.0) - v + v
        else:  # (take_request skips an empty map)
            for n, v in rs.items():
                have[n] = have.get(n, 0.0) + v
    if was:
        if now:
            allocated.cpu = allocated.cpu - rc + rc
            allocated.memory = allocated.memory - rm + rm
            if rs:
                have = allocated.scalars
                if have:
                    for n, v in rs.items():
                        have[n] = have.get(n, 0.0) - v + v
                else:
                    for n, v in rs.items():
                        have[n] = have.get(n, 0.0) + v
        else:
            allocated.cpu -= rc
            allocated.memory -= rm
            if rs:
                have = allocated.scalars
                if have:
                    for n, v in rs.items():
                        have[n] = have.get(n, 0.0) - v
    elif now:
        allocated.cpu += rc
        allocated.memory += rm
        if rs:
            have = allocated.scalars
            for n, v in rs.items():
                have[n] = have.get(n, 0.0) + v


def take_request(total: Resource, allocated: Resource, r: Resource, counted: bool) -> None:
    """``total.sub(r)``, and ``allocated.sub(r)`` when the task's old status ``counted`` as allocated,
    written out for a task's move (`JobInfo._move`, `busched.api.moves.move_run`): the same arithmetic
    in the same order, the scalar loops only for requests that have scalars (tests/api/test_placing_sums.py
    checks it against `Resource.sub`)."""
    rc, rm, rs = r.cpu, r.memory, r.scalars
    total.cpu -= rc
    total.memory -= rm
    if counted:
        allocated.cpu -= rc
        allocated.memory -= rm
    if rs:
        have = total.scalars
        if have:
            for n, v in rs.items():
                have[n] = have.get(n, 0.0) - v
        have = allocated.scalars
        if counted and have:
            for n, v in rs.items():
                have[n] = have.get(n, 0.0) - v


def put_request(total: Resource, allocated: Resource, r: Resource, counted: bool) -> None:
    """``total.add(r)``, and ``allocated.add(r)`` when the task's new status ``counted``: `take_request`'s
    other half."""
    rc, rm, rs = r.cpu, r.memory, r.scalars
    total.cpu += rc
    total.memory += rm
    if counted:
        allocated.cpu += rc
        allocated.memory += rm
    if rs:
        have = total.scalars
        for n, v in rs.items():
            have[n] = have.get(n, 0.0) + v
        if counted:
            have = allocated.scalars
            for n, v in rs.items():
                have[n] = have.get(n, 0.0) + v
