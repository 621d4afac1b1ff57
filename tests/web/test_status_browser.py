"""The status page of a live scheduler over a real nats-server, opened in a real headless Chromium: its
queues, a job that cannot fit with its reason, the nodes and the last cycles are on the rendered page,
``/status.json`` agrees, and a screenshot is saved (scripts/status_screenshot.py makes docs/status-page.png
with the same cluster)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from busched.agent import fleet_nodes
from busched.api.objects import ClusterSpec, JobSpec, QueueSpec, TaskSpec
from busched.bus.apply import apply_cluster
from busched.cli.reload import ConfigFile
from busched.cli.run import load_scheduler_config
from busched.scheduler import overview
from busched.web import start_http
from tests.nats_fixture import wait_until
from tests.web import browser

HOSTILE = "<script>alert(1)</script>"


def demo(*, hostile: bool = False) -> ClusterSpec:
    """Two queues; two jobs that run (a gang of two, and two single tasks) and one gang that cannot fit on
    any node of a 4-cpu fleet; with ``hostile`` also a job whose name is markup."""

    def tasks(ns: str, job: str, n: int, cpu: str, memory: str) -> list[TaskSpec]:
        return [TaskSpec(name=f"{job}-{i}", namespace=ns, job=job, requests={"cpu": cpu, "memory": memory})
                for i in range(n)]

    jobs = [JobSpec(name="train", namespace="ml", queue="research", min_member=2),
            JobSpec(name="etl", namespace="data", queue="default", min_member=1),
            JobSpec(name="huge", namespace="ml", queue="research", min_member=2)]
    ts = tasks("ml", "train", 2, "2", "2Gi") + tasks("data", "etl", 2, "1", "1Gi") + tasks("ml", "huge", 2, "16", "8Gi")
    if hostile:
        jobs.append(JobSpec(name=HOSTILE, namespace="data", queue="default", min_member=1))
        ts += tasks("data", HOSTILE, 1, "64", "1Gi")
    queues = [QueueSpec(name="default", weight=1),
              QueueSpec(name="research", weight=3, deserved={"cpu": "8", "memory": "16Gi"})]
    return ClusterSpec(queues=queues, jobs=jobs, tasks=ts)


async def settled(harness: Any, *, hostile: bool = False) -> Any:
    """A scheduler and three 4-cpu nodes with `demo` applied, once the running tasks run and the gang that
    cannot fit has Volcano's Unschedulable condition."""
    sched = await harness.scheduler()
    await harness.agent(fleet_nodes(3, cpu="4", memory="8Gi"))
    _, errors = await apply_cluster(await harness.bus(), demo(hostile=hostile))
    assert not errors

    def done() -> bool:
        tasks = sched.view("tasks")
        jobs = {f"{j['namespace']}/{j['name']}": j for j in sched.view("jobs")}
        huge = jobs.get("ml/huge", {}).get("conditions", [])
        return (sum(t["status"] == "Running" for t in tasks) == 4
                and any(c["type"] == "Unschedulable" and c.get("status", "True") == "True" for c in huge))

    await wait_until(done, timeout=15, what="four tasks running and ml/huge unschedulable")
    return sched


async def test_the_status_page_in_a_real_browser(harness, tmp_path: Path):
    chromium = browser.require()
    sched = await settled(harness, hostile=True)
    http = await start_http("127.0.0.1", 0, sched.metrics.registry, ready=lambda: sched.ready,
                            status=lambda: overview.build(sched))
    try:
        url = f"{http.url}/?refresh=0"
        dom = await asyncio.to_thread(browser.dump_dom, chromium, url)
        # the browser's DOM: the sections and their content, the hostile name as text, not as a script
        for section in ('id="queues"', 'id="pending"', 'id="nodes"', 'id="cycles"', 'id="role"'):
            assert section in dom, section
        assert overview.ROLE in dom and "ready" in dom
        assert ">research<" in dom and ">default<" in dom  # queue names in their cells
        assert "ml/huge" in dom and "NotEnoughResources" in dom and "QueueCapabilityExhausted" in dom
        assert "ml/train" not in dom and "data/etl" not in dom  # running jobs are not pending
        for node in ("node-00", "node-01", "node-02"):
            assert f">{node}<" in dom
        assert "alive" in dom and "allocate" in dom and " ms" in dom  # per-action times of the cycles
        assert "<script>" not in dom and "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
        # the same data as JSON
        async with aiohttp.ClientSession() as client, client.get(f"{http.url}/status.json") as r:
            assert r.status == 200 and r.content_type == "application/json"
            data = json.loads(await r.text())
        queues = {q["name"]: q for q in data["queues"]}
        assert set(queues) == {"default", "research"} and queues["research"]["weight"] == 3
        assert sum(queues["research"]["jobs"].values()) == 2 and sum(queues["default"]["jobs"].values()) == 2
        assert queues["research"]["allocated"]["cpu"] == "4" and queues["default"]["allocated"]["cpu"] == "2"
        # proportion's water-filled deserved (as Volcano's metrics show it; the spec's 8 cpu is not proportion's):
        # 12 cpu by weight 3:1 -> 9 and 3; the share is allocated over deserved in the largest dimension
        # (research: 2 of its 4 deserved pods; default: 2 of 3 cpu)
        assert queues["research"]["deserved"]["cpu"] == "9" and queues["research"]["share"] == 0.5
        assert queues["default"]["deserved"]["cpu"] == "3" and abs(queues["default"]["share"] - 2 / 3) < 1e-9
        pending = {f"{j['namespace']}/{j['name']}": j for j in data["pending"]}
        assert set(pending) == {"ml/huge", f"data/{HOSTILE}"}
        assert pending["ml/huge"]["reason"] == "NotEnoughResources" and pending["ml/huge"]["pending"] == 2
        # busched explain's stable code: proportion refuses the gang before any node is tried
        assert pending["ml/huge"]["code"] == "QueueCapabilityExhausted", pending["ml/huge"]
        assert "rejected by proportion" in pending["ml/huge"]["explanation"]
        assert "2/2 tasks in gang unschedulable" in pending["ml/huge"]["message"]
        nodes = {n["name"]: n for n in data["nodes"]}
        assert sorted(nodes) == ["node-00", "node-01", "node-02"]
        assert all(n["state"] == "alive" for n in nodes.values()) and sum(n["tasks"] for n in nodes.values()) == 4
        decided = [c for c in data["cycles"] if not c["skipped"]]
        assert decided and sum(c["binds"] for c in decided) == 4 and "allocate" in decided[-1]["actions"]
        assert data["config"] == {"file": "", "loaded": True, "error": "", "actions": list(sched.config.actions),
                                  "warnings": []}
        # a screenshot of it
        png = await asyncio.to_thread(browser.screenshot, chromium, url, tmp_path / "status.png")
        head = png.read_bytes()[:8]
        assert head == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    finally:
        await http.stop()


