"""The state stream's whole history kept in JetStream (docs/bus.md, "History"; issue 11, item 5).

With history on, the scheduler keeps ``BUSCHED_STATE_HISTORY``, a stream that sources ``BUSCHED_STATE``
for the history duration, so neither the state stream's 16 messages per subject nor the purge of deleted
objects reach it.  A live run with the default state stream (16 per subject, purges on) in which tasks
are deleted and one task is updated 20 times: `busched replay --nats` reads the copy and every cycle is
identical, none incomplete; the state stream alone (the copy absent) is incomplete and differs.
"""

from __future__ import annotations

import asyncio
import json

from busched.agent import fleet_nodes
from busched.api.objects import ClusterSpec, JobSpec, QueueSpec, TaskSpec
from busched.bus import history as H
from busched.bus import subjects as S
from busched.bus.apply import apply_cluster
from busched.bus.client import StreamSettings
from busched.cli.main import main
from busched.replay import decode_records, replay
from tests.nats_fixture import held_by_node, wait_until
from tests.replay.test_replay import jobs

STREAMS = StreamSettings(storage="memory")  # state_history 16 per subject, history on (7 days)


def running(*agents) -> set[str]:  # noqa: ANN002
    return {k for tasks in held_by_node(*agents).values() for k in tasks}


def churn(i: int) -> ClusterSpec:
    """One more version of ``p/churn-0-0``: too big to place, so it stays pending while it changes."""
    return ClusterSpec(jobs=[JobSpec(name="churn-0", namespace="p", min_member=1)],
                       tasks=[TaskSpec(name="churn-0-0", namespace="p", job="churn-0", annotations={"v": str(i)},
                                       requests={"cpu": "100", "memory": "1Gi"})])


async def cli_json(capsys, argv: list[str]) -> tuple[int, dict]:  # noqa: ANN001
    capsys.readouterr()
    code = await asyncio.to_thread(main, argv)
    return code, json.loads(capsys.readouterr().out.strip().splitlines()[-1])


