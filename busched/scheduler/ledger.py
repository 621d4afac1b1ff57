"""Node ledgers: what keeps two sharded schedulers from over-committing one node (docs/bus.md, "Shards").

A task's binding record is a conditional write on the task's own subject, so two schedulers never bind
one task twice; but two *different* tasks placed on one node by two schedulers do not meet there, and in
soft sharding mode (or with overlapping shards) both may have counted the same free room.  So a sharded
scheduler writes the binding records of the tasks it places on a node together with one message on the
node's ledger subject (``busched.state.ledger.<node>``), as one JetStream atomic batch (nats-server 2.12+),
the ledger message on condition that the subject is still at the sequence it had when the cycle's
snapshot was taken.  The records come first in the batch, so whoever has read a node's ledger message has
read the records it covers: a view of the node taken at ledger sequence L counts every bind written under
L.  Of two schedulers placing on one node from the same view, only one batch is stored; the other's binds
are not stored at all (no record, no decision), its tasks stay Pending, and its next cycle decides again
from a view that has the winner's binds.

`NodeLedgers` keeps the last ledger sequence seen per node (the state feed and our own acknowledgements),
the view a cycle decided on (`snapshot_taken`, called right after the snapshot, with nothing handled in
between), and writes a cycle's binds as one batch per node (`write`), in rounds when a node takes more
binds than one batch holds, each round conditional on the one before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

import msgspec

from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.publish import MAX_BATCH, Ack
from busched.bus.wire import MAX_STATE_MESSAGE, cut

__all__ = ["NodeLedgers", "BatchBus"]

# what a ledger message's readers take (`busched.bus.messages.NodeLedger`, and the scheduler's ``max_event_bytes``,
# 256 KiB unless `busched run --max-event-bytes` says less, which the other shards' feeds hold every state message
# to): a ledger they refuse is never heard (`NodeLedgers.heard`), and every later write on the node's ledger would
# lose its condition.  ``tasks`` is informational: keys longer than its bound are cut, and it names the tasks of a
# batch only as far as the message stays within ``max_event_bytes`` (at its floor, `write_bounds.MIN_EVENT_BYTES`,
# a ledger with node, writer and shard at 253 characters of 6 bytes each still fits, with no tasks)
_MAX_NAME = 253
_MAX_TASK = 600
_TASKS_FRAME = len(',"tasks":')  # what a ledger's ``tasks`` adds to it but its JSON list
_JSON = msgspec.json.Encoder()


def _ledger(node: str, writer: str, shard: str, keys: list[str], max_bytes: int) -> m.NodeLedger:
    """The ledger of ``node`` naming ``keys`` (each cut to its bound), as many as fit in ``max_bytes`` encoded:
    measured whole once (the usual case: all fit), cut to the room the rest leaves only when they do not."""
    keys = [cut(key, _MAX_TASK) if len(key) > _MAX_TASK else key for key in keys]
    ledger = m.NodeLedger(node=node, writer=writer, shard=shard, tasks=keys)
    if len(m.encode(ledger)) > max_bytes:
        ledger.tasks = []
        ledger.tasks = _tasks(keys, max_bytes - len(m.encode(ledger)) - _TASKS_FRAME)
    return ledger


def _tasks(keys: list[str], room: int) -> list[str]:
    """As many of ``keys`` as a JSON list of at most ``room`` bytes holds."""
    out: list[str] = []
    used = 1  # "[" and "]" less the comma the first key does not take
    for key in keys:
        used += len(_JSON.encode(key)) + 1
        if used > room:
            break
        out.append(key)
    return out


class BatchBus(Protocol):
    """What the ledgers need of `busched.bus.client.Bus`."""

    async def publish_batches(self, batches: Any, timeout: float = 10.0) -> list[Ack]: ...

    async def last_state(self, subject: str) -> tuple[int, bytes] | None: ...


class NodeLedgers:
    """The node ledgers of one sharded scheduler (``shard``: its NodeShard's name; ``writer``: its boot;
    ``max_bytes``: the largest state message its readers take, the scheduler's ``max_event_bytes``)."""

    def __init__(self, shard: str, writer: str, on_dropped: Callable[[int], None] | None = None,
                 max_bytes: int = MAX_STATE_MESSAGE) -> None:
        # (informational in the ledger message, and bounded there: cut to what its readers take)
        self.shard = cut(shard, _MAX_NAME)
        self.writer = cut(writer, _MAX_NAME)
        self.max_bytes = max_bytes
        # told how many task names a written ledger left out of its ``tasks``, once per ledger stored
        # (busched_writes_cut_total{message="ledger"}; a batch tried again is not counted again)
        self.on_dropped = on_dropped
        self.seen: dict[str, int] = {}  # node -> the last ledger sequence known (heard on the feed or acknowledged)
        self.view: dict[str, int] = {}  # node -> the ledger sequence the current cycle's snapshot stands on
        self.lost = 0  # batches refused because a node's ledger had moved (or a task's record), for tests and logs

    def heard(self, node: str, seq: int) -> None:
        """A ledger message of ``node`` is on the stream at ``seq`` (any writer's)."""
        if seq > self.seen.get(node, 0):
            self.seen[node] = seq

    def snapshot_taken(self) -> None:
        """The cycle's snapshot was just taken: its binds are written on condition of the ledgers as of now."""
        self.view = dict(self.seen)

    async def write(self, bus: BatchBus, items: list[tuple[str, str, str, m.Msg, int]]) -> list[Ack]:
        """Write binding records ``(task, node, subject, record, expected)``: those of one node with its ledger
        message, in atomic batches.  One `Ack` per item, in order: a stored record's own sequence, or its
        batch's failure (``conflict`` when a condition lost: the node's ledger or one task's record moved)."""
        acks: list[Ack | None] = [None] * len(items)
        chunks: dict[str, list[list[int]]] = {}
        for i, item in enumerate(items):
            node_chunks = chunks.setdefault(item[1], [[]])
            if len(node_chunks[-1]) >= MAX_BATCH - 1:  # room for the ledger message
                node_chunks.append([])
            node_chunks[-1].append(i)
        rounds = max((len(c) for c in chunks.values()), default=0)
        for r in range(rounds):
            # a node goes on only while its earlier rounds were stored
            parts = [(node, c[r]) for node, c in chunks.items()
                     if r < len(c) and (r == 0 or (acks[c[r - 1][0]] or Ack(error="?")).ok)]
            # several nodes to a batch (a batch costs the server about as much as a few hundred messages) ...
            shared, alone = await self._publish(bus, items, self._pack(parts), acks)
            # ... a batch that lost a condition is tried again node by node, so only the nodes that moved lose,
            # not the others that shared their batch ...
            alone += (await self._publish(bus, items, [[p] for p in shared], acks))[1]
            # ... and a node whose ledger did not move lost to a task another scheduler bound: its other tasks
            # are tried once more without the tasks that moved
            _, failed = await self._publish(bus, items, await self._without_moved(bus, items, alone, acks), acks)
            for _, idx in failed:
                self._fail(idx, acks, Ack(error="APIError: wrong last sequence", conflict=True))
        for c in chunks.values():  # the rounds of a node after one that failed: that failure
            for prev, chunk in zip(c, c[1:]):
                for i in chunk:
                    if acks[i] is None:
                        acks[i] = acks[prev[0]]
        return [a if a is not None else Ack(error="not written") for a in acks]

    async def _without_moved(self, bus: BatchBus, items: list[tuple[str, str, str, m.Msg, int]],
                             failed: list[tuple[str, list[int]]],
                             acks: list[Ack | None]) -> list[list[tuple[str, list[int]]]]:
        """Of node chunks that lost a condition alone: a node whose ledger moved is lost (its acks a conflict);
        for the others, the tasks whose binding subject moved are lost, and the rest is returned, one batch per
        node, to try again."""
        if not failed:
            return []
        subjects = [[S.ledger_subject(node)] + [items[i][2] for i in idx] for node, idx in failed]
        found = await asyncio.gather(*(self._last_seq(bus, subj) for subjs in subjects for subj in subjs))
        out: list[list[tuple[str, list[int]]]] = []
        k = 0
        conflict = Ack(error="APIError: wrong last sequence", conflict=True)
        for node, idx in failed:
            ledger, tasks = found[k], found[k + 1:k + 1 + len(idx)]
            k += 1 + len(idx)
            if ledger != self.view.get(node, 0):
                self.lost += 1
                self._fail(idx, acks, conflict)
                continue
            moved = [i for i, seq in zip(idx, tasks) if seq != items[i][4]]
            self._fail(moved, acks, conflict)
            gone = set(moved)
            rest = [i for i in idx if i not in gone]
            if rest and moved:
                out.append([(node, rest)])
            else:
                self._fail(rest, acks, conflict)
        return out

    @staticmethod
    async def _last_seq(bus: BatchBus, subject: str) -> int:
        """The subject's last sequence (0: none); -1 when it cannot be read (never equal to a condition)."""
        try:
            found = await bus.last_state(subject)
        except Exception:  # noqa: BLE001
            return -1
        return found[0] if found is not None else 0

    @staticmethod
    def _fail(idx: list[int], acks: list[Ack | None], ack: Ack) -> None:
        for i in idx:
            if acks[i] is None:
                acks[i] = ack

    @staticmethod
    def _pack(parts: list[tuple[str, list[int]]]) -> list[list[tuple[str, list[int]]]]:
        """Node chunks into batches of at most `MAX_BATCH` messages (each chunk's records and its ledger)."""
        out: list[list[tuple[str, list[int]]]] = []
        size = MAX_BATCH
        for part in parts:
            if size + len(part[1]) + 1 > MAX_BATCH:
                out.append([])
                size = 0
            out[-1].append(part)
            size += len(part[1]) + 1
        return out

    async def _publish(self, bus: BatchBus, items: list[tuple[str, str, str, m.Msg, int]],
                       batches: list[list[tuple[str, list[int]]]],
                       acks: list[Ack | None]) -> tuple[list[tuple[str, list[int]]], list[tuple[str, list[int]]]]:
        """Publish ``batches`` (of node chunks), fill in the acks of the stored ones and of those that failed for
        another reason than a lost condition; the chunks of the batches that lost a condition, those that
        shared their batch with other nodes and those alone in theirs."""
        if not batches:
            return [], []
        messages: list[list[tuple[str, Any, int | None]]] = []
        dropped: list[int] = []  # per batch, the task names its ledgers left out
        for batch in batches:
            msgs: list[tuple[str, Any, int | None]] = []
            left_out = 0
            for node, idx in batch:
                msgs += [(items[i][2], items[i][3], items[i][4]) for i in idx]
                ledger = _ledger(node, self.writer, self.shard, [items[i][0] for i in idx], self.max_bytes)
                left_out += len(idx) - len(ledger.tasks)
                msgs.append((S.ledger_subject(node), ledger, self.view.get(node, 0)))
            messages.append(msgs)
            dropped.append(left_out)
        shared: list[tuple[str, list[int]]] = []
        alone: list[tuple[str, list[int]]] = []
        for batch, msgs, left_out, ack in zip(batches, messages, dropped, await bus.publish_batches(messages)):
            if ack.ok:
                if left_out and self.on_dropped is not None:
                    self.on_dropped(left_out)
                # stored at consecutive sequences, the batch's last message acknowledged
                seq = ack.seq - len(msgs)
                for node, idx in batch:
                    for i in idx:
                        seq += 1
                        acks[i] = Ack(seq=seq)
                    seq += 1  # the node's ledger message
                    self.heard(node, seq)
                    self.view[node] = seq  # a later round of this cycle follows on from ours
            elif ack.conflict:
                (shared if len(batch) > 1 else alone).extend(batch)
            else:
                for _, idx in batch:
                    self._fail(idx, acks, ack)
        return shared, alone
