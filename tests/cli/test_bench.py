"""Every benchmark workload runs at a tiny scale through `busched bench NAME --json` and reports
its keys with sane values.  Nothing here checks a timing: performance is measured by the bench
itself, never by a unit test."""

from __future__ import annotations

import json

import pytest

from busched.bench import WORKLOADS
from busched.cli.main import main

TINY = {
    "throughput": ["--nodes", "20", "--jobs", "40"],
    "gang": ["--nodes", "4", "--jobs", "2", "--tasks", "20"],
    "mixed": ["--nodes", "30", "--tasks", "40"],
    "preempt": ["--nodes", "10", "--jobs", "3"],
    "idle": ["--nodes", "10", "--tasks", "100", "--jobs", "10", "--cycles", "2"],
    "restart": ["--nodes", "10", "--tasks", "60", "--jobs", "40"],
    "e2e": ["--nodes", "4", "--jobs", "20", "--agents", "2"],
    "trace": ["--nodes", "40", "--tasks", "60"],
    "replay": ["--nodes", "4", "--jobs", "3", "--tasks", "30"],
    # two waves (64 one-cpu tasks on 2 nodes of 16 cpus, 2-3 s each): the leader dies as the first wave binds,
    # a NATS server as the second does
    "failover": ["--tasks", "64", "--nodes", "2", "--agents", "2"],
}
KEYS = {
    "throughput": {"tasks_per_second", "phases_ms", "placed", "cycle_ms", "kernel_tasks_per_second", "kernel_ratio"},
    "gang": {"placed", "cycle_ms", "kernel_tasks_per_second", "kernel_ratio"},
    "mixed": {"tasks_per_second", "shapes", "kernel_tasks_per_second", "kernel_ratio"},
    "preempt": {"evictions", "cycle_ms"},
    "idle": {"cycle_ms", "rss_mb", "gated_cycle_ms", "churn_cycle_ms"},
    "restart": {"first_bind_s", "first_bind_s_in_process"},
    "e2e": {"binds_per_second"},
    "trace": {"placed", "cycle_ms_p99"},
    "replay": {"cycles", "identical", "different", "record_bytes_per_cycle", "record_bytes_per_event",
               "replay_events_per_second"},
    "failover": {"placed", "lost", "double_runs", "overcommitted_nodes", "failover_s", "reruns"},
}


def failover_held(r: dict) -> None:
    """The leader SIGKILLed at half, then a NATS server: every task still placed, none run twice at once, no
    node over-committed, and a new leader's bind timed (its bound, <= 3 s, is the full-scale bench's, not a
    test's on a loaded machine)."""
    assert r["stalled"] == "", r
    tasks = int(TINY["failover"][1])
    assert r["lost"] == 0 and r["placed"] == tasks and r["pending"] == 0, r
    assert r["double_runs"] == 0 and r["overcommitted_nodes"] == 0, r
    assert r["reruns"] == 0, r  # no task ran twice, even one after the other (a standby's queued records: epoch 0)
    assert isinstance(r["failover_s"], float) and r["failover_s"] > 0, r
    assert r["new_epoch"] > r["old_epoch"], r
    assert 0 < r["bound_at_leader_kill"] < tasks and r["bound_at_leader_kill"] <= r["bound_at_server_kill"], r


CHECKS = {"failover": failover_held}


def bench(capsys, name: str) -> tuple[int, dict]:
    rc = main(["bench", name, "--json", *TINY[name]])
    out = capsys.readouterr().out.strip().splitlines()
    return rc, json.loads(out[-1]) if out else {}


def test_every_workload_has_a_tiny_case():
    assert set(TINY) == set(WORKLOADS) == set(KEYS)


@pytest.mark.parametrize("name", WORKLOADS)
def test_workload_reports_its_figures(capsys, name):
    rc, r = bench(capsys, name)
    if rc == 2:  # a workload that needs a part of busched this build lacks says so
        assert r.get("available") is False and r.get("reason"), r
        pytest.skip(r["reason"])
    assert rc == 0
    assert r["workload"] == name
    assert KEYS[name] <= set(r), sorted(r)
    for k, v in r.items():
        if k.endswith(("_ms", "_s", "per_second", "rss_mb")) and isinstance(v, (int, float)):
            assert v >= 0, (k, v)
    CHECKS.get(name, lambda r: None)(r)


def test_sane_values(capsys):
    _, t = bench(capsys, "throughput")
    assert t["placed"] == 40 and t["tasks_per_second"] > 0
    # the bare loop did the same work: every bind's node is among its best
    assert t["kernel_agrees"] == 40 and t["kernel_tasks_per_second"] > 0
    assert {"snapshot", "open", "enqueue", "allocate", "backfill", "close"} <= set(t["phases_ms"])
    _, g = bench(capsys, "gang")
    assert g["placed"] == 40  # two gangs of 20 fill the four nodes (ten 3-cpu tasks each)
    assert g["kernel_agrees"] == 40
    _, m = bench(capsys, "mixed")
    assert m["placed"] == sum(s["placed"] for s in m["shapes"].values()) > 0
    _, p = bench(capsys, "preempt")
    assert p["evictions"] == 3 and p["pipelined"] == 3
    _, i = bench(capsys, "idle")
    assert i["tasks"] == 100 and i["gated_cycles_skipped"] == 2 and i["rss_mb"] > 0
    assert i["churn_binds"] == i["churn"] == 5  # every newcomer placed in the cycle after it arrived
    _, r = bench(capsys, "restart")
    assert r["first_bind_s"] > 0 and r["in_process"]["bound"]
    if r["bus"]["available"]:  # started from the checkpoint written before the tail
        assert r["bus"]["from_checkpoint"] and r["bus"]["checkpoint_bytes"] > 0
        # where the time went: the checkpoint's read and apply, the binding cycle's stages
        assert r["bus"]["restore_apply_s"] > 0 and r["bus"]["catchup_cpu_s"] > 0
        assert {"snapshot", "actions", "open", "action_allocate"} <= set(r["bus"]["first_cycle_stages_s"])


