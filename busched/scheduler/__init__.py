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

    Pending --cycle--> Binding --bind.accepted--> Bound --task.phase--> Running --> Succeeded/Failed
                          |  (the node's resources are held from here)       ^
                          +-- task.phase Running (a task started at once) ---+
                          +-- bind.rejected / not received within the lease / agent lost --> Pending
                              (reason recorded, backoff before the next attempt)

A binding record (attempt number, node) is written to the state stream
*before* the bind decision is published, so a restarted scheduler knows every
bind it made; the decision carries ``Nats-Msg-Id: bind:<ns>/<name>:<attempt>``
so a republish is dropped by the server.  A bind is released on a timer only
when its agent is provably not holding it: the agent is silent past the
heartbeat timeout, or the agent is alive but its heartbeats show it has not
consumed up to the bind's stream sequence after the lease (the undelivered
decision is then deleted from the stream first).  An agent that has the bind
but has not answered keeps it for as long as it heartbeats.

Time: a monotonic clock drives leases, heartbeats and backoff, outside any
session; a session never reads a clock.

The package, by what each part does (one `Scheduler` class, assembled in `loop` from the parts):

- `records`: the settings and the bookkeeping records (`Binding`, `Result`, `NodeLive`, `CycleReport`),
  constants, and small helpers shared by the others;
- `loop`: `Scheduler` itself: lifecycle (`start`, `stop`), `run_forever`, `run_once` (one cycle) and the
  outbox of records a cycle writes besides decisions;
- `bindings`: binds and evicts out to agents, leases, release and backoff, and recovery after a restart;
- `agents`: heartbeats in, agent liveness, and a node's agent being lost;
- `events`: the state stream in: decoding, validating and applying each message;
- `effective`: the effective objects in the cache (a spec overlaid with what the scheduler knows);
- `statuses`: the podgroup statuses a cycle changed, written to the stream in the background;
- `trigger`: when the next cycle starts (new work settled, or the period);
- `memory`: when the process collects garbage (between cycles);
- `queries`: the answers to `busched get` (request/reply) and the gauges.
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
