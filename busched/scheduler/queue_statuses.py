"""Queue statuses: what each queue holds after a cycle, written to the state stream in the background.

Volcano's scheduler writes a queue's ``status.allocated`` when its session closes (framework
``updateQueueStatus``: the requests of the queue's tasks in an allocated status, added to every ancestor
as well when a ``root`` queue exists), and only when it changed; its queue controller keeps the counts of
the queue's podgroups per phase.  busched has no controller, so the scheduler writes both, as one
``queue.status`` per queue on ``busched.state.queueStatus.<name>``: `QueueStatuses.collect` compares each
queue's status as the session left it with the last one recorded and queues only those that changed;
they are published like the podgroup statuses (`busched.scheduler.statuses.StatusOutbox`: in the
background, once the oldest has waited ``status_interval``).  A restarted scheduler reads the recorded
ones back while catching up (`record`), so it writes again only what differs.  `busched get queues`
shows them (the status of ``-o yaml``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from busched.api.resource import Resource
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.resources import resource_list
from busched.scheduler.statuses import Publish, StatusOutbox, StatusSettings

__all__ = ["QueueStatuses", "ROOT_QUEUE", "PHASE_COUNTS"]

ROOT_QUEUE = "root"
# a podgroup phase -> the status field that counts it (Volcano's QueueStatus)
PHASE_COUNTS = {"Pending": "pending", "Running": "running", "Inqueue": "inqueue", "Unknown": "unknown",
                "Completed": "completed"}


class QueueStatuses(StatusOutbox):
    """The queue statuses: the last recorded per queue (``recorded``, name -> status) and the ones waiting."""

    name = "queue-statuses"

    def __init__(self, settings: StatusSettings, clock: Callable[[], float], publish_all: Publish, *,
                 next_version: Callable[[], int], on_error: Callable[[], None]) -> None:
        super().__init__(settings, clock, publish_all, on_error=on_error)
        self.next_version = next_version
        self.recorded: dict[str, m.QueueStatus] = {}

    def record(self, name: str, st: m.QueueStatus) -> None:
        """A status read back from the stream (catching up): what the next collect compares with."""
        self.recorded[name] = st

    def collect(self, ssn: Any) -> list[m.QueueStatus]:
        """Queue a ``queue.status`` for every queue of the session whose status changed; returns them."""
        allocated = {name: Resource() for name in ssn.queues}
        counts: dict[str, dict[str, int]] = {name: {} for name in ssn.queues}
        hierarchical = ROOT_QUEUE in ssn.queues
        for job in ssn.jobs.values():
            if job.queue not in allocated:
                continue
            if getattr(job, "has_podgroup", True):
                field = PHASE_COUNTS.get(job.phase)
                if field is not None:
                    per = counts[job.queue]
                    per[field] = per.get(field, 0) + 1
            held = job.allocated  # kept by the job as its tasks change (Volcano's job.Allocated)
            if held.is_empty():
                continue
            for name in _chain(ssn.queues, job.queue, hierarchical):
                allocated[name].add(held)
        changed: list[m.QueueStatus] = []
        for name, q in ssn.queues.items():
            st = m.QueueStatus(name=name, state=str(q.state), allocated=resource_list(allocated[name], skip_zero=True),
                               **counts[name])
            cur = self.recorded.get(name)
            if cur is not None and _same(cur, st):
                continue
            st.version = self.next_version()
            self.recorded[name] = st
            self.queue(S.queue_status_subject(name), st)
            changed.append(st)
        return changed


def _chain(queues: dict[str, Any], name: str, hierarchical: bool) -> list[str]:
    """The queue, then (under a root queue, as Volcano) its ancestors up to root, each once."""
    out = [name]
    if not hierarchical:
        return out
    seen = {name}
    cur = queues.get(name)
    while cur is not None and name != ROOT_QUEUE:
        name = cur.parent or ROOT_QUEUE
        if name in seen or name not in queues:
            break
        out.append(name)
        seen.add(name)
        cur = queues.get(name)
    return out


def _same(a: m.QueueStatus, b: m.QueueStatus) -> bool:
    return (a.state, a.allocated, a.pending, a.running, a.inqueue, a.unknown, a.completed) == \
        (b.state, b.allocated, b.pending, b.running, b.inqueue, b.unknown, b.completed)