async def test_a_refused_configuration_file_and_a_process_without_a_scheduler(harness, tmp_path: Path):
    sched = await harness.scheduler()
    path = tmp_path / "scheduler.yaml"
    path.write_text('actions: "enqueue"\ntiers:\n- plugins:\n  - name: gang\n')
    cfg = ConfigFile(path, load_scheduler_config, sched.use_config, sched.metrics)  # as `busched run --config`
    http = await start_http("127.0.0.1", 0, sched.metrics.registry, ready=lambda: sched.ready,
                            status=lambda: overview.build(sched, cfg.state()))
    bare = await start_http("127.0.0.1", 0, sched.metrics.registry, ready=lambda: True)
    try:
        async with aiohttp.ClientSession() as client:
            path.write_text('actions: "enqueue, allocat"\n')
            assert cfg.check() == "refused"
            async with client.get(f"{http.url}/") as r:
                page = await r.text()
            assert r.status == 200 and 'id="config-error"' in page and "allocat" in page and str(path) in page
            assert '<meta http-equiv="refresh" content="5">' in page
            path.write_text('actions: "enqueue, allocate"\ntiers:\n- plugins:\n  - name: gang\n')
            assert cfg.check() == "applied"
            async with client.get(f"{http.url}/") as r:
                page = await r.text()
            assert 'id="config-error"' not in page and "actions enqueue, allocate" in page
            assert 'id="config-warnings"' not in page
            # an argument nobody reads: applied, with a warning banner naming plugin and argument
            path.write_text('actions: "enqueue, allocate"\ntiers:\n- plugins:\n  - name: gang\n'
                            '  - name: predicates\n    arguments: {predicate.GPUSharingEnable: true}\n')
            assert cfg.check() == "applied"
            async with client.get(f"{http.url}/") as r:
                page = await r.text()
            assert 'id="config-warnings"' in page and "predicate.GPUSharingEnable" in page and "predicates" in page
            # a Volcano argument busched does not implement: refused, the warning configuration stays
            path.write_text('actions: "enqueue, allocate"\ntiers:\n- plugins:\n  - name: predicates\n'
                            '    arguments: {predicate.VolumeZoneEnable: true}\n')
            assert cfg.check() == "refused"
            async with client.get(f"{http.url}/") as r:
                page = await r.text()
            assert 'id="config-error"' in page and "predicate.VolumeZoneEnable" in page and "does not implement" in page
            async with client.get(f"{bare.url}/") as r:
                assert r.status == 200 and "No scheduler runs in this process" in await r.text()
            async with client.get(f"{bare.url}/status.json") as r:
                assert r.status == 404
            async with client.get(f"{http.url}/?refresh=99999999999") as r:
                assert '<meta http-equiv="refresh" content="5">' in await r.text()  # not a number it takes
    finally:
        await http.stop()
        await bare.stop()


def test_a_missing_chromium_skips_here_and_fails_under_ci(monkeypatch):
    monkeypatch.setattr(browser, "CHROMIUM", "/nonexistent/chromium")
    monkeypatch.setattr(browser.shutil, "which", lambda name: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install -y chromium"):
        browser.require()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must have it"):
        browser.require()