def test_reference_path_places_the_same(capsys):
    assert main(["bench", "gang", "--json", "--reference", *TINY["gang"]]) == 0
    ref = json.loads(capsys.readouterr().out)
    assert ref["kernels"] is False and ref["placed"] == 40


def test_unknown_option_for_a_workload(capsys):
    assert main(["bench", "gang", "--agents", "3"]) == 2
    assert "takes no --agents" in capsys.readouterr().err


def test_human_output(capsys):
    assert main(["bench", "gang", *TINY["gang"]]) == 0
    out = capsys.readouterr().out
    assert "placed: 40" in out and "phases_ms:" in out


def test_config_file_reaches_the_workload(capsys, tmp_path):
    """``--config`` runs a workload under another configuration: exhaustive node search here."""
    from busched.framework.config import DEFAULT_CONFIG

    f = tmp_path / "exhaustive.conf"
    f.write_text(DEFAULT_CONFIG.replace("enqueue, allocate, backfill", "enqueue, allocate")
                 + "nodeSearch: {percentageNodesToFind: 100}\n")
    rc = main(["bench", "throughput", "--json", "--nodes", "150", "--jobs", "30", "--config", str(f)])
    r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and r["placed"] == 30
    assert "allocate" in r["phases_ms"] and "backfill" not in r["phases_ms"]  # the file's actions ran


def test_bad_config_file_is_named(capsys, tmp_path):
    f = tmp_path / "bad.conf"
    f.write_text('actions: "allocate"\nnodeSearch: {percentageNodesToFind: 250}\n')
    assert main(["bench", "gang", "--config", str(f), *TINY["gang"]]) == 2
    assert f"{f}.nodeSearch.percentageNodesToFind" in capsys.readouterr().err


def test_e2e_with_two_shards_places_everything_once(capsys):
    """`bench e2e --shards 2`: two sharded schedulers (this process's and a `busched run --shard` one), each
    owning one agent's nodes (hard mode), race for every task: all placed."""
    from busched.bench.e2e import node_shards

    shards = node_shards(8, 4, 2)
    assert [s.name for s in shards] == ["e2e-0", "e2e-1"]
    assert shards[0].nodes_desired == ["e2e0-00", "e2e0-01", "e2e2-00", "e2e2-01"]
    rc = main(["bench", "e2e", "--json", "--nodes", "4", "--jobs", "20", "--agents", "2", "--shards", "2"])
    r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and r["shards"] == 2 and r["placed"] == 20 and r["complete"], r


def test_e2e_stages_say_where_the_time_went(capsys):
    """`bench e2e --stages`: every bind's record and decision, every Running result and each process's CPU are
    accounted for, in the order they must happen."""
    rc = main(["bench", "e2e", "--json", "--nodes", "4", "--jobs", "20", "--agents", "2", "--stages",
               "--publisher", "objects"])
    r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and r["complete"] and r["publisher"] == "objects", r
    s = r["stages"]
    assert s["records"]["n"] == s["decisions"]["n"] == s["running"]["n"] == 20, s
    # (the placing cycle may still be closing when its tasks already run: it may not be listed yet)
    assert sum(n for _, _, n in s["cycles"]) <= 20 and s["actions"], s
    # binds are written as the session decides them (busched.scheduler.bind_stream), maybe before its actions end
    assert s["actions"][0][0] <= s["records"]["first_start"] <= s["decisions"]["first_start"], s
    assert s["running"]["last"] <= r["seconds"] and s["ingest"]["messages"] >= 20, s
    assert set(s["cpu_s"]) == {"scheduler", "nats-server", "agent0", "agent1", "publisher", "publisher_window"}, s
    assert all(v is not None and v >= 0 for v in s["cpu_s"].values()), s
    assert s["cpu_s"]["publisher_window"] <= s["cpu_s"]["publisher"], s
    # the scheduler's connection sent every record and decision (framed or not) and received their acknowledgements,
    # the echo of its records and the results
    assert s["scheduler_msgs"]["out"] >= 40 and s["scheduler_msgs"]["in"] >= 80, s
    # the event loop's thread (busched.bench.e2e_loop): its CPU within the process's, its stalls within the run
    lp = s["loop"]
    assert 0 < lp["cpu_s"] <= s["cpu_s"]["scheduler"] + 0.02 and lp["runqueue_s"] is not None, lp
    assert 0 <= lp["stalled_in_actions_s"] <= lp["stalled_s"] and lp["stalls"] >= 0, lp
    assert lp["longest_stall"] is None or 0 <= lp["longest_stall"][0] <= r["seconds"], lp
