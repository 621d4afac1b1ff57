"""Which JetStream streams busched uses and how they are configured.

The state and decision streams (and, for a scheduler, the history and events streams) are made here once,
when a process starts; kept apart from the client so the stream layout is read in one place.

On a NATS cluster every stream is made with ``StreamSettings.replicas`` copies (JetStream's
``num_replicas``: Raft-replicated, so the loss of a minority of servers loses no message and no
conditional write); the durable decision consumers inherit their stream's replicas (a consumer
config without ``num_replicas``), so a node's acknowledged decisions survive the loss of a server too.
An existing stream with fewer replicas than asked is scaled up in place (JetStream allows it); one with
more is left alone, so a command run with the default (1) never shrinks a replicated stream.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial
from typing import Any

import nats.js.errors
from nats.js import api

from busched.bus import subjects as S
from busched.bus.asks import Policy, ask
from busched.bus.errors import BusError

__all__ = ["StreamSettings", "ensure_streams", "stream_last_seq", "events_stream_config", "allow_atomic",
           "storage_type", "stream_info_soon"]

log = logging.getLogger("busched.bus")


@dataclass
class StreamSettings:
    state_history: int = 16  # messages kept per object subject on the state stream
    decision_max_age: float = 3600.0  # seconds a decision waits for its agent
    duplicate_window: float = 120.0  # seconds in which a republished Nats-Msg-Id is dropped
    storage: str = "file"  # file | memory
    history_max_age: float = 7 * 86400.0  # seconds the history streams keep cycle records and state copies; 0: none
    # the events stream (scheduling events, one subject per series, its latest message only): an hour, as
    # Kubernetes' default event TTL, and at most this many messages / bytes, the oldest dropped first; 0: none
    events_max_age: float = 3600.0
    events_max_msgs: int = 100_000
    events_max_bytes: int = 64 * 1024 * 1024
    replicas: int = 1  # copies of every stream on a NATS cluster (1..5; 3 survives the loss of one server)

    def __post_init__(self) -> None:
        if not 1 <= self.replicas <= 5:  # JetStream's own bounds
            raise ValueError(f"replicas must be 1 to 5, not {self.replicas}")


def storage_type(name: str) -> api.StorageType:
    """JetStream's storage type for busched's setting ("memory"; anything else is "file")."""
    return api.StorageType.MEMORY if name == "memory" else api.StorageType.FILE


async def ensure_streams(js: Any, settings: StreamSettings | None = None, *, history: bool | None = None) -> None:
    """Create the state and decision streams unless they exist (an existing stream is left as configured, but
    for its replicas: see the module's docstring); with ``history`` (default: whether ``settings`` are given,
    i.e. the scheduler's) the history streams too."""
    st = settings or StreamSettings()
    history = settings is not None if history is None else history
    storage = storage_type(st.storage)
    configs = [
        api.StreamConfig(name=S.STATE_STREAM, subjects=[f"{S.STATE_PREFIX}.>"],
                         retention=api.RetentionPolicy.LIMITS, max_msgs_per_subject=st.state_history,
                         storage=storage, duplicate_window=st.duplicate_window, allow_direct=True,
                         allow_atomic=True,  # sharded schedulers' binds: records and node ledger as one batch
                         description="busched cluster state: one subject per object"),
        api.StreamConfig(name=S.DECISION_STREAM, subjects=[f"{S.DECISION_PREFIX}.>"],
                         retention=api.RetentionPolicy.LIMITS, max_msgs_per_subject=1,
                         max_age=st.decision_max_age, storage=storage, duplicate_window=st.duplicate_window,
                         allow_direct=True, description="busched bind/evict decisions, per node and task"),
    ]
    if history and st.history_max_age > 0:  # the scheduler's: only it writes cycle records
        from busched.bus import history as H

        configs.append(api.StreamConfig(name=H.HISTORY_STREAM, subjects=[f"{H.HISTORY_PREFIX}.>"],
                                        retention=api.RetentionPolicy.LIMITS, max_age=st.history_max_age,
                                        storage=storage, description="busched cycle records (busched replay)"))
        # a copy of every state message for as long (the state stream's per-subject limit and purges do not
        # reach it): replay over the bus reads it (docs/bus.md, "History")
        configs.append(api.StreamConfig(name=H.STATE_HISTORY_STREAM, sources=[api.StreamSource(name=S.STATE_STREAM)],
                                        retention=api.RetentionPolicy.LIMITS, max_age=st.history_max_age,
                                        storage=storage, duplicate_window=st.duplicate_window,
                                        description="busched state messages kept for the history duration"))
    if history and st.events_max_age > 0:  # the scheduler's (with its history): only it records events
        configs.append(events_stream_config(st, storage))
    for cfg in configs:
        cfg.num_replicas = st.replicas
        try:
            info = await stream_info_soon(js, str(cfg.name))
            await _scale_up(js, info, st.replicas)
            continue
        except nats.js.errors.NotFoundError:
            pass
        except Exception as e:  # noqa: BLE001 - e.g. a user not permitted to look: use what the operator made
            log.warning("cannot check stream %s (%s); assuming it exists", cfg.name, e or type(e).__name__)
            continue
        try:  # (idempotent by config: the same stream made again is the one there)
            await ask("stream.create", partial(js.add_stream, cfg), detail=str(cfg.name))
        except nats.js.errors.BadRequestError as e:
            # another process created it between our two calls
            if "already in use" not in str(e):
                raise BusError(f"cannot create stream {cfg.name}: {e}") from None
        if cfg.sources:  # the history copy: what the state stream drops before its source is active is lost
            from busched.bus import history as H

            await H.wait_sourcing(js, H.STATE_HISTORY_STREAM)


async def stream_info_soon(js: Any, name: str, policy: Policy | None = None) -> Any:
    """``js.stream_info(name)``, asked again while unanswered (`busched.bus.asks`).

    Why: just after a NATS server is lost, the cluster's JetStream meta leader may be being elected, and a
    request sent then gets no answer at all; one request with the client's whole timeout (10 s) held a
    deposed scheduler's rejoin, and so its catch-up, for those 10 s, where asking again found the new leader
    within a second or two.  A definite answer (found, not found, refused) ends the asking at once; the last
    timeout is raised as before."""
    return await ask("stream.info", lambda: js.stream_info(name), policy, detail=name)


def events_stream_config(st: StreamSettings, storage: Any = api.StorageType.FILE) -> api.StreamConfig:
    """``BUSCHED_EVENTS``: one subject per event series, of which only the latest message is kept
    (``max_msgs_per_subject`` 1: a series' count grows in place), bounded in age, messages and bytes with
    the oldest discarded first, as Kubernetes lets events expire (docs/bus.md, "Scheduling events")."""
    return api.StreamConfig(name=S.EVENT_STREAM, subjects=[f"{S.EVENT_PREFIX}.>"],
                            retention=api.RetentionPolicy.LIMITS, max_msgs_per_subject=1, max_age=st.events_max_age,
                            max_msgs=st.events_max_msgs, max_bytes=st.events_max_bytes,
                            discard=api.DiscardPolicy.OLD, storage=storage, allow_direct=True,
                            description="busched scheduling events: the latest of each series")


async def _scale_up(js: Any, info: Any, replicas: int) -> None:
    """Raise an existing stream's replicas to ``replicas`` (never lower them)."""
    have = int(info.config.num_replicas or 1)
    if have >= replicas:
        return
    log.info("stream %s: replicas %d -> %d", info.config.name, have, replicas)
    try:
        cfg = info.config.evolve(num_replicas=replicas)  # (idempotent by config)
        await ask("stream.update", lambda: js.update_stream(cfg), detail=str(info.config.name))
    except Exception as e:  # noqa: BLE001 - e.g. a single server, or a user not permitted: say so, go on with it
        log.warning("cannot raise stream %s to %d replicas (%s); it keeps %d", info.config.name, replicas,
                    e or type(e).__name__, have)


async def stream_last_seq(js: Any, stream: str) -> int:
    """The stream's last sequence, 0 when it holds no message."""
    info = await stream_info_soon(js, stream)
    return int(info.state.last_seq or 0) if (info.state.messages or 0) else 0


async def allow_atomic(js: Any, stream: str = S.STATE_STREAM) -> None:
    """Make sure ``stream`` takes atomic batches (a stream made before busched asked for them is updated; the
    server must be 2.12 or newer).  Sharded schedulers write their binds so (docs/bus.md, "Shards")."""
    info = await stream_info_soon(js, stream)
    if getattr(info.config, "allow_atomic", None):
        return
    cfg = info.config
    cfg.allow_atomic = True
    try:
        await ask("stream.update", lambda: js.update_stream(cfg), detail=stream)  # (idempotent by config)
    except Exception as e:  # noqa: BLE001
        raise BusError(f"stream {stream} does not take atomic batches and cannot be changed to ({e}); "
                       "sharded schedulers need nats-server 2.12 or newer") from None
    info = await stream_info_soon(js, stream)
    if not getattr(info.config, "allow_atomic", None):
        raise BusError(f"stream {stream} does not take atomic batches: sharded schedulers need nats-server 2.12 "
                       "or newer")
