"""Client CPU per state message received by a state watch, nats-py's path against the parser's (busched/bus/ordered.py).

A fresh nats-server gets ``N`` state messages (each its own subject, ~250 bytes like a task's), then watches
catch up with them in turn, alternating ``direct_receipt`` off and on; each prints the process's CPU time
from the subscription to ``caught_up`` divided by the messages handed over (the handler only keeps them).
Usage: ``python scripts/micro_state_receipt.py [N] [rounds] [noparse]`` (``noparse``: nats-py's own parse
for every message, as before busched/bus/parse.py).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from busched.bus import Bus
from busched.bus import subjects as S
from busched.bus.feeds import watch_state
from busched.bus.server import NatsServer


async def main(n: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        srv = NatsServer(Path(d) / "nats", host="127.0.0.1", port=0)
        srv.start(timeout=10)
        try:
            bus = await Bus.connect(srv.url)
            await bus.ensure_streams()
            body = b'{"kind":"task","spec":{"name":"t","namespace":"bench","requests":{"cpu":"1","memory":"1Gi"}},' \
                   b'"version":1,"labels":{"a":"b"},"x":"' + b"y" * 120 + b'"}'
            for k in range(0, n, 5000):
                acks = await bus.publish_all((S.state_subject("task", f"bench/t{i}"), body, None)
                                             for i in range(k, min(n, k + 5000)))
                assert all(a.ok for a in acks)
            per: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(rounds):
                for mode in (False, True):
                    got: list[tuple[str, bytes, int]] = []
                    t0 = time.process_time()
                    w = await watch_state(bus.js, batch_handler=got.extend, direct_receipt=mode)
                    await asyncio.wait_for(w.caught_up.wait(), 120)
                    cpu = time.process_time() - t0
                    await w.stop()
                    assert len(got) == n, len(got)
                    per[mode].append(cpu / n * 1e6)
            for mode, xs in per.items():
                name = "parser (direct)" if mode else "nats-py Msg/queue/task"
                print(f"{name}: median {statistics.median(xs):.2f} us a message, all {[round(x, 2) for x in xs]}")
            await bus.close()
        finally:
            srv.stop()


if __name__ == "__main__":
    if "noparse" in sys.argv[3:]:
        from busched.bus import parse

        parse.install = lambda *a: False  # type: ignore[assignment]
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20000, int(sys.argv[2]) if len(sys.argv) > 2 else 5))
