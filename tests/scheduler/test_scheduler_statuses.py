"""The podgroup statuses alone (busched.scheduler.statuses.PodGroupStatuses): a fake publisher and an
injected clock, no bus and no scheduler."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from busched.api import objects as o
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.scheduler.statuses import PodGroupStatuses


@dataclass
class Ack:
    ok: bool


@dataclass
class Job:
    phase: str
    conditions: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Ssn:
    jobs: dict[str, Job]


class World:
    def __init__(self) -> None:
        self.now = 0.0
        self.version = 0
        self.refreshed: list[str] = []
        self.errors = 0
        self.published: list[tuple[str, m.Msg]] = []
        self.fail = False
        self.specs = {"p/a": o.JobSpec(name="a", namespace="p", queue="default"),
                      "p/b": o.JobSpec(name="b", namespace="p", queue="default")}

    async def publish_all(self, items: Iterable[tuple[str, m.Msg, str | None]]) -> list[Ack]:
        out = []
        for subj, msg, _ in items:
            if not self.fail:
                self.published.append((subj, msg))
            out.append(Ack(not self.fail))
        return out

    def next_version(self) -> int:
        self.version += 1
        return self.version

    def statuses(self, interval: float = 1.0) -> PodGroupStatuses:
        @dataclass
        class Settings:
            status_interval: float = interval

        def on_error() -> None:
            self.errors += 1

        return PodGroupStatuses(Settings(), lambda: self.now, self.publish_all, job_specs=self.specs,
                                next_version=self.next_version, refresh_job=self.refreshed.append, on_error=on_error)


async def test_only_changed_jobs_get_a_status_and_it_counts_at_once() -> None:
    w = World()
    st = w.statuses()
    await st.collect(Ssn({"p/a": Job("Inqueue"), "p/b": Job(w.specs["p/b"].phase)}))
    assert list(st.recorded) == ["p/a"] and st.recorded["p/a"].phase == "Inqueue"
    assert list(st.waiting) == [S.podgroup_subject("p/a")]
    assert w.refreshed == ["p/a"]
    await st.collect(Ssn({"p/a": Job("Inqueue")}))  # nothing changed
    assert w.refreshed == ["p/a"]


async def test_statuses_wait_out_the_interval_coalesced() -> None:
    w = World()
    st = w.statuses(interval=5.0)
    await st.collect(Ssn({"p/a": Job("Inqueue")}))
    w.now = 1.0
    await st.collect(Ssn({"p/a": Job("Running")}))
    st.write_soon()
    assert st.writer is None  # the oldest waited 1s of 5
    w.now = 5.0
    st.write_soon()
    assert st.writer is not None
    await st.writer
    assert [(s, x.phase) for s, x in w.published] == [(S.podgroup_subject("p/a"), "Running")]
    assert not st.waiting


async def test_a_failed_write_waits_for_the_next_and_flush_writes_what_is_left() -> None:
    w = World()
    st = w.statuses(interval=0.0)
    await st.collect(Ssn({"p/a": Job("Inqueue")}))
    w.fail = True
    await st.write()
    assert w.errors == 1 and list(st.waiting) == [S.podgroup_subject("p/a")]
    w.fail = False
    await st.flush()
    assert not st.waiting and len(w.published) == 1


async def test_conditions_keep_their_transition_time_while_their_status_holds() -> None:
    w = World()
    st = w.statuses()
    cond = {"type": "Scheduled", "status": "True", "reason": "", "message": ""}
    await st.collect(Ssn({"p/a": Job("Running", [cond])}))
    first = st.recorded["p/a"].conditions[0].last_transition_time
    await asyncio.sleep(0.01)
    await st.collect(Ssn({"p/a": Job("Running", [cond, {"type": "Other", "status": "True"}])}))
    assert st.recorded["p/a"].conditions[0].last_transition_time == first
