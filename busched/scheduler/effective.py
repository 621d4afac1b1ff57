"""The effective objects in the cache: a spec overlaid with what the scheduler knows.

A task as the session must see it: where it was bound, the phase its agent reported, deleting while
evicted, and the backoff and suspended scheduling gates (a suspended job's tasks are not placed). A node
is ready only while its agent is alive (when heartbeats are required); a job carries its podgroup
status. A new spec is refreshed at once (to validate it); other task and job changes are gathered and
applied once per cycle (`EffectiveObjects.sync_cache`, or `sync_cache_yielding` at the start of a cycle,
which lets the event loop handle what arrived every few milliseconds: thousands of results and podgroup
changes cost a few hundred milliseconds of cache upserts, during which agents' answers would otherwise
wait).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any, Protocol

import msgspec

from busched.api import objects as o
from busched.api.build import SpecError
from busched.api.task import TaskStatus, status_from_phase
from busched.bus import messages as m
from busched.cache.cache import Cache
from busched.scheduler.records import (
    BACKOFF_GATE,
    SUSPENDED_GATE,
    TERMINAL,
    Binding,
    NodeLive,
    Result,
    SchedulerSettings,
)

log = logging.getLogger("busched.scheduler")


class TaskTable(Protocol):
    """What the effective objects read of the binding table (`busched.scheduler.bindings.BindingTable`)."""

    bindings: dict[str, Binding]
    results: dict[str, Result]
    backoff_until: dict[str, float]


class EffectiveObjects:
    """Keeps the cache's objects effective.  Reads the ``specs``, the binding ``table``, the nodes' ``live``ness
    and the podgroup statuses (``pg_status``: one that does not fit its job is dropped from it); owns the tasks
    and jobs whose cache copy is due (``dirty_tasks``, ``dirty_jobs``)."""

    def __init__(self, settings: SchedulerSettings, cache: Cache, specs: dict[str, dict[str, Any]], *,
                 table: TaskTable, live: Mapping[str, NodeLive], pg_status: dict[str, m.PodGroupStatus]) -> None:
        self.settings = settings
        self.cache = cache
        self.specs = specs
        self.table = table
        self.live = live
        self.pg_status = pg_status
        self.dirty_tasks: set[str] = set()
        self.dirty_jobs: set[str] = set()
        self.suspended: set[str] = set()  # jobs whose spec says suspend
        self.suspend_changed: set[str] = set()  # jobs suspended or resumed since the last cycle took them

    # == effective objects ============================================================================================
    def refresh(self, kind: str, key: str) -> None:
        if kind == "task":
            self.refresh_task(key, strict=True)
        elif kind == "node":
            self.refresh_node(key, strict=True)
        elif kind == "job":
            self.refresh_job(key, strict=True)
        else:
            self.cache.upsert(kind, self.specs[kind][key], key)

    def refresh_task(self, key: str, strict: bool = False) -> None:
        """Bring the cache's copy of a task up to date: now for a new spec (to validate it), else lazily."""
        if not strict:
            self.dirty_tasks.add(key)
            return
        spec = self.specs["task"].get(key)
        if spec is None:
            return
        self.dirty_tasks.discard(key)
        self.upsert("task", self.effective_task(key, spec), strict, key)

    def sync_cache(self) -> None:
        """Apply the task and job changes gathered since the last cycle (several results of one task cost one
        upsert)."""
        dirty, self.dirty_tasks = self.dirty_tasks, set()
        for key in dirty:
            spec = self.specs["task"].get(key)
            if spec is not None:
                self.upsert("task", self.effective_task(key, spec), False, key)
        jobs, self.dirty_jobs = self.dirty_jobs, set()
        for key in jobs:
            self.refresh_job(key, now=True)

    async def sync_cache_yielding(self, slice_seconds: float = 0.005) -> None:
        """`sync_cache`, handing the event loop back every ``slice_seconds``; what changes meanwhile is
        applied too, before this returns."""
        tasks = self.specs["task"]
        while self.dirty_tasks or self.dirty_jobs:
            end = time.perf_counter() + slice_seconds
            n = 0
            while (self.dirty_tasks or self.dirty_jobs) and (n & 63 or time.perf_counter() < end):
                n += 1
                if self.dirty_tasks:
                    key = self.dirty_tasks.pop()
                    spec = tasks.get(key)
                    if spec is not None:
                        self.upsert("task", self.effective_task(key, spec), False, key)
                else:
                    self.refresh_job(self.dirty_jobs.pop(), now=True)
            await asyncio.sleep(0)

    def refresh_node(self, key: str, strict: bool = False) -> None:
        spec = self.specs["node"].get(key)
        if spec is None:
            return
        lv = self.live.get(key)
        ready = spec.ready and (not self.settings.require_heartbeat or (lv is not None and lv.state == "alive"))
        # the load its agent measured wins over one the spec was applied with (the newer, and the node's own)
        usage = lv.usage if lv is not None and lv.usage is not None else spec.usage
        if ready != spec.ready or usage is not spec.usage:
            spec = msgspec.structs.replace(spec, ready=ready, usage=usage)
        self.upsert("node", spec, strict, key)

    def refresh_job(self, key: str, strict: bool = False, *, now: bool = False) -> None:
        """Bring the cache's copy of a job up to date: now for a new spec (to validate it), else lazily."""
        if not (strict or now):
            self.dirty_jobs.add(key)
            return
        self.dirty_jobs.discard(key)
        spec = self.specs["job"].get(key)
        if spec is None:
            return
        # the suspend flag is taken only with a spec the cache took (validated): a refused job changes nothing
        flip = spec.suspend != (key in self.suspended)
        taken = False
        st = self.pg_status.get(key)
        if st is not None:
            overlaid = msgspec.structs.replace(spec, phase=st.phase, conditions=[
                {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message,
                 "transitionID": c.transition_id} for c in st.conditions])
            try:
                self.cache.upsert("job", overlaid, key)
                taken = True
            except SpecError as e:
                # a status record that does not fit the job must not take the job away: the spec alone holds
                log.warning("job %s: its podgroup status is not valid, left out: %s", key, e)
                self.pg_status.pop(key, None)
        if not taken:
            taken = self.upsert("job", spec, strict, key)
        if taken and flip:
            self._suspend_flipped(key, spec.suspend)

    def _suspend_flipped(self, key: str, suspend: bool) -> None:
        """A job suspended or resumed (or deleted while suspended): its tasks' gate changes, and the next
        cycle stops the live ones (`busched.scheduler.lifecycle`).  One pass over the tasks, on a flip only."""
        if suspend:
            self.suspended.add(key)
        else:
            self.suspended.discard(key)
        self.suspend_changed.add(key)
        ns, _, name = key.partition("/")
        for tkey, t in self.specs["task"].items():
            if t.job == name and t.namespace == ns:
                self.dirty_tasks.add(tkey)

    def job_deleted(self, key: str) -> None:
        if key in self.suspended:
            self._suspend_flipped(key, False)

    def upsert(self, kind: str, spec: Any, strict: bool, key: str) -> bool:
        """The cache's upsert; False when it refused the spec (raised again when ``strict``)."""
        try:
            self.cache.upsert(kind, spec, key)
        except SpecError:
            if strict:
                raise
            log.exception("cannot refresh %s %s", kind, spec.name)
            return False
        return True

    def effective_task(self, key: str, spec: o.TaskSpec) -> o.TaskSpec:
        """The task as the scheduler must see it: where we bound it and what its agent said."""
        b = self.table.bindings.get(key)
        gates = spec.scheduling_gates
        if key in self.table.backoff_until and BACKOFF_GATE not in gates:
            gates = [*gates, BACKOFF_GATE]
        if self.suspended and f"{spec.namespace}/{spec.job}" in self.suspended and SUSPENDED_GATE not in gates:
            gates = [*gates, SUSPENDED_GATE]
        if b is None:
            if spec.phase in TERMINAL and spec.node:
                # terminated tasks hold nothing on their node (Volcano's cache skips them)
                return msgspec.structs.replace(spec, node="", scheduling_gates=gates)
            return spec if gates is spec.scheduling_gates else msgspec.structs.replace(spec, scheduling_gates=gates)
        if not b.live:
            # done: it ended; failed: its attempts are exhausted; both for good
            phase = b.outcome if b.state == "done" else "Failed" if b.state == "failed" else "Pending"
            return msgspec.structs.replace(spec, node="", phase=phase, deleting=False, scheduling_gates=gates)
        r = self.table.results.get(key)
        phase = "Pending"
        if r is not None and r.attempt == b.attempt and r.what in ("Running", "Succeeded", "Failed"):
            phase = r.what
        node = b.node if phase not in TERMINAL else ""
        annotations = {**spec.annotations, **b.annotations} if b.annotations else spec.annotations
        # when it started, as its agent saw it (cdp's cooldown, the usage plugin's shadow load); else the spec's
        started = r.start_time if r is not None and r.attempt == b.attempt and r.start_time is not None \
            else spec.start_time
        return msgspec.structs.replace(spec, node=node, phase=phase, deleting=b.state == "evicting",
                                       scheduling_gates=gates, annotations=annotations, start_time=started)

    def task_status(self, key: str) -> str:
        """Volcano's task status name as `busched get tasks` shows it."""
        spec = self.specs["task"].get(key)
        if spec is None:
            return ""
        b = self.table.bindings.get(key)
        if b is not None and b.state == "failed":
            return TaskStatus.Failed.name
        if b is not None and b.state == "done":
            return b.outcome
        if b is None or not b.live:
            s = spec if b is None else msgspec.structs.replace(spec, node="", phase="Pending")
            return status_from_phase(s.phase, s.node, s.deleting).name
        if b.state == "evicting":
            return TaskStatus.Releasing.name
        r = self.table.results.get(key)
        if r is None or r.attempt != b.attempt:
            return TaskStatus.Binding.name
        if r.what == "accepted":
            return TaskStatus.Bound.name
        return r.what
