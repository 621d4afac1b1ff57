"""A big catch-up read by a second process (busched.bus.bulk), on a real nats-server: the same messages
in the same order as the watch's own consumer, the watch then live, and a failed reader made good."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from busched.bus import subjects as S
from tests.nats_fixture import harness, nats_server, wait_until  # noqa: F401

N_SUBJECTS = 3000


def events(rounds: int = 3) -> list[tuple[str, bytes, None]]:
    """Every subject written ``rounds`` times, rounds interleaved, one subject deleted-and-rewritten
    style (its last value is from the first round): the catch-up must give each subject's last."""
    out = []
    for r in range(rounds):
        for i in range(N_SUBJECTS):
            if i % 7 == 0 and r > 0:
                continue  # these keep their first-round value
            out.append((S.state_subject("task", f"b/t{i}"), f'{{"r":{r},"i":{i}}}'.encode(), None))
    return out


async def publish(bus, items) -> None:
    for i in range(0, len(items), 2000):
        acks = await bus.publish_all(items[i:i + 2000])
        assert all(a.ok for a in acks)


async def catch_up(bus, **kw) -> tuple[list[tuple[str, bytes, int]], object]:
    got: list[tuple[str, bytes, int]] = []
    w = await bus.watch_state(batch_handler=got.extend, **kw)
    await asyncio.wait_for(w.caught_up.wait(), 60)
    return got, w


async def test_bulk_catch_up_delivers_what_the_watch_itself_would(harness):  # noqa: F811
    bus = await harness.bus()
    await bus.ensure_streams()
    await publish(bus, events())
    plain, w0 = await catch_up(bus)
    bulk, w1 = await catch_up(bus, bulk_min=1)
    await w0.stop()
    assert w0.bulk == 0 and w1.bulk == len(bulk) == N_SUBJECTS  # the second process read all of it
    assert bulk == plain  # subjects, payloads and sequences, in stream order
    last = {s: d for s, d, _ in plain}
    assert len(last) == N_SUBJECTS and last[S.state_subject("task", "b/t7")] == b'{"r":0,"i":7}'
    assert last[S.state_subject("task", "b/t8")] == b'{"r":2,"i":8}'
    # then the watch follows the stream itself: a new message arrives, once
    await publish(bus, [(S.state_subject("task", "b/new"), b"{}", None)])
    await wait_until(lambda: bulk[-1][0] == S.state_subject("task", "b/new"), what="the live message")
    await w1.narrow(S.followed_subjects())
    await publish(bus, [(S.state_subject("task", "b/later"), b"{}", None)])
    await wait_until(lambda: bulk[-1][0] == S.state_subject("task", "b/later"), what="the message after narrowing")
    seqs = [q for _, _, q in bulk]
    assert seqs == sorted(set(seqs))
    await w1.stop()


async def test_a_stream_shorter_than_the_threshold_is_read_in_process(harness):  # noqa: F811
    bus = await harness.bus()
    await bus.ensure_streams()
    await publish(bus, events(1)[:50])
    got, w = await catch_up(bus, bulk_min=51)
    assert len(got) == 50 and w.bulk == 0
    await w.stop()


async def test_a_reader_that_cannot_start_leaves_the_catch_up_to_the_watch(harness):  # noqa: F811
    bus = await harness.bus()
    await bus.ensure_streams()
    await publish(bus, events(2))
    plain, w0 = await catch_up(bus)
    await w0.stop()
    failing = [sys.executable, "-c", "import sys; sys.stderr.write('no reader here\\n'); sys.exit(3)"]
    got, w = await catch_up(bus, bulk_min=1, bulk_command=failing)
    assert w.bulk == 0 and got == plain
    await w.stop()


async def test_a_reader_that_dies_half_way_is_made_good_from_the_next_message(harness, tmp_path: Path):  # noqa: F811
    bus = await harness.bus()
    await bus.ensure_streams()
    await publish(bus, events(4))  # 3000 subjects, 4 rounds: more than one frame of the reader
    plain, w0 = await catch_up(bus)
    await w0.stop()
    # the real reader behind a wrapper that passes on its first frame only, then exits
    wrapper = tmp_path / "half.py"
    wrapper.write_text(
        "import struct, subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-m', 'busched.bus.bulk'], stdin=sys.stdin, stdout=subprocess.PIPE)\n"
        "head = p.stdout.read(4)\n"
        "body = p.stdout.read(struct.unpack('>I', head)[0])\n"
        "sys.stdout.buffer.write(head + body); sys.stdout.flush(); p.kill(); sys.exit(1)\n")
    got, w = await catch_up(bus, bulk_min=1, bulk_command=[sys.executable, str(wrapper)])
    assert 0 < w.bulk < len(got)  # some came from the reader, the rest from the watch itself
    # nothing is lost: every subject's last value, nothing twice, in stream order
    assert {s: d for s, d, _ in got} == {s: d for s, d, _ in plain}
    seqs = [q for _, _, q in got]
    assert seqs == sorted(set(seqs))
    await w.stop()


async def test_a_restarted_scheduler_knows_the_same_whichever_way_it_caught_up(harness):  # noqa: F811
    from busched.api.objects import ClusterSpec, JobSpec, QueueSpec, TaskSpec
    from busched.bus.apply import apply_cluster
    from busched.scheduler import Scheduler, SchedulerSettings

    bus = await harness.bus()
    await bus.ensure_streams()
    spec = ClusterSpec(queues=[QueueSpec(name="default")],
                       jobs=[JobSpec(name=f"j{j}", namespace="r", min_member=2) for j in range(40)],
                       tasks=[TaskSpec(name=f"j{j}-{i}", namespace="r", job=f"j{j}", requests={"cpu": "1"})
                              for j in range(40) for i in range(2)])
    await apply_cluster(bus, spec)
    await apply_cluster(bus, ClusterSpec(jobs=[JobSpec(name="j0", namespace="r", min_member=1)]))  # a newer j0
    known = []
    for bulk in (0, 1):
        s = Scheduler(await harness.bus(), None, SchedulerSettings(require_heartbeat=False, bulk_catchup=bulk))
        await s.start(timeout=60)
        known.append(({k: dict(v) for k, v in s.specs.items()}, dict(s.versions), s.watch.bulk))
        await s.stop()
    (specs0, versions0, bulk0), (specs1, versions1, bulk1) = known
    assert bulk0 == 0 and bulk1 > 0
    assert specs1 == specs0 and versions1 == versions0
    assert specs1["job"]["r/j0"].min_member == 1 and len(specs1["task"]) == 80
