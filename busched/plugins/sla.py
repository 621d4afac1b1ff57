"""sla: jobs with a waiting-time SLA go first, and are admitted once they have waited that long.

The waiting time comes from the job annotation ``sla-waiting-time`` (or
``volcano.sh/sla-waiting-time``), else the plugin argument of the same name.
Time is the session's clock (``ssn.now``), never the wall clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from busched.api.duration import DurationError, parse_duration
from busched.api.job import JobInfo
from busched.framework import points
from busched.framework.arguments import Arguments
from busched.framework.session import Session

WAITING_TIME_KEY = "sla-waiting-time"
ANNOTATION_KEYS = ("volcano.sh/sla-waiting-time", WAITING_TIME_KEY)
PERMIT, ABSTAIN = 1, 0


def _positive(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        v = parse_duration(text)
    except DurationError:
        return None
    return v if v > 0 else None


class SlaPlugin:
    name = "sla"
    reads_arguments = (WAITING_TIME_KEY,)  # every argument it reads (busched.framework.arguments)
    reads_clock = True  # the sla waiting time is measured against the session's clock

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        wait = Arguments.of(arguments).get_duration(WAITING_TIME_KEY, 0.0)
        self.default_wait = wait if wait > 0 else None

    def waiting_time(self, job: JobInfo) -> float | None:
        for key in ANNOTATION_KEYS:
            if key in job.annotations:
                v = _positive(job.annotations[key])
                if v is not None:
                    return v
        return self.default_wait

    def on_session_open(self, ssn: Session) -> None:
        def job_order(l: JobInfo, r: JobInfo) -> int:
            lw, rw = self.waiting_time(l), self.waiting_time(r)
            if lw is None:
                return 0 if rw is None else 1
            if rw is None:
                return -1
            ld, rd = l.created + lw, r.created + rw
            return -1 if ld < rd else (1 if ld > rd else 0)

        def permit(job: JobInfo) -> int:
            w = self.waiting_time(job)
            if w is None or ssn.now - job.created < w:
                return ABSTAIN
            return PERMIT

        ssn.add_fn(points.JOB_ORDER, self.name, job_order)
        ssn.add_fn(points.JOB_ENQUEUEABLE, self.name, permit)
        ssn.add_fn(points.JOB_PIPELINED, self.name, permit)
