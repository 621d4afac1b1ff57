"""The one place busched talks to NATS.

`Bus` wraps a connection and its JetStream context with the few operations the
scheduler, the agents and the CLI need: make sure the streams exist, publish
messages (one at a time or many in flight), watch the state stream from the
latest value of every object and then live, keep a node's durable decision
consumer, core subscriptions and request/reply.  Handlers get plain values
(subject, bytes, sequence numbers), never nats objects.

`Bus` holds the connection and the core NATS side itself and passes the rest
to the modules that do it: `busched.bus.streams` (stream layout),
`busched.bus.publish` (stream publishing), `busched.bus.feeds` (the state watch
and the decision feed) and `busched.bus.reads` (one-off reads).  Its methods
are the API; those modules are its parts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import nats
import nats.errors

from busched.bus import checkpoints, events, feeds, reads
from busched.bus import lease as lease_mod
from busched.bus import subjects as S
from busched.bus.connect import NatsOptions, check_server_version
from busched.bus.direct import direct_subscription, undirect
from busched.bus.errors import BusError, unsubscribe_quietly
from busched.bus.feeds import DecisionFeed, Delivery, StateBatchHandler, StateHandler, StateWatch
from busched.bus.messages import GetReply, GetRequest, Msg, decode, encode
from busched.bus.publish import Ack, Publisher
from busched.bus.streams import StreamSettings, allow_atomic, ensure_streams, stream_last_seq

__all__ = ["Bus", "Ack", "Delivery", "DecisionFeed", "StateWatch", "StreamSettings", "BusError"]

log = logging.getLogger("busched.bus")


def _server_url(nc: Any) -> str:
    url = getattr(nc, "connected_url", None)
    return f"{url.hostname}:{url.port}" if url is not None else "?"


def _too_old(nc: Any) -> str | None:
    """Why the server ``nc`` is connected to is too old for busched (`connect.check_server_version`)."""
    try:
        version = nc.connected_server_version
    except Exception:  # noqa: BLE001 - no INFO (a test double): nothing to judge
        return None
    text = str(getattr(version, "_server_version", "") or "")  # the INFO's version as the server wrote it
    if not text or text.endswith("-unknown"):  # nats-py's "0.0.0-unknown": the server gave none
        return None
    return check_server_version(text, _server_url(nc))


class Bus:
    def __init__(self, nc: Any, options: NatsOptions | None = None) -> None:
        self.nc = nc
        self.js = nc.jetstream(timeout=10)
        self.options = options
        self._subs: list[Any] = []
        self._closing = False
        self._publisher = Publisher(nc, self.js)
        # told of every disconnection (False) and reconnection (True): a reader of heartbeats must not take
        # its own disconnection for its peers' silence
        self.connection_listeners: list[Callable[[bool], None]] = []

    def _connection_changed(self, connected: bool) -> None:
        for cb in list(self.connection_listeners):
            try:
                cb(connected)
            except Exception:  # noqa: BLE001
                log.exception("connection listener failed")

    # -- connection ------------------------------------------------------------------------------------------------
    @classmethod
    async def connect(cls, options: NatsOptions | str, *, name: str | None = None, wait: float = 10.0) -> Bus:
        """Connect, retrying for up to ``wait`` seconds; once connected, reconnect for ever."""
        if isinstance(options, str):
            options = NatsOptions(url=options)
        kw = options.connect_kwargs()
        if name:
            kw["name"] = name

        holder: list[Bus] = []
        failures: list[Exception] = []  # before the first connection: the last one names the cause

        async def on_error(e: Exception) -> None:
            # before the first connection, failures are retried and summed up by the BusError below
            log.log(logging.WARNING if holder else logging.DEBUG, "nats: %s", e)
            if not holder:
                failures.append(e)
                del failures[:-20]

        async def on_disconnect() -> None:
            if not (holder and holder[0]._closing):
                log.warning("nats: disconnected from %s", options.url)
            if holder:
                holder[0]._connection_changed(False)

        async def on_reconnect() -> None:
            log.info("nats: reconnected to %s", _server_url(holder[0].nc) if holder else "?")
            if holder:
                too_old = _too_old(holder[0].nc)
                if too_old:  # a cluster mid-upgrade: say it loudly, a stream's leader may be elsewhere
                    log.error("%s", too_old)
                holder[0]._connection_changed(True)

        try:
            nc = await asyncio.wait_for(nats.connect(error_cb=on_error, disconnected_cb=on_disconnect,
                                                     reconnected_cb=on_reconnect, max_reconnect_attempts=-1,
                                                     reconnect_time_wait=0.5, **kw), wait)
        except asyncio.TimeoutError:
            # "within 5s" alone hides a refused user or a TLS mismatch behind what looks like a server down
            # the server's own word (an authorization violation) over the socket errors that follow it
            said = [e for e in failures if not isinstance(e, OSError)] or failures
            cause = f" (last error: {said[-1] or type(said[-1]).__name__})" if said else ""
            raise BusError(f"cannot connect to NATS at {options.url} within {wait:g}s{cause}") from None
        except Exception as e:  # noqa: BLE001 - any failure to connect is reported the same way
            raise BusError(f"cannot connect to NATS at {options.url}: {e or type(e).__name__}") from None
        too_old = _too_old(nc)
        if too_old:
            await nc.close()
            raise BusError(too_old)
        bus = cls(nc, options)
        holder.append(bus)
        return bus

    @property
    def connected(self) -> bool:
        return bool(self.nc.is_connected)

    @property
    def max_payload(self) -> int:
        return int(self.nc.max_payload or 1024 * 1024)

    async def close(self) -> None:
        self._closing = True
        await self._publisher.close()
        for s in self._subs:
            undirect(self.nc, s._id)
            await unsubscribe_quietly(s)
        self._subs.clear()
        if not self.nc.is_closed:
            try:
                await self.nc.flush(timeout=2)
            except Exception:  # noqa: BLE001
                pass
            await self.nc.close()

    async def flush(self, timeout: float = 5.0) -> None:
        """The server has every command written so far (a SUB just made, an UNSUB, a publish).  nats-py's
        ``flush()`` writes its PING straight to the socket, ahead of commands still in its pending buffer, so
        its PONG could come back before a SUB just made was registered (and messages published meanwhile were
        lost: `agentcheck`'s probe subscribes, flushes, then asks for results); the buffer is written first."""
        flush_pending = getattr(self.nc, "_flush_pending", None)
        if flush_pending is not None and getattr(self.nc, "is_connected", False):
            await flush_pending(force_flush=True)
        await self.nc.flush(timeout=timeout)

    # -- the write fence and the lease ---------------------------------------------------------------------------
    @property
    def fence(self) -> Callable[[], bool] | None:
        """Asked before every write to a stream (publish, purge, delete); a write it refuses fails with
        `publish.FENCED` and reaches no server.  A scheduler sets it to its leadership
        (`busched.scheduler.election`): a standby, or a leader whose lease may have lapsed, writes nothing."""
        return self._publisher.fence

    @fence.setter
    def fence(self, value: Callable[[], bool] | None) -> None:
        self._publisher.fence = value

    @property
    def write_condition(self) -> tuple[str, int] | None:
        """(subject, sequence): every state-stream write without a condition of its own (podgroup statuses) is
        stored only while that subject's last sequence is this one; the server refuses it otherwise (a
        conflict).  A leader sets it to its own epoch's message (docs/bus.md, "Leader election")."""
        return self._publisher.condition

    @write_condition.setter
    def write_condition(self, value: tuple[str, int] | None) -> None:
        self._publisher.condition = value

    def may_write(self) -> bool:
        return self._publisher.may_write()

    def lease(self, *, shard: str, holder: str, duration: float, clock: Callable[[], float],
              storage: str = "file", replicas: int = 1) -> lease_mod.Lease:
        """A shard's lease as ``holder`` contends for it (`busched.bus.lease`)."""
        return lease_mod.Lease(self.js, shard=shard, holder=holder, duration=duration, clock=clock,
                               storage=storage, replicas=replicas)

    def lease_keeper(self, lease: lease_mod.Lease) -> Any:
        """A keeper that renews ``lease`` from its own thread and connection (`busched.bus.lease_keeper`);
        None when this bus was not connected from options (the lease is then renewed on the event loop)."""
        if self.options is None:
            return None
        from busched.bus.lease_keeper import Keeper

        return Keeper(self.options, lease)

    async def read_leases(self) -> list[lease_mod.LeaseState]:
        """Every shard's lease, as `busched get scheduler` shows them."""
        return await lease_mod.read_leases(self.js)

    # -- streams ---------------------------------------------------------------------------------------------------
    async def ensure_streams(self, settings: StreamSettings | None = None, *, history: bool | None = None) -> None:
        """Create the state and decision streams unless they exist (an existing stream is left as configured,
        but for raising its replicas); the history streams too with ``history`` (default: given ``settings``)."""
        await ensure_streams(self.js, settings, history=history)

    async def allow_atomic(self) -> None:
        """The state stream takes atomic batches (`busched.bus.streams.allow_atomic`), or `BusError`."""
        await allow_atomic(self.js)

    async def stream_last_seq(self, stream: str) -> int:
        return await stream_last_seq(self.js, stream)

    # -- the state checkpoint (busched.bus.checkpoints, busched.scheduler.checkpoint) --------------------------------
    async def checkpoint_facts(self) -> checkpoints.StreamFacts:
        """The state stream's creation time, first and last sequences, messages and subjects."""
        return await checkpoints.stream_facts(self.nc)

    async def checkpoint_subjects(self) -> set[str]:
        """Every subject the state stream holds a message on."""
        return await checkpoints.stream_subjects(self.nc)

    async def checkpoint_read(self, start: int, timeout: float = 300.0) -> list[tuple[str, int, bytes]]:
        """The state stream from sequence ``start`` (0: the last message of every subject), until nothing is
        pending (`busched.bus.checkpoints.read_since`)."""
        return await checkpoints.read_since(self.js, start, timeout=timeout)

    async def checkpoint_get(self, name: str) -> bytes | None:
        """The stored checkpoint ``name``, None when there is none."""
        return await checkpoints.get_object(self.js, name)

    async def checkpoint_put(self, name: str, data: bytes, *, storage: str = "file", replicas: int = 1) -> bool:
        """Store checkpoint ``name`` (in chunks: any size); False when this process may not write now."""
        if not self.may_write():
            return False
        await checkpoints.put_object(self.js, name, data, storage=storage, replicas=replicas)
        return True

    # -- publishing ------------------------------------------------------------------------------------------------
    async def publish(self, subject: str, msg: Msg | bytes, *, msg_id: str | None = None,
                      expected: int | None = None, timeout: float = 5.0) -> Ack:
        """Publish one message to a stream; ``expected`` makes it conditional (see `publish_all`)."""
        return await self._publisher.publish(subject, msg, msg_id=msg_id, expected=expected, timeout=timeout)

    async def publish_all(self, items: Iterable[tuple[Any, ...]], timeout: float = 10.0) -> list[Ack]:
        """Publish many messages with their acknowledgements in flight together; one `Ack` per message, in order.

        Each item is ``(subject, msg, msg_id)`` or ``(subject, msg, msg_id, expected)``: with ``expected``
        (an int) the write is conditional on the subject's last stream sequence being exactly that (0: the
        subject is empty); a lost condition comes back as an `Ack` with ``conflict`` set.

        Pipelined: every message is written to the connection first (flushed together), and the
        stream's acknowledgements come back on one reply subscription of this bus, decoded with
        msgspec.  A message not acknowledged within ``timeout`` gets an `Ack` with an error.
        """
        return await self._publisher.publish_all(items, timeout)

    async def publish_batches(self, batches: Iterable[list[tuple[str, Any, int | None]]],
                              timeout: float = 10.0) -> list[Ack]:
        """Publish JetStream atomic batches (nats-server 2.12+, a stream with ``allow_atomic``): each batch, a list
        of ``(subject, msg, expected)``, is stored whole or not at all, its ``expected`` conditions checked
        against the stream as it was before the batch.  One `Ack` per batch, in order (the sequence of its last
        message; ``conflict`` set when a condition lost, without saying which)."""
        return await self._publisher.publish_batches(batches, timeout)

    async def publish_core(self, subject: str, msg: Msg | bytes) -> None:
        await self.nc.publish(subject, msg if isinstance(msg, bytes) else encode(msg))

    # -- the state stream -----------------------------------------------------------------------------------------
    async def watch_state(self, handler: StateHandler | None = None, *, subject: str = f"{S.STATE_PREFIX}.>",
                          batch_handler: StateBatchHandler | None = None, max_batch: int = 8192,
                          start: int = 0) -> StateWatch:
        """Deliver the latest message of every state subject, then every new one.

        Either ``handler(subject, data, seq)`` per message, or ``batch_handler(items)`` with lists of
        ``(subject, data, seq)`` in stream order: every message already received is handed over in one
        call (up to ``max_batch``) as soon as the event loop is free, so a catch-up of many thousands of
        messages costs one call per batch, while a lone live message is handled at once.  Returns at
        once; ``watch.caught_up`` is set when everything that was in the stream at the start has been
        handled.  ``start``: every message from that stream sequence on instead (what came before is known,
        e.g. from a checkpoint).
        """
        return await feeds.watch_state(self.js, handler, subject=subject, batch_handler=batch_handler,
                                       max_batch=max_batch, start=start)

    async def read_state(self, subject: str = f"{S.STATE_PREFIX}.>", timeout: float = 10.0) -> list[tuple[str, bytes]]:
        """The latest message of every matching state subject (a one-off read, e.g. for `busched delete`)."""
        return await reads.read_state(self.js, subject, timeout)

    async def last_per_subject(self, subject: str, timeout: float = 10.0) -> list[tuple[str, int, bytes]]:
        """The last message of every state subject matching ``subject`` (one filter), as
        ``(subject, stream sequence, data)``; an empty list at once when none matches.

        Read through a named ephemeral consumer created on the subject that names its filter
        (``$JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>``), so a server can confine a reader, e.g.
        an agent to its own nodes' results (`busched.bus.auth`), and delivered to this connection's
        inbox."""
        return await reads.last_per_subject(self.nc, self.js, subject, timeout)

    async def last_state(self, subject: str, *, direct: bool = False) -> tuple[int, bytes] | None:
        """The last message of one state subject, ``(stream sequence, data)``, or None if it has none
        (``direct``: through a direct get on the subject, see `reads.last_msg`)."""
        return await reads.last_msg(self.js, S.STATE_STREAM, subject, direct=direct)

    async def subject_history(self, subject: str, timeout: float = 10.0) -> list[tuple[int, bytes]]:
        """Every message the state stream still holds on one subject, oldest first."""
        return await reads.subject_history(self.js, subject, timeout)

    async def read_ordered(self, stream: str, subject: str, config: Any, *, until: int, timeout: float,
                           big: bool = False) -> list[tuple[str, int, bytes, Any]]:
        """The messages an ordered consumer on ``stream`` (filter ``subject``, start as ``config`` says)
        delivers up to stream sequence ``until``, as ``(subject, sequence, data, headers)``.  ``big``: room
        for a whole stream in the client's buffers."""
        return await reads.read_ordered(self.js, stream, subject, config, until=until, timeout=timeout, big=big)

    async def purge_state(self, subject: str, before_seq: int | None = None) -> bool:
        """Remove a state subject's messages (those below ``before_seq`` only, when given): stream hygiene
        once the object they describe is gone."""
        if not self.may_write():
            return False
        return await reads.purge_state(self.js, subject, before_seq, may_write=self.may_write)

    # -- events ----------------------------------------------------------------------------------------------------
    async def watch_events(self, handler: Callable[[Any], None], *,
                           subject: str = f"{S.EVENT_PREFIX}.>") -> events.EventWatch:
        """Every event series the events stream holds on ``subject``, then each new or updated one
        (`busched.bus.events`)."""
        return await events.watch_events(self.js, handler, subject=subject)

    async def last_event(self, subject: str) -> bytes | None:
        """The latest message of one event series (its subject), or None if the stream holds none."""
        last = await reads.last_msg(self.js, S.EVENT_STREAM, subject)
        return last[1] if last is not None else None

    # -- decisions -------------------------------------------------------------------------------------------------
    async def last_decision(self, subject: str) -> tuple[int, bytes] | None:
        return await reads.last_msg(self.js, S.DECISION_STREAM, subject)

    async def consumer_delivered(self, consumer: str) -> int | None:
        """The highest decision-stream sequence a durable consumer has delivered: 0 when the consumer does not
        exist, None when it cannot be told (so nothing may be concluded)."""
        return await reads.consumer_delivered(self.js, consumer)

    async def delete_decision(self, seq: int) -> bool | None:
        """`reads.delete_decision`; None (nothing deleted, the outcome unknown) from a deposed writer."""
        if not self.may_write():
            return None
        return await reads.delete_decision(self.js, seq)

    async def decision_feed(self, node: str | list[str], *, ack_wait: float = 30.0) -> DecisionFeed:
        """A `DecisionFeed` on a durable consumer of the decision stream, created unless it exists.

        For one node: ``agent-<node>``, filtered on that node's decisions, delivering everything on the
        stream for it (what was decided while its agent was away).  For several nodes (one agent
        serving a fleet): ``agents-<n>-<digest>`` (`subjects.fleet_consumer`), filtered on each node's
        decisions; one consumer instead of one per node, which the server serves at a fraction of the
        cost (it does work for every consumer on every message).  A fleet's consumer that does not
        exist yet starts with the decisions published from then on: the same set of nodes finds its
        consumer again after a restart, while a new set does not replay decisions another consumer
        already acknowledged (a bind decided while no consumer existed is released by its lease).
        """
        return await feeds.open_decision_feed(self.nc, self.js, node, ack_wait=ack_wait)

    # -- core NATS -------------------------------------------------------------------------------------------------
    async def subscribe(self, subject: str, handler: Callable[[str, bytes], None]) -> Any:
        """Core NATS messages on ``subject`` to ``handler(subject, data)``, straight from the parser
        (`busched.bus.direct`; a scheduler hears a heartbeat per node a second), without nats-py's `Msg`, queue
        and task each; in the order they come, those with headers too (the handler never sees headers); each
        with ``loop.call_soon``, after what earlier messages scheduled so (`direct.direct_subscription`)."""
        async def cb(m: Any) -> None:  # (when the connection's parser is not one `busched.bus.direct` knows)
            try:
                handler(m.subject, m.data)
            except Exception:  # noqa: BLE001
                log.exception("handler failed on %s", m.subject)

        sub = await self.nc.subscribe(subject, cb=cb, pending_msgs_limit=1_000_000)
        direct_subscription(self.nc, sub, handler)
        self._subs.append(sub)
        return sub

    async def serve(self, subject: str, handler: Callable[[bytes], Awaitable[bytes]]) -> Any:
        async def cb(m: Any) -> None:
            try:
                reply = await handler(m.data)
            except Exception as e:  # noqa: BLE001
                log.exception("request on %s failed", subject)
                reply = encode(GetReply(error=f"{type(e).__name__}: {e}"))
            if m.reply:
                await m.respond(reply)

        sub = await self.nc.subscribe(subject, cb=cb)
        self._subs.append(sub)
        return sub

    async def get_view(self, kind: str, *, spec: bool = False, timeout: float = 5.0) -> list[dict[str, Any]]:
        """Every row of ``kind`` the running scheduler shows (`busched get`), a page at a time; ``spec``: each
        with its object's spec (``GetRequest.spec``).  A scheduler's error is raised as RuntimeError."""
        items: list[dict[str, Any]] = []
        offset: int | None = 0
        while offset is not None:
            reply = decode(await self.request(S.API_GET, GetRequest(kind=kind, offset=offset, spec=spec),
                                              timeout=timeout))
            if not isinstance(reply, GetReply):
                raise RuntimeError(f"unexpected reply {type(reply).__name__}")
            if reply.error:
                raise RuntimeError(reply.error)
            items.extend(reply.items)
            offset = reply.next
        return items

    async def request(self, subject: str, msg: Msg | bytes, timeout: float = 5.0) -> bytes:
        try:
            r = await self.nc.request(subject, msg if isinstance(msg, bytes) else encode(msg), timeout=timeout)
        except nats.errors.NoRespondersError:
            raise BusError(f"no scheduler answers on {subject}: is `busched run` running?") from None
        except (nats.errors.TimeoutError, asyncio.TimeoutError):
            raise BusError(f"no answer on {subject} within {timeout}s") from None
        return bytes(r.data)
