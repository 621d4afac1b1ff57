"""shuffle: evict the running tasks that the victim-selection plugins choose.

Algorithm, in session hooks:

1. Collect every Running task of every job in the session.
2. ``ssn.victim_tasks(tasks)`` picks the victims (the union of every enabled
   plugin's victim functions, the first tier that picks any deciding).
3. ``ssn.evict(victim, "shuffle")`` each of them, outside any statement: each
   eviction is a decision at once and the victim becomes Releasing.
"""

from __future__ import annotations

from busched.api.task import TaskStatus
from busched.framework.session import Session

__all__ = ["ShuffleAction"]


class ShuffleAction:
    name = "shuffle"
    reads_arguments = ()

    def execute(self, ssn: Session) -> None:
        running = [t for job in ssn.jobs.values() for t in job.tasks.values() if t.status == TaskStatus.Running]
        seen: set[str] = set()
        for victim in ssn.victim_tasks(running):
            if victim.uid in seen:
                continue
            seen.add(victim.uid)
            ssn.evict(victim, "shuffle")
