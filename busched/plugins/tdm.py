"""tdm (time division multiplexing): revocable nodes lent to preemptable work during time windows.

A node labelled ``volcano.sh/revocable-zone: <zone>`` belongs to a revocable
zone.  Each zone is open during a daily window given by a plugin argument::

    tdm.revocable-zone.rz1: "10:00-21:00"   # HH:MM-HH:MM, UTC; end <= start wraps to the next day
    tdm.evict.period: 1m                     # Go duration; default 1m

Time is the session clock (``ssn.now``, seconds since the epoch, UTC).  As in
Volcano, a window is anchored on the *current* day (start today, end today or
tomorrow), so a window crossing midnight is closed again after midnight until
its start; both ends are inclusive at whole seconds.

- predicate: a revocable node takes only tasks that may use revocable zones
  (pod annotation ``volcano.sh/revocable-zone: "*"``, or, without that
  annotation, ``volcano.sh/preemptable: "true"``), and only while its zone is
  open (an unknown zone is never open); otherwise UnschedulableAndUnresolvable.
- node order: 100 for such a task on an open revocable node, else 0.
- preemptable: a preemptable or revocable task preempts nothing (reject);
  others may take Running preemptable tasks on non-revocable nodes, per job at
  most its disruption budget allows.
- victim tasks (shuffle): once per evict period, the Running preemptable tasks
  on the nodes of every configured zone that is closed, per job at most its
  disruption budget allows.  The last eviction time outlives the session (a
  package variable in Volcano): see `busched.framework.plugin_state`.
- job order: non-preemptable jobs first; job pipelined: permit when the job is
  pipelined, else reject; job starving: a non-preemptable job with a Pending task.

A job's disruption budget comes from its podgroup annotations
``volcano.sh/jdb-min-available`` (checked first) or
``volcano.sh/jdb-max-unavailable``, each an integer or a percentage of the job's
tasks (rounded up); a job with neither may lose one task at a time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from busched.api.fit import Code
from busched.api.job import JobInfo
from busched.api.node import NodeInfo
from busched.api.task import PREEMPTABLE_KEY, TaskInfo, TaskStatus, parse_bool
from busched.framework import points
from busched.framework.arguments import Arguments
from busched.framework.decision import fit_error
from busched.framework.plugin_state import state_of
from busched.framework.session import Session

__all__ = ["TdmPlugin", "zone_window", "task_revocable_zone", "node_revocable_zone", "max_pod_evict_num",
           "parse_int_or_percent", "REVOCABLE_ZONE_KEY"]

REVOCABLE_ZONE_KEY = "volcano.sh/revocable-zone"
JDB_MIN_AVAILABLE = "volcano.sh/jdb-min-available"
JDB_MAX_UNAVAILABLE = "volcano.sh/jdb-max-unavailable"
ZONE_ARG_PREFIX = "tdm.revocable-zone."
EVICT_PERIOD_ARG = "tdm.evict.period"
DEFAULT_EVICT_PERIOD = 60.0
DEFAULT_POD_EVICT_NUM = 1
MAX_NODE_SCORE = 100.0
DAY = 86400
PERMIT, REJECT = 1, -1

_CLOCK = re.compile(r"([0-9]{1,2}):([0-9]{2})")
_INT = re.compile(r"[+-]?[0-9]+")
_INT32 = (-(2**31), 2**31 - 1)


def _clock(text: str) -> int:
    """Go's time.Parse("15:04"): 1-2 digit hour below 24, 2 digit minute below 60; minutes since midnight."""
    m = _CLOCK.fullmatch(text)
    if m is None:
        raise ValueError(f"cannot parse {text!r} as 15:04")
    h, mi = int(m.group(1)), int(m.group(2))
    if h >= 24 or mi >= 60:
        raise ValueError(f"{text!r}: hour or minute out of range")
    return h * 60 + mi


def zone_window(raw: Any, now: float) -> tuple[int, int]:
    """The (start, end) epoch seconds of a zone window on ``now``'s (UTC) day; ValueError when malformed."""
    if not isinstance(raw, str):
        raise ValueError(f"revocable zone {raw!r} format error")
    parts = raw.strip().split("-")
    if len(parts) != 2:
        raise ValueError(f"revocable zone {raw} format error")
    t1, t2 = _clock(parts[0]), _clock(parts[1])
    day = math.floor(now / DAY) * DAY
    start = day + t1 * 60
    end = day + (DAY if t1 >= t2 else 0) + t2 * 60
    return start, end


def node_revocable_zone(node: NodeInfo) -> str:
    """Volcano reads a node's zone from its labels only."""
    return node.labels.get(REVOCABLE_ZONE_KEY, "")


def task_revocable_zone(task: TaskInfo) -> str:
    """"*" when the pod may run in revocable zones (GetPodRevocableZone), else ""."""
    ann = task.annotations
    if REVOCABLE_ZONE_KEY in ann:
        return "*" if ann[REVOCABLE_ZONE_KEY] == "*" else ""
    if PREEMPTABLE_KEY in ann and parse_bool(ann[PREEMPTABLE_KEY]) is True:
        return "*"
    return ""


def parse_int_or_percent(text: str, total: int) -> int:
    """intstr.Parse then GetValueFromIntOrPercent(roundUp); anything unparsable is 0."""
    if _INT.fullmatch(text):
        v = int(text)
        if _INT32[0] <= v <= _INT32[1]:
            return v
    if text.endswith("%") and _INT.fullmatch(text[:-1]):
        return math.ceil(int(text[:-1]) * total / 100)
    return 0


