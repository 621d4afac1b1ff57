"""A node ledger's size at every limit near the floor (`busched.scheduler.ledger`): it fits its limit exactly and
one more name would not; all names kept when they fit exactly.  From a review: off-by-one mutants of the size
arithmetic (each able to write a ledger 1 byte over the limit, which the other shard refuses) lived before."""

from __future__ import annotations

import asyncio

from busched.bus import messages as m
from busched.scheduler.ledger import NodeLedgers
from busched.scheduler.write_bounds import MIN_EVENT_BYTES
from tests.scheduler.test_ledger_bounds import _Bus, _items


def test_a_ledger_fits_its_limit_exactly_at_every_limit() -> None:
    """Every limit over a span of one key's size: the ledger is within it, and one more name would not be."""
    items = _items("n1", 300, "w" * 56)
    for limit in range(MIN_EVENT_BYTES, MIN_EVENT_BYTES + 80):
        ledgers = NodeLedgers("s1", "boot", max_bytes=limit)
        bus = _Bus(lambda ledgers: False)
        ledgers.snapshot_taken()
        asyncio.run(ledgers.write(bus, items))  # type: ignore[arg-type]
        (ledger,) = bus.written
        assert len(m.encode(ledger)) <= limit, limit
        more = m.NodeLedger(node=ledger.node, writer=ledger.writer, shard=ledger.shard,
                            tasks=[k for k, *_ in items[:len(ledger.tasks) + 1]])
        assert len(m.encode(more)) > limit, limit


def test_all_names_kept_when_they_fit_exactly() -> None:
    items = _items("n1", 3, "w" * 56)
    full = m.NodeLedger(node="n1", writer="boot", shard="s1", tasks=[k for k, *_ in items])
    for limit, kept in ((len(m.encode(full)), 3), (len(m.encode(full)) - 1, 2)):
        ledgers = NodeLedgers("s1", "boot", max_bytes=limit)
        bus = _Bus(lambda ledgers: False)
        ledgers.snapshot_taken()
        asyncio.run(ledgers.write(bus, items))  # type: ignore[arg-type]
        assert len(bus.written[0].tasks) == kept, limit
