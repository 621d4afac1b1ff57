"""The operators' lifecycle commands as the scheduler carries them out: suspended jobs and drained nodes.

`busched job suspend` sets ``JobSpec.suspend`` (batch/v1 Job's ``spec.suspend``; Volcano's vcctl
``job suspend`` aborts the job).  The effective objects gate the job's tasks (``busched.io/suspended``,
so no session places them) and note the flip; at the start of the next cycle, before its snapshot,
`Lifecycle.enforce` stops every live attempt of a suspended job with the reason ``suspended``: the
normal evict life cycle (binding record ``evicting``, an evict decision, the agent stops the task,
then ``released``), so its resources stay held until the node says the task stopped.  Doing it at a
cycle's start, under the cycle's lock, means a bind decided by a session that ran while the suspend
arrived is stopped by the next cycle, never missed.  Resuming drops the gate: the tasks are placed
again as new attempts.

`busched node drain` cordons the node (its spec's ``unschedulable``, written by the command) and then
asks the scheduler (`DrainRequest` on ``busched.api.drain``) to stop every live attempt on it with the
reason ``drain``, through the binding table, never by writing records from outside; the tasks go
back to Pending once stopped and are placed on other nodes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from busched.bus import messages as m
from busched.scheduler.records import Binding, _field_error

log = logging.getLogger("busched.scheduler")

SUSPENDED = "suspended"
DRAIN = "drain"
CORDON_WAIT = 5.0  # seconds a drain waits for the scheduler to apply the cordon written before it
CORDON_POLL = 0.01


class Table(Protocol):
    bindings: dict[str, Binding]

    def stop_attempt(self, key: str, reason: str, why: str, *, bind_deleted: bool = False) -> None: ...


class SuspendChanges(Protocol):
    suspended: set[str]
    suspend_changed: set[str]


class Lifecycle:
    """Stops the live attempts of suspended jobs (`enforce`, once per cycle) and of drained nodes
    (`serve_drain`).  Reads the task and node ``specs``, the stream sequence each object was last applied
    at (``seqs``), the ``effective`` objects' suspend changes; stops attempts through the binding
    ``table`` under the cycle's ``lock``; ``new_work`` makes a cycle due (which writes the records and
    sends the evicts)."""

    def __init__(self, *, specs: Mapping[str, Mapping[str, Any]], seqs: Mapping[tuple[str, str], int],
                 table: Table, effective: SuspendChanges, lock: asyncio.Lock, new_work: Callable[[], None]) -> None:
        self.specs = specs
        self.seqs = seqs
        self.table = table
        self.effective = effective
        self.lock = lock
        self.new_work = new_work

    def enforce(self) -> list[str]:
        """At a cycle's start: stop the live attempts of the jobs suspended since the last cycle; the tasks
        stopped."""
        changed = self.effective.suspend_changed
        if not changed:
            return []
        jobs = {k for k in changed if k in self.effective.suspended}
        changed.clear()
        if not jobs:
            return []
        stopped = []
        tasks = self.specs["task"]
        for key, b in list(self.table.bindings.items()):
            if b.state != "binding":
                continue
            t = tasks.get(key)
            if t is not None and f"{t.namespace}/{t.job}" in jobs:
                self.table.stop_attempt(key, SUSPENDED, "evict")
                stopped.append(key)
        if stopped:
            log.info("suspended jobs %s: stopping %d tasks", ", ".join(sorted(jobs)), len(stopped))
        return stopped

    async def serve_drain(self, data: bytes) -> bytes:
        """Answer a `DrainRequest`: the node must exist and be cordoned (as of the request's ``after``)."""
        try:
            req = m.decode(data)
        except m.DecodeError as e:
            return m.encode(m.GetReply(kind="nodes", error=f"bad request: {_field_error(e)}"))
        if not isinstance(req, m.DrainRequest):
            return m.encode(m.GetReply(kind="nodes", error=f"expected a drain request, got {type(req).__name__}"))
        # the cordon was written just before: wait (bounded) until this scheduler has applied it
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CORDON_WAIT
        while self.seqs.get(("node", req.node), 0) < req.after and loop.time() < deadline:
            await asyncio.sleep(CORDON_POLL)
        spec = self.specs["node"].get(req.node)
        if spec is None:
            return m.encode(m.GetReply(kind="nodes", error=f"no node {req.node!r}"))
        if not spec.unschedulable:
            return m.encode(m.GetReply(kind="nodes", error=f"node {req.node!r} is not cordoned (busched node "
                                                           f"cordon {req.node} first)"))
        async with self.lock:  # no cycle meanwhile: the table is this cycle-free moment's
            evicting = []
            for key, b in list(self.table.bindings.items()):
                if b.node == req.node and b.live:
                    if b.state == "binding":
                        self.table.stop_attempt(key, DRAIN, "evict")
                    evicting.append(key)
        self.new_work()
        log.info("drain %s: %d tasks being evicted", req.node, len(evicting))
        return m.encode(m.GetReply(kind="nodes", items=[{"node": req.node, "evicting": sorted(evicting)}]))