def max_pod_evict_num(job: JobInfo) -> int:
    """How many of the job's tasks may be evicted now, from its disruption budget annotations."""
    ann = job.annotations
    min_available, max_unavailable = "", ""
    if JDB_MIN_AVAILABLE in ann:
        min_available = ann[JDB_MIN_AVAILABLE]
    elif JDB_MAX_UNAVAILABLE in ann:
        max_unavailable = ann[JDB_MAX_UNAVAILABLE]
    total = len(job.tasks)
    running = job.count(TaskStatus.Running)
    if max_unavailable:
        allowed = parse_int_or_percent(max_unavailable, total)
        finished = job.count(TaskStatus.Succeeded) + job.count(TaskStatus.Failed)
        unavailable = total - finished - running
        return 0 if unavailable >= allowed else allowed - unavailable
    if min_available:
        need = parse_int_or_percent(min_available, total)
        if running >= need:
            return running - need
    return DEFAULT_POD_EVICT_NUM  # also when fewer than minAvailable run, as Volcano does


def _max_victims(job: JobInfo, candidates: list[TaskInfo]) -> list[TaskInfo]:
    return candidates[:max(0, min(max_pod_evict_num(job), len(candidates)))]


class TdmPlugin:
    name = "tdm"
    reads_arguments = (EVICT_PERIOD_ARG, ZONE_ARG_PREFIX + "*")  # every argument it reads (busched.framework.arguments)
    reads_clock = True  # revocable zones open and close with the clock; the last eviction is kept across cycles

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        self.zones: dict[str, Any] = {}
        for k, v in arguments.items():
            if ZONE_ARG_PREFIX in k:
                self.zones[k.replace(ZONE_ARG_PREFIX, "", 1)] = v
        self.evict_period = Arguments.of(arguments).get_duration(EVICT_PERIOD_ARG, DEFAULT_EVICT_PERIOD)

    def zone_error(self, zone: str, now: float) -> str | None:
        """Why ``zone`` is closed at ``now``, or None when it is open."""
        if zone not in self.zones:
            return f"revocable zone {zone} not support"
        raw = self.zones[zone]
        try:
            start, end = zone_window(raw, now)
        except ValueError as e:
            return str(e)
        t = math.floor(now)
        if t < start or t > end:
            return f"current time beyond revocable zone {zone}:{raw}"
        return None

    def on_session_open(self, ssn: Session) -> None:
        def predicate(task: TaskInfo, node: NodeInfo) -> None:
            zone = node_revocable_zone(node)
            if not zone:
                return
            err = self.zone_error(zone, ssn.now)
            if err is not None:
                raise fit_error(task, node, err, self.name, Code.UnschedulableAndUnresolvable)
            if not task_revocable_zone(task):
                raise fit_error(task, node, "not allow to dispatch to revocable node", self.name,
                                Code.UnschedulableAndUnresolvable)

        def node_order(task: TaskInfo, node: NodeInfo) -> float:
            # Volcano returns an error for a closed zone, which drops the node's plain scores;
            # the predicate has already filtered such nodes, so 0 stands for it here.
            zone = node_revocable_zone(node)
            if not zone or self.zone_error(zone, ssn.now) is not None or not task_revocable_zone(task):
                return 0.0
            return MAX_NODE_SCORE

        def by_job(tasks: list[TaskInfo]) -> list[TaskInfo]:
            groups: dict[str, list[TaskInfo]] = {}
            for t in tasks:
                groups.setdefault(t.job, []).append(t)
            victims: list[TaskInfo] = []
            for uid, group in groups.items():
                job = ssn.jobs.get(uid)
                if job is not None:
                    victims.extend(_max_victims(job, group))
            return victims

        def preemptable(preemptor: TaskInfo, preemptees: list[TaskInfo]) -> tuple[list[TaskInfo], int]:
            if preemptor.preemptable or task_revocable_zone(preemptor):
                return [], REJECT
            picked = []
            for t in preemptees:
                if not t.preemptable or t.status != TaskStatus.Running:
                    continue
                node = ssn.nodes.get(t.node_name)
                if node is None or node_revocable_zone(node):
                    continue
                picked.append(t)
            return by_job(picked), PERMIT

        def victims(_: list[TaskInfo]) -> list[TaskInfo]:
            state = state_of(ssn, self.name)
            last = state.get("last_evict_at")
            if last is not None and last + self.evict_period > ssn.now:
                return []
            out: list[TaskInfo] = []
            for zone in self.zones:
                if self.zone_error(zone, ssn.now) is None:
                    continue
                running: list[TaskInfo] = []
                for node in ssn.node_list:
                    if node_revocable_zone(node) != zone:
                        continue
                    for t in node.tasks.values():
                        if t.preemptable and t.status == TaskStatus.Running:
                            job = ssn.jobs.get(t.job)
                            # hand back the job's own task object, not the node's copy
                            running.append(job.tasks.get(t.uid, t) if job is not None else t)
                out.extend(by_job(running))
            state["last_evict_at"] = ssn.now
            return out

        def job_order(l: JobInfo, r: JobInfo) -> int:
            if l.preemptable == r.preemptable:
                return 0
            return 1 if l.preemptable else -1

        def job_pipelined(job: JobInfo) -> int:
            return PERMIT if job.is_pipelined() else REJECT

        def job_starving(job: JobInfo) -> bool:
            return not job.preemptable and job.count(TaskStatus.Pending) > 0

        ssn.add_fn(points.PREDICATE, self.name, predicate)
        ssn.add_fn(points.NODE_ORDER, self.name, node_order)
        ssn.add_fn(points.PREEMPTABLE, self.name, preemptable)
        ssn.add_fn(points.VICTIM_TASKS, self.name, [victims])
        ssn.add_fn(points.JOB_ORDER, self.name, job_order)
        ssn.add_fn(points.JOB_PIPELINED, self.name, job_pipelined)
        ssn.add_fn(points.JOB_STARVING, self.name, job_starving)
