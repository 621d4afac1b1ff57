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

from typing import Any, Protocol

from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.publish import MAX_BATCH, Ack

__all__ = ["NodeLedgers", "BatchBus"]


class BatchBus(Protocol):
    """What the ledgers need of `busched.bus.client.Bus`."""

    async def publish_batches(self, batches: Any, timeout: float = 10.0) -> list[Ack]: ...


class NodeLedgers:
    """The node ledgers of one sharded scheduler (``shard``: its NodeShard's name; ``writer``: its boot)."""

    def __init__(self, shard: str, writer: str) -> None:
        self.shard = shard
        self.writer = writer
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
        message, as atomic batches.  One `Ack` per item, in order: a stored record's own sequence, or its
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
            owners: list[tuple[str, list[int]]] = []
            batches: list[list[tuple[str, Any, int | None]]] = []
            for node, node_chunks in chunks.items():
                if r >= len(node_chunks) or acks[node_chunks[r][0]] is not None:
                    continue  # done, or an earlier round of this node failed
                idx = node_chunks[r]
                ledger = m.NodeLedger(node=node, writer=self.writer, shard=self.shard,
                                      tasks=[items[i][0] for i in idx])
                batch: list[tuple[str, Any, int | None]] = [(items[i][2], items[i][3], items[i][4]) for i in idx]
                batch.append((S.ledger_subject(node), ledger, self.view.get(node, 0)))
                owners.append((node, idx))
                batches.append(batch)
            results = await bus.publish_batches(batches)
            for (node, idx), ack in zip(owners, results):
                if ack.ok:
                    # the batch's messages are stored at consecutive sequences, the ledger's last
                    self.heard(node, ack.seq)
                    self.view[node] = ack.seq  # a later round of this cycle follows on from ours
                    first = ack.seq - len(idx)
                    for n, i in enumerate(idx):
                        acks[i] = Ack(seq=first + n)
                    continue
                self.lost += ack.conflict
                for later in chunks[node][r:]:
                    for i in later:
                        acks[i] = ack
        return [a if a is not None else Ack(error="not written") for a in acks]
