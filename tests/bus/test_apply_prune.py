"""`busched apply --prune -l SELECTOR` over a real nats-server (issue 14, "Honest apply"): the files become the
whole of what the selector covers, of the labelled kinds they have objects of; and kubectl's selector syntax."""

from __future__ import annotations

import asyncio
import json

import pytest

from busched.api.selectors import SelectorError, matches, parse_selector
from busched.bus import Bus
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.cli.main import main


def job(name: str, **labels: str) -> dict:
    return {"name": name, "namespace": "ns", "queue": "q1", "minMember": 1, "labels": labels}


def task(name: str, **labels: str) -> dict:
    return {"name": name, "namespace": "ns", "job": "j1", "requests": {"cpu": "1"}, "labels": labels}


Q1 = {"name": "q1"}
NODE = {"name": "n1", "allocatable": {"cpu": "4"}, "labels": {"team": "a"}}


@pytest.fixture(autouse=True)
def _here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./.busched/auth credentials discovered
    for var in ("BUSCHED_NATS", "BUSCHED_NATS_CREDS", "BUSCHED_NATS_USER", "BUSCHED_NATS_PASSWORD"):
        monkeypatch.delenv(var, raising=False)


def _file(tmp_path, name: str, **doc: list) -> str:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return str(p)


def on_bus(url: str) -> set[str]:
    """The keys (``kind key``) whose last message on the state stream is an upsert."""
    async def go() -> set[str]:
        bus = await Bus.connect(url)
        try:
            out = set()
            for _, _, data in await bus.last_per_subject(f"{S.STATE_PREFIX}.>"):
                msg = m.decode(data)
                for kind, cls in m.UPSERTS.items():
                    if type(msg) is cls:
                        spec = getattr(msg, m.SPEC_FIELD[kind])
                        ns = getattr(spec, "namespace", None)
                        out.add(f"{kind} {ns}/{spec.name}" if ns else f"{kind} {spec.name}")
            return out
        finally:
            await bus.close()
    return asyncio.run(go())


ALL = {"queue q1", "queue q2", "node n1", "job ns/j1", "job ns/j2", "job ns/j3", "task ns/t1", "task ns/t2",
       "task ns/t3"}


@pytest.fixture
def inventory(nats_server, tmp_path, capsys):
    """Everything of ALL on the bus: a queue q2 and a node n1 labelled team=a that no later file has."""
    f = _file(tmp_path, "v1.json", queues=[Q1, {"name": "q2"}], nodes=[NODE],
              jobs=[job("j1", team="a"), job("j2", team="a"), job("j3", team="b")],
              tasks=[task("t1", team="a"), task("t2", team="a", tier="web"), task("t3", team="b")])
    assert main(["apply", "-f", f, "--nats", nats_server.url]) == 0
    assert on_bus(nats_server.url) == ALL
    capsys.readouterr()
    # the next version of team a's inventory: j2 and t2 are gone from it
    return _file(tmp_path, "v2.json", queues=[Q1], jobs=[job("j1", team="a")], tasks=[task("t1", team="a")])


def test_prune_deletes_what_the_file_no_longer_has(nats_server, inventory, capsys):
    url = nats_server.url
    assert main(["apply", "--dry-run", "--prune", "-l", "team=a", "-f", inventory, "--nats", url]) == 0
    out = capsys.readouterr().out
    assert "would prune 2 objects (dry run: nothing deleted)" in out
    assert f"delete job ns/j2 -> {S.state_subject('job', 'ns/j2')}" in out and "delete task ns/t2" in out
    assert on_bus(url) == ALL

    assert main(["apply", "--prune", "-l", "team=a", "-f", inventory, "--nats", url]) == 0
    out = capsys.readouterr().out
    assert "applied 3 objects" in out and "pruned 2 objects" in out
    # j1 and t1 (in the file) stay; team b stays; q2 (queues carry no labels) and the node (the file has no
    # nodes) are never pruned
    assert on_bus(url) == ALL - {"job ns/j2", "task ns/t2"}
    assert main(["apply", "--prune", "-l", "team=a", "-f", inventory, "--nats", url]) == 0
    assert "pruned 0 objects" in capsys.readouterr().out


def test_a_selector_that_matches_nothing_prunes_nothing(nats_server, inventory, capsys):
    assert main(["apply", "--prune", "-l", "team=nobody", "-f", inventory, "--nats", nats_server.url]) == 0
    assert "pruned 0 objects" in capsys.readouterr().out
    assert on_bus(nats_server.url) == ALL


def test_set_based_selectors(nats_server, inventory, capsys):
    # team a or b, but not the web tier: j2, j3 and t3 go; t2 (tier=web) stays
    assert main(["apply", "--prune", "-l", "team in (a, b),tier notin (web)", "-f", inventory,
                 "--nats", nats_server.url]) == 0
    assert "pruned 3 objects" in capsys.readouterr().out
    assert on_bus(nats_server.url) == ALL - {"job ns/j2", "job ns/j3", "task ns/t3"}


@pytest.mark.parametrize(("argv", "error"), [
    (["--prune"], "--prune needs -l/--selector"),
    (["-l", "team=a"], "-l/--selector is used with --prune only"),
    (["--prune", "-l", "team in a"], "cannot parse 'team in a'"),
])
def test_prune_needs_a_good_selector(tmp_path, capsys, argv, error):
    f = _file(tmp_path, "q.json", queues=[Q1])
    assert main(["apply", *argv, "-f", f]) == 2
    assert error in capsys.readouterr().err


def test_selector_syntax():
    sel = parse_selector("app=web, tier!=db,env in (a, b),x notin (c),gpu,!spot,example.com/team==ml")
    assert sel == (("app", "In", ("web",)), ("tier", "NotIn", ("db",)), ("env", "In", ("a", "b")),
                   ("x", "NotIn", ("c",)), ("gpu", "Exists", ()), ("spot", "DoesNotExist", ()),
                   ("example.com/team", "In", ("ml",)))
    labels = {"app": "web", "env": "b", "gpu": "1", "example.com/team": "ml"}
    assert matches(sel, labels)
    assert not matches(sel, {**labels, "spot": "true"}) and not matches(sel, {**labels, "tier": "db"})
    assert matches(parse_selector("k!=v"), {}) and not matches(parse_selector("k=v"), {})  # as Kubernetes
    assert matches(parse_selector(""), {"any": "thing"})
    for bad in ("=v", "k in ()", "k in", "a b", "a=b=c", "!", "k in (a,b"):
        with pytest.raises(SelectorError):
            parse_selector(bad)
