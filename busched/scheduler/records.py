"""The scheduler's settings and bookkeeping records, and the small helpers its parts share.

`SchedulerSettings` holds the timings (cycle period, bind lease, heartbeat timeout, backoff) and limits.
Beside the cache, a scheduler keeps, per task, a `Binding` (its latest bind attempt: node, state
``binding | evicting | released``, decision-stream sequence, whether the decision went out) and the
`Result` its agent last reported, and per node a `NodeLive` (agent liveness from heartbeats: what it
holds and how far it has consumed the decision stream).  `CycleReport` is what `Scheduler.run_once`
returns.  Nothing here does I/O.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from busched.api.objects import NodeUsageSpec
from busched.bus import messages as m
from busched.bus.client import StreamSettings
from busched.framework.config import PluginOption, SchedulerConfig, Tier
from busched.scheduler.checkpoint import CheckpointSettings
from busched.scheduler.sched_events import EventSettings

log = logging.getLogger("busched.scheduler")

BACKOFF_GATE = "busched.io/backoff"
SUSPENDED_GATE = "busched.io/suspended"  # every task of a suspended job (`busched job suspend`) carries it
FEEDBACK_PLUGIN = "busched-agent-feedback"
TERMINAL = ("Succeeded", "Failed")
FREEZE_AFTER_EVENTS = 50_000  # a catch-up at least this big moves what it built to the collector's permanent generation
_RESULT_RANK = {"accepted": 1, "Running": 2, "Succeeded": 3, "Failed": 3, "rejected": 3}


@dataclass
class SchedulerSettings:
    period: float = 1.0  # seconds from the end of a cycle to the start of the next when no new work arrives
    trigger: bool = True  # also start a cycle once new work has settled (busched.scheduler.trigger)
    settle: float = 0.05  # new work has settled: everything on the stream read and nothing new for this long
    settle_max: float = 1.0  # ... or this long after its first arrival, for a burst that never pauses
    min_interval: float = 0.05  # a triggered cycle starts at least this long after the previous one ended
    status_interval: float = 1.0  # a podgroup status waits this long to be written, coalesced with later ones
    bind_lease: float = 10.0  # an alive agent must have consumed a bind within this long
    heartbeat_timeout: float = 5.0  # no heartbeat for this long: the node is unreachable (no new binds)
    node_lost_grace: float = 20.0  # ... and this much longer: it is lost, and its tasks go back to Pending
    # more than this fraction of the fleet unreachable at once (with at least lost_hold_min_nodes nodes) looks
    # like a partition or a bus problem, not node failures: nothing is declared lost while it lasts
    lost_hold_fraction: float = 0.5
    lost_hold_min_nodes: int = 4
    require_heartbeat: bool = True  # only nodes whose agent is alive are schedulable
    backoff_initial: float = 1.0  # seconds before a rejected/unreceived task may be placed again, doubling
    backoff_max: float = 60.0
    exclusion_ttl: float = 60.0  # a node that refused a task is not offered it again for this long
    max_attempts: int = 10  # consecutive failed binds (refused, never taken) after which the task is Failed
    purge: bool = True  # purge a deleted object's binding, result and podgroup subjects once it is settled
    max_event_bytes: int = 256 * 1024  # larger state messages are rejected
    cycle_in_thread: bool = True
    manage_gc: bool = True  # run_forever collects garbage itself, between cycles (busched.scheduler.memory)
    seed: int = 0
    # the NodeShard this scheduler owns (`busched run --shard`; "": every node, no shard) and how: hard (only its
    # nodes) or soft (its nodes first, the others when they cannot take a task); its binds then go out with
    # node ledgers (busched.scheduler.ledger)
    shard: str = ""
    shard_mode: str = "hard"
    # leader election (`busched.scheduler.election`): the lease's length in seconds (`busched run --lease`),
    # renewed every third of it; a standby takes over once the leader has not renewed for that long.  0: no
    # election, this scheduler leads from the start with epoch 0 (in-process tests, replay).  The lease is
    # the shard's (its key in the leases bucket: `lease_key`, "default" without a shard)
    lease: float = 0.0
    # the leader renews from a thread and connection of its own (busched.bus.lease_keeper), so a busy event
    # loop does not let the lease lapse; False renews on the event loop (tests of that path)
    lease_keeper: bool = True
    streams: StreamSettings = field(default_factory=StreamSettings)
    events: EventSettings = field(default_factory=EventSettings)  # scheduling events (sched_events.py)
    checkpoint: CheckpointSettings = field(default_factory=CheckpointSettings)  # restarts (checkpoint.py)

    @property
    def lease_key(self) -> str:
        """The shard whose lease this scheduler contends for: its NodeShard, "default" without one."""
        return self.shard or "default"


@dataclass
class Binding:
    """A task's latest bind attempt, as its binding record on the state stream says.

    ``rec_seq`` is the stream sequence of that record: every new record of the task is written on
    condition that the subject's last sequence is still ``rec_seq`` (JetStream's
    expected-last-subject-sequence), so of two writers only one advances a task's binding; it is
    also the fence carried by the decisions.  ``boot`` is the agent incarnation that took the
    attempt: results from any other are not believed.  ``stop`` says why an ``evicting`` attempt is
    being stopped (``evict``: a cycle's preemption or reclaim; ``lease``, ``restart``, ``deleted``,
    ``node``: its outcome is unknown and it must be known stopped before the task is placed again).
    """

    attempt: int
    node: str
    state: str = "binding"  # binding | evicting | released | failed (attempts exhausted) | done (it ended)
    reason: str = ""
    version: int = 0
    backoff: float = 0.0
    decided: float = 0.0  # monotonic time of the decision (or of recovery)
    seq: int = 0  # decision-stream sequence of the bind, 0 while unknown
    published: bool = True  # False while the decision still has to be (re)published
    evict_reason: str = ""
    rec_seq: int = 0  # state-stream sequence of this task's last binding record (0: none yet)
    boot: str = ""  # the agent boot that took this attempt ("" until one answered)
    stop: str = ""  # why an evicting attempt is being stopped (see above)
    outcome: str = ""  # done: Succeeded | Failed, as its agent reported it (final)
    exit_code: int | None = None
    # what the bind adds to the task's annotations (the devices deviceshare gave it), for the attempt's life
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def final(self) -> bool:
        """The task will not be placed again: it ended (done) or its attempts are exhausted (failed)."""
        return self.state in ("done", "failed")

    @property
    def live(self) -> bool:
        return self.state in m.BINDING_LIVE_STATES


@dataclass
class Result:
    attempt: int
    node: str
    what: str  # accepted | rejected | Running | Succeeded | Failed
    reason: str = ""
    boot: str = ""
    version: int = 0
    exit_code: int | None = None
    start_time: float | None = None  # when the attempt started, as its agent saw it (epoch seconds)


@dataclass
class NodeLive:
    state: str = "unknown"  # unknown (not heard since we started) | alive | unreachable | lost
    last_seen: float = 0.0
    unreachable_since: float = 0.0
    since: float = 0.0
    boot: str = ""
    holding: dict[str, int] = field(default_factory=dict)
    through_seq: int = 0
    interval: float = 1.0
    consumer: str = ""  # the agent's durable consumer of this node's decisions
    usage: NodeUsageSpec | None = None  # the newest load its agent reported, None when none
    usage_time: float = 0.0  # when that load was measured (epoch seconds)


@dataclass
class CycleReport:
    cycle: int
    binds: list[tuple[str, str]] = field(default_factory=list)
    evicts: list[tuple[str, str]] = field(default_factory=list)
    released: list[tuple[str, str]] = field(default_factory=list)
    # binds not written, as their readers would refuse them (busched.scheduler.write_bounds): task, node, why
    failed_binds: list[tuple[str, str, str]] = field(default_factory=list)
    seconds: float = 0.0
    error: str = ""
    skipped: bool = False  # nothing could have changed since the last cycle, which decided nothing
    now: float = 0.0  # the session's clock: wall-clock epoch seconds read once at the cycle's start
    # seconds from the cycle's start to each stage's end: prepare (before the snapshot), snapshot, actions
    # (the session's open and its actions), publish (the binds and evicts sent); and "cpu": the process's
    # CPU seconds from the start to the publish (`busched bench restart`)
    stages: dict[str, float] = field(default_factory=dict)



def _version_clock() -> Callable[[], int]:
    last = 0

    def next_version() -> int:
        nonlocal last
        last = max(last + 1, time.time_ns())
        return last

    return next_version


def _task_key(ns: str, name: str) -> str:
    return f"{ns}/{name}"


_DECODE = m._DECODER.decode  # m.decode without the call around it


def _describe(kind: str, key: str) -> str:
    if kind == "result":
        node, _, task = key.partition("/")
        return f"result for task {task} on node {node}"
    return f"{kind} {key}" if kind else "message"


def _field_error(e: Exception) -> str:
    """msgspec's "Expected `int`, got `str` - at `$.task.priority`" as "task.priority: expected `int`, got `str`"."""
    text = str(e)
    if " - at `$" in text:
        msg, _, path = text.partition(" - at `$")
        path = path.rstrip("`").lstrip(".")
        return f"{path or 'payload'}: {msg[0].lower() + msg[1:]}"
    return f"payload: {text}"


def with_refusals(config: SchedulerConfig) -> SchedulerConfig:
    """``config`` with the busched-agent-feedback predicate in a tier of its own, last."""
    if any(p.name == FEEDBACK_PLUGIN for t in config.tiers for p in t.plugins):
        return config
    return dataclasses.replace(config, tiers=config.tiers + (Tier(plugins=(PluginOption(FEEDBACK_PLUGIN),)),))
