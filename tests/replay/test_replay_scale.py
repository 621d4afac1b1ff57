"""Issue 11, "Done means": a recorded live run at scale replays identically (`busched bench replay`'s run).

Over a real nats-server with two agents in process: 2,000 short tasks in 20 waves (so at least 20
deciding cycles), binds refused by an agent in two waves, an agent whose heartbeats stop halfway (its
nodes declared lost), then the live nodes filled with long tasks and a high-priority gang that
preempts.  `busched replay` (in process and on the command line) reports every recorded cycle
identical; with binpack added (a what-if) some differ.  A cycle that ran with the lost nodes
unready exports as a scenario that passes its check.
"""

from __future__ import annotations

import asyncio
import json

from busched.bench import replay as B
from busched.cli.main import main
from busched.framework.config import load_config
from busched.replay import replay


async def test_a_live_run_of_two_thousand_tasks_replays_identically(nats_server, tmp_path, capsys):
    run = await B.record_run(nats_server.url, nodes=10, waves=20, tasks=2000)
    records = run["records"]
    assert run["tasks"] >= 2000
    assert len(records) >= 20
    assert sum(len(r.binds) for r in records) >= 2000
    assert sum(len(r.evicts) for r in records) >= B.GANG, "the gang preempted"
    assert len(run["refused"]) >= 20 and any(r.excl for r in records), "refused binds, and their exclusions recorded"
    assert any(set(run["lost"]) <= set(r.unready) for r in records), "the silent agent's nodes recorded unready"

    res = await replay(run["state"], records)
    print(json.dumps({k: v for k, v in res.as_dict().items() if k != "diffs"}))
    assert res.cycles == len(records) and res.incomplete == 0
    assert res.different == 0, res.diffs[:3]
    assert res.identical == res.cycles
    assert res.placed["replayed"] == res.placed["recorded"] and res.evicted["replayed"] == res.evicted["recorded"]

    other = await replay(run["state"], records, config=load_config(B.WHAT_IF))
    assert other.different > 0 and other.cycles == res.cycles

    # the command line over the bus the run left
    capsys.readouterr()
    assert await asyncio.to_thread(main, ["replay", "--nats", nats_server.url, "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["cycles"] == res.cycles and out["identical"] == out["cycles"] and out["different"] == 0
    cfg = tmp_path / "binpack.yaml"
    cfg.write_text(B.WHAT_IF)
    assert await asyncio.to_thread(main, ["replay", "--nats", nats_server.url, "--config", str(cfg), "--json"]) == 1
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["different"] > 0 and out["diffs"]

    # a cycle that ran with the lost nodes unready exports as a scenario that passes
    from busched.replay import export as E
    from busched.scenario.runner import check_report, load_scenario, run_scenario

    r = next(r for r in records if set(run["lost"]) <= set(r.unready) and r.binds)
    doc, notes = await E.export_cycle(run["state"], records, str(r.n))
    assert {n["name"] for n in doc["cluster"]["nodes"] if n.get("ready") is False} >= set(run["lost"])
    f = tmp_path / "unready.yaml"
    E.write_scenario(doc, notes, str(f))
    sc = load_scenario(f)
    assert check_report(run_scenario(sc), sc.expect) == []
