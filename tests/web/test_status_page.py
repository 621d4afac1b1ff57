"""The status page's HTML (`busched.web.status`) from a hand-made overview, and the ring of recent cycles
(`busched.scheduler.overview.note`): escaping, every section, the refused configuration, the folding of
skipped cycles, the bound on the ring."""

from __future__ import annotations

import html.parser
from types import SimpleNamespace

from busched.scheduler import overview
from busched.scheduler.records import CycleReport
from busched.web import status

HOSTILE = '<script>alert("x")</script>'


def sample(**over: object) -> dict:
    d = {
        "role": overview.ROLE, "ready": True, "cycle": 42,
        "config": {"file": "/etc/busched.yaml", "loaded": True, "error": "", "actions": ["enqueue", "allocate"]},
        "queues": [{"name": HOSTILE, "state": "Open", "weight": 3, "deserved": {"cpu": "2", "memory": "4294967296"},
                    "allocated": {"cpu": "1500m", "memory": "1073741824"}, "share": 0.75,
                    "capability": {}, "jobs": {"Running": 2, "Pending": 1}, "refused": ""},
                   {"name": "batch", "state": "Open", "weight": 1, "deserved": None, "allocated": None,
                    "share": None, "capability": {}, "jobs": {}, "refused": ""}],
        "pending": [{"namespace": "ns", "name": "big<b>", "queue": "batch", "phase": "Inqueue", "minMember": 2,
                     "pending": 2, "tasks": 2, "code": "NodeTooSmall",
                     "explanation": "task ns/big-0 fits no node: 0/3 nodes are unavailable",
                     "reason": "NotEnoughResources",
                     "message": "2/2 tasks in gang unschedulable: 0/3 nodes are unavailable: 3 Insufficient cpu."}],
        "pending_more": 0,
        "nodes": [{"name": "node-<1>", "state": "alive", "ready": True, "tasks": 1,
                   "allocatable": {"cpu": "4", "memory": "8Gi"}, "used": {"cpu": "1", "memory": "536870912"},
                   "refused": ""},
                  {"name": "node-2", "state": "lost", "ready": False, "tasks": 0,
                   "allocatable": {"cpu": "4"}, "used": {}, "refused": ""}],
        "nodes_more": 3,
        "cycles": [{"cycle": 9, "last": 12, "count": 4, "time": 1_700_000_010.0, "seconds": 0.0, "open": 0.0,
                    "actions": {}, "binds": 0, "evicts": 0, "released": 0, "skipped": True, "error": ""},
                   {"cycle": 8, "last": 8, "count": 1, "time": 1_700_000_000.0, "seconds": 0.0123, "open": 0.001,
                    "actions": {"enqueue": 0.0004, "allocate": 0.0101}, "binds": 5, "evicts": 1, "released": 0,
                    "skipped": False, "error": ""}],
    }
    d.update(over)
    return d


class Text(html.parser.HTMLParser):
    """The page's visible text, its section ids and whether any script element was parsed."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.ids: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.ids += [v for k, v in attrs if k == "id" and v]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(page: str) -> Text:
    p = Text()
    p.feed(page)
    return p


def test_every_section_is_there_and_names_are_escaped():
    page = status.render(sample())
    p = parse(page)
    assert "script" not in p.tags and p.tags.count("b") == 1  # the one <b> is the role's, not the job's
    assert HOSTILE not in page and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    text = " ".join(p.text)
    assert HOSTILE in text and "ns/big<b>" in text and "node-<1>" in text  # shown as text, not markup
    assert {"role", "queues", "pending", "nodes", "cycles"} <= set(p.ids)
    assert overview.ROLE in text and "cycles: 42" in text and "/etc/busched.yaml" in text
    # queues: weight, deserved, allocated, share, jobs by phase
    assert "cpu 2, memory 4Gi" in text and "cpu 1500m, memory 1Gi" in text and "75.0%" in text
    assert "Pending 1, Running 2" in text
    # the pending job, its reason code, busched's explanation and Volcano's condition
    assert "NodeTooSmall" in text and "fits no node" in text and "2/2" in text
    assert "Volcano: NotEnoughResources" in text and "3 Insufficient cpu" in text
    # nodes: allocatable as written, used in binary units, tasks, alive or not; the cut-off said
    assert "cpu 4, memory 8Gi" in text and "memory 512Mi" in text and "lost" in text and "and 3 more" in text
    # cycles: a run of skipped ones folded, per-action times, binds and evicts
    assert "9-12" in text and "4 cycles" in text and "allocate 10.1 ms" in text and "12.3 ms" in text
    assert "config-error" not in p.ids
    assert '<meta http-equiv="refresh" content="5">' in page
    assert "http-equiv" not in status.render(sample(), refresh=0)


def test_a_refused_configuration_file_is_reported():
    bad = {"file": "/etc/<x>.yaml", "loaded": False, "error": "config.tiers[0].plugins[1].enableJobReady: "
           "expected true or false <oops>", "actions": ["allocate"]}
    page = status.render(sample(config=bad, ready=False))
    p = parse(page)
    text = " ".join(p.text)
    assert "config-error" in p.ids and "oops" in text and "<oops>" not in page
    assert "refused" in text and "enableJobReady" in text and "previous configuration stays" in text
    assert "not ready" in text


def test_empty_sections_and_a_process_without_a_scheduler():
    text = " ".join(parse(status.render(sample(queues=[], pending=[], nodes=[], cycles=[], nodes_more=0))).text)
    for empty in ("no queues", "no pending jobs", "no nodes", "no cycle yet"):
        assert empty in text
    assert "No scheduler runs in this process" in " ".join(parse(status.render_absent()).text)


def test_the_ring_of_cycles_folds_skipped_runs_and_is_bounded():
    sched = SimpleNamespace()
    ssn = SimpleNamespace(timings={"open": 0.001, "actions": [("enqueue", 0.002), ("allocate", 0.003)]})
    overview.note(sched, CycleReport(1, binds=[("t/a", "n")], seconds=0.01, now=100.0), ssn)
    for c in (2, 3, 4):
        overview.note(sched, CycleReport(c, skipped=True, now=100.0 + c))
    overview.note(sched, CycleReport(5, error="ValueError: boom", now=106.0))
    rows = overview.recent(sched)
    assert [(r["cycle"], r["last"], r["count"], r["skipped"]) for r in rows] == [
        (5, 5, 1, False), (2, 4, 3, True), (1, 1, 1, False)]
    assert rows[2]["actions"] == {"enqueue": 0.002, "allocate": 0.003} and rows[2]["binds"] == 1
    assert rows[1]["time"] == 104.0 and rows[0]["error"] == "ValueError: boom"
    for c in range(6, 6 + 2 * overview.RECENT_CYCLES):
        overview.note(sched, CycleReport(c, now=float(c)))
    rows = overview.recent(sched)
    assert len(rows) == overview.RECENT_CYCLES and rows[0]["cycle"] == 5 + 2 * overview.RECENT_CYCLES
