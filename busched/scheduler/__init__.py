"""The scheduler loop: state events in, scheduling cycles, decisions out.

State arrives on the state stream (`busched.bus.subjects`): object specs from
`busched apply` and agents, the scheduler's own binding and podgroup records,
and agents' results.  It is folded into a `Cache` of *effective* objects: a
task's spec overlaid with where the scheduler bound it and what its agent last
reported; a node's spec overlaid with whether its agent is alive; a job's spec
overlaid with its podgroup status.  Once new work has settled (and otherwise
``period`` seconds after the last one) a cycle takes a snapshot, runs the
configured actions (`run_cycle`) in a worker thread, and publishes its
decisions.

The life of a bind::

    Pending --cycle--> Binding --bind.accepted--> Bound --task.phase--> Running --> Succeeded/Failed (final)
                          |  (the node's resources are held from here)       ^
                          +-- task.phase Running (a task started at once) ---+
                          +-- bind.rejected --> Pending (reason, backoff, node excluded; Failed after max_attempts)
                          +-- outcome unknown --> Releasing (an evict) --agent: stopped / node lost--> Pending

A binding record (attempt number, node) is written to the state stream
*before* the bind decision is published, on condition that the task's binding
subject is where this scheduler last saw it, so of two writers only one
advances a task; the decision carries ``Nats-Msg-Id: bind:<ns>/<name>:<attempt>``
so a republish is dropped by the server, and the record's sequence as its
fence.  A task is placed again only once its previous attempt is known
stopped (refused, answered an evict) or its node was declared lost after a
grace period: no timer releases a reservation whose outcome is unknown
(a lease ending releases a bind at once only when the agent's consumer
provably never delivered it, see `busched.scheduler.bindings`).

Time: a monotonic clock drives leases, heartbeats and backoff, outside any
session; a session never reads a clock.

The package, by what each part does.  `Scheduler` (in `loop`) is the composition root: it builds the
owned parts below, each a class with its own state and the collaborators it is given (narrow
protocols or callables, and the clock), wires them, and keeps the lifecycle and the cycle:

- `records`: the settings and the bookkeeping records (`Binding`, `Result`, `NodeLive`, `CycleReport`),
  constants, and small helpers shared by the others;
- `loop`: `Scheduler` itself: lifecycle (`start`, `stop`), `run_forever`, `run_once` (one cycle), the
  outbox of records a cycle writes besides decisions, and the refusals handed to the snapshot
  (``ClusterSnapshot.refused``, read by the busched-agent-feedback predicate, `busched.plugins.refused_nodes`);
- `bindings`: `BindingTable` (``Scheduler.table``), the bind life cycle above as one state machine: binds
  and evicts out to agents, conditional records, leases, stops, release and backoff, binding records and
  results applied, and recovery after a restart;
- `agents`: `Liveness` (``Scheduler.liveness``): heartbeats in, agents alive, unreachable, lost;
- `statuses`: `PodGroupStatuses` (``Scheduler.statuses``): the podgroup statuses a cycle changed, written
  to the stream in the background;
- `queue_statuses`: `QueueStatuses` (``Scheduler.queue_statuses``): each queue's allocated resources and
  podgroup counts, written the same way when they change;
- `trigger`: `CycleTrigger` (``Scheduler.trigger``): when the next cycle starts (new work settled, or the period);
- `events`: `StateFeed` (``Scheduler.feed``): the state stream in, decoding, validating and applying each
  message (binding records and results handed to the table), and stream hygiene (purges);
- `effective`: `EffectiveObjects` (``Scheduler.effective``): the effective objects in the cache (a spec
  overlaid with what the scheduler knows), brought up to date lazily, once per cycle;
- `queries`: `Queries` (``Scheduler.queries``; ``Scheduler.view`` and ``lookup`` ask it): the answers to
  `busched get`, `describe` and `explain` (request/reply) and the gauges;
- `memory`: when the process collects garbage (between cycles).
- `overview`: what the status page shows (`busched.web.status`), built from the parts above, and the
  ring of the last cycles `run_once` notes.
"""

from busched.scheduler.loop import Scheduler
from busched.scheduler.records import (  # noqa: F401 - re-exported: the public names, and the records the old module had
    BACKOFF_GATE,
    FEEDBACK_PLUGIN,
    TERMINAL,
    Binding,
    CycleReport,
    NodeLive,
    Result,
    SchedulerSettings,
)

__all__ = ["Scheduler", "SchedulerSettings", "CycleReport", "BACKOFF_GATE", "FEEDBACK_PLUGIN"]
