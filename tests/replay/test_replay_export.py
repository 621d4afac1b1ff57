"""A recorded cycle as a scenario (issue 11, item 7): `busched replay --cycle N --export FILE.yaml`.

A live run over a real nats-server (tests/replay/test_replay.py's: waves of short tasks, a refused bind,
a preemption) is recorded; a cycle that bound tasks, one that evicted and one that ran while a task
was kept off a node after its refusal are exported, and each passes the scenario runner's check
(`load_scenario`, `run_scenario`, `check_report`), as `busched scenario check` runs it.
"""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from busched.cli.main import main
from busched.replay import export as E
from busched.scenario.runner import check_report, load_scenario, run_scenario
from tests.replay.test_replay import live_run, read_all


def check(path) -> list[str]:  # noqa: ANN001
    sc = load_scenario(path)
    return check_report(run_scenario(sc), sc.expect)


async def test_recorded_cycles_export_as_scenarios_that_pass(harness, tmp_path):
    sched, bus, agent = await live_run(harness)
    state, records = await read_all(bus)
    binds = next(r for r in records if len(r.binds) >= 5 and not r.evicts)
    evicts = next(r for r in records if r.evicts)
    excl = next((r for r in records if r.excl and r.binds), None)
    picked = [binds, evicts] + ([excl] if excl is not None else [])
    for r in picked:
        doc, notes = await E.export_cycle(state, records, str(r.n), source="test")
        f = tmp_path / f"cycle-{r.n}.yaml"
        E.write_scenario(doc, notes, str(f))
        assert doc["now"] == r.now
        assert doc["expect"]["binds"] == dict(map(tuple, r.binds))
        assert doc["expect"]["evicted"] == sorted(t for t, _, _ in r.evicts)
        assert check(f) == [], f"cycle {r.n}: {check(f)}"
    ev = msgspec.yaml.decode((tmp_path / f"cycle-{evicts.n}.yaml").read_bytes())
    assert ev["expect"]["evicted"] and ev["cluster"]["tasks"] and ev["cluster"]["jobs"][0].get("created") is not None
    if excl is not None:
        ex = msgspec.yaml.decode((tmp_path / f"cycle-{excl.n}.yaml").read_bytes())
        kept = {f"{t['namespace']}/{t['name']}": t for t in ex["cluster"]["tasks"]}
        for task in excl.excl:
            terms = kept[task]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            assert terms["nodeSelectorTerms"][0]["matchFields"][0]["operator"] == "NotIn"

    # the command line: export from the bus, then `busched scenario check`
    out = tmp_path / "cli.yaml"
    code = await asyncio.to_thread(main, ["replay", "--nats", harness.url, "--cycle", str(evicts.n),
                                          "--export", str(out)])
    assert code == 0 and out.read_text().startswith("# A recorded cycle")
    assert await asyncio.to_thread(main, ["scenario", "check", str(out)]) == 0
    # a cycle never recorded
    assert await asyncio.to_thread(main, ["replay", "--nats", harness.url, "--cycle", "999999",
                                          "--export", str(tmp_path / "none.yaml")]) == 2


def test_pick_record_names_one_cycle():
    from busched.bus import messages as m

    recs = [m.CycleRecord(boot="a", n=1, now=0, seq=1, cfg="x"), m.CycleRecord(boot="b", n=1, now=0, seq=2, cfg="x"),
            m.CycleRecord(boot="b", n=2, now=0, seq=3, cfg="x")]
    assert E.pick_record(recs, "2") == 2
    assert E.pick_record(recs, "b:1") == 1
    with pytest.raises(E.ExportError, match="several boots"):
        E.pick_record(recs, "1")
    with pytest.raises(E.ExportError, match="not recorded"):
        E.pick_record(recs, "7")