async def test_replay_reads_the_state_history_copy(harness, capsys):
    sched = await harness.scheduler(streams=STREAMS)
    agent = await harness.agent(fleet_nodes(4, cpu="8", memory="32Gi"))
    bus = await harness.bus()
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="default")]))
    # tasks that will be deleted while running: the scheduler purges their subjects once settled
    doomed = jobs("doomed", 4, 2, "")
    await apply_cluster(bus, doomed)
    await wait_until(lambda: {f"p/doomed-{j}-{i}" for j in range(4) for i in range(2)} <= running(agent),
                     timeout=30, what="the doomed tasks running")
    # a task updated 20 times (more than the 16 the state stream keeps per subject)
    for i in range(20):
        await apply_cluster(bus, churn(i))
    await apply_cluster(bus, jobs("short", 6, 4, "", duration="0.2"))
    await wait_until(lambda: sum(sched.task_status(k) == "Succeeded" for k in sched.specs["task"]) == 24,
                     timeout=60, what="the short tasks done")
    await apply_cluster(bus, doomed, delete=True)
    await wait_until(lambda: not any(k.startswith("p/doomed-") for k in running(agent)), timeout=30,
                     what="the doomed tasks stopped")
    await apply_cluster(bus, jobs("late", 4, 4, "", duration="0.2"))
    await wait_until(lambda: sum(sched.task_status(k) == "Succeeded" for k in sched.specs["task"]) == 40,
                     timeout=60, what="the late tasks done")

    async def purged() -> bool:
        st = await H.read_stream(bus, S.STATE_STREAM)
        return not any(".doomed-" in subj and ".task." in subj for subj, _, _ in st)

    await wait_until(purged, timeout=30, what="the deleted tasks' subjects purged from the state stream")
    # kept: the scheduler's last writes (records, podgroup statuses) come from its running loop in real time and
    # nothing public tells when they are done; `last` must be the stream's final sequence
    await asyncio.sleep(0.3)
    last = await bus.stream_last_seq(S.STATE_STREAM)

    async def copied() -> bool:
        items = await H.read_stream(bus, H.STATE_HISTORY_STREAM)
        return bool(items) and H.source_sequence(await _headers(bus, items[-1][1]), S.STATE_STREAM) >= last

    await wait_until(copied, timeout=10, what="the copy caught up")

    # the copy: the stream's configuration, its header, every sequence of the state stream
    info = await bus.js.stream_info(H.STATE_HISTORY_STREAM)
    assert not info.config.subjects and [s.name for s in info.config.sources] == [S.STATE_STREAM]
    assert info.config.max_age == STREAMS.history_max_age and info.config.max_msgs_per_subject in (None, -1, 0)
    hdr = (await _header_values(bus, 1))
    assert hdr.split()[0] == S.STATE_STREAM and int(hdr.split()[1]) >= 1
    state_only = await H.read_stream(bus, S.STATE_STREAM)
    full, source = await H.read_state(bus)
    assert source == H.STATE_HISTORY_STREAM
    seqs = [q for _, q, _ in full]
    assert seqs == list(range(1, seqs[-1] + 1)) and seqs[-1] >= last, "every state message, in order"
    assert {q for _, q, _ in state_only} < set(seqs)
    assert [(subj, d) for subj, q, d in full if q in {q2 for _, q2, _ in state_only}] == \
        [(subj, d) for subj, _, d in state_only], "the copy holds the same messages at the same sequences"
    churned = [q for subj, q, _ in full if subj.endswith(".churn-0-0") and ".task." in subj]
    assert len(churned) == 20 and len([1 for subj, _, _ in state_only if subj == full[seqs.index(churned[0])][0]]) == 16
    assert any(".doomed-" in subj and ".task." in subj for subj, _, _ in full)

    hist = await H.read_stream(bus, H.HISTORY_STREAM)
    records = decode_records(d for _, _, d in hist)
    assert len(records) >= 5 and sum(len(r.binds) for r in records) >= 40
    # reading the copy: every cycle identical, none incomplete
    res = await replay(full, records)
    assert res.cycles == len(records) and res.identical == res.cycles and res.incomplete == 0, res.diffs[:3]
    # the state stream alone: history is missing below cycles, and the deleted tasks' binds are not replayed
    alone = await replay(state_only, records)
    assert alone.incomplete > 0 and alone.different > 0, alone.as_dict()

    # the command line reads the copy...
    code, out = await cli_json(capsys, ["replay", "--nats", harness.url, "--json"])
    assert code == 0 and out["source"] == H.STATE_HISTORY_STREAM
    assert out["cycles"] == len(records) and out["identical"] == out["cycles"] and out["incomplete"] == 0
    # ...and without it (deleted), the state stream, as before: incomplete and different
    await bus.js.delete_stream(H.STATE_HISTORY_STREAM)
    code, out = await cli_json(capsys, ["replay", "--nats", harness.url, "--json"])
    assert code == 1 and out["source"] == S.STATE_STREAM and out["incomplete"] > 0 and out["different"] > 0


async def _headers(bus, seq: int) -> dict:  # noqa: ANN001
    return (await bus.js.get_msg(H.STATE_HISTORY_STREAM, seq)).headers or {}


async def _header_values(bus, seq: int) -> str:  # noqa: ANN001
    return (await _headers(bus, seq))[H.SOURCE_HEADER]


async def test_record_reads_the_copy(harness, tmp_path):
    sched = await harness.scheduler(streams=STREAMS)
    agent = await harness.agent(fleet_nodes(2, cpu="8", memory="32Gi"))
    bus = await harness.bus()
    await apply_cluster(bus, ClusterSpec(queues=[QueueSpec(name="default")]))
    for i in range(20):
        await apply_cluster(bus, churn(i))
    await apply_cluster(bus, jobs("short", 4, 2, "", duration="0.1"))
    await wait_until(lambda: sum(sched.task_status(k) == "Succeeded" for k in sched.specs["task"]) == 8,
                     timeout=60, what="the short tasks done")
    await asyncio.sleep(0.3)  # kept: the scheduler's last writes land when its loop makes them (as above)
    last = await bus.stream_last_seq(S.STATE_STREAM)
    f = tmp_path / "run.bsrec"
    assert await asyncio.to_thread(main, ["record", "--nats", harness.url, "--out", str(f),
                                          "--until-idle", "0.3", "--poll", "0.1"]) == 0
    from busched.replay.file import read_file

    fstate, fhist = read_file(str(f))
    seqs = [q for _, q, _ in fstate]
    assert seqs[: last] == list(range(1, last + 1)), "every state message at its state-stream sequence"
    res = await replay(fstate, decode_records(fhist))
    assert res.cycles >= 1 and res.identical == res.cycles and res.incomplete == 0
    assert running(agent) is not None
