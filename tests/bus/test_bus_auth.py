"""`busched up` is authenticated by default: the generated roles confine each user (busched/bus/auth.py)."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
from pathlib import Path

import pytest
from nats.js import api

from busched.agent import Agent, fleet_nodes
from busched.api.objects import ClusterSpec, JobSpec, QueueSpec, TaskSpec
from busched.bus import Bus, BusError, prune
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.apply import apply_cluster
from busched.bus.auth import AuthDir, Credential, agent_permissions, prepare_agent_consumer, render_authorization
from busched.bus.connect import NatsOptions
from busched.bus.server import NatsServer
from busched.cli.agent import connect_options, nodes_from_args
from busched.cli.connection import options_from_args
from busched.cli.get import fetch
from busched.cli.main import build_parser
from busched.scheduler import Scheduler, SchedulerSettings
from tests.bus.conftest import SECURED_NODE
from tests.nats_fixture import FAST, wait_until

NODE, OTHER = SECURED_NODE, "node-01"


def _opts(auth: AuthDir, role: str, name: str | None = None) -> NatsOptions:
    c = auth.get(role, name)
    return NatsOptions(url=c.url, user=c.user, password=c.password, inbox_prefix=c.inbox_prefix)


def _cluster() -> ClusterSpec:
    return ClusterSpec(queues=[QueueSpec(name="default")], jobs=[JobSpec(name="j", namespace="p", min_member=1)],
                       tasks=[TaskSpec(name="j-0", namespace="p", job="j", requests={"cpu": "1"})])


def test_generated_files_are_private_and_lists_come_from_subjects(secured):
    _, auth = secured
    for p in auth.path.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    assert stat.S_IMODE(auth.path.stat().st_mode) == 0o700
    perms = agent_permissions([NODE])
    assert S.heartbeat_subject(NODE) in perms["publish"]["allow"]
    assert perms["subscribe"]["allow"] == [f"_INBOX_{NODE}.>"]
    fleet = agent_permissions(["a", "b"])
    create = f"$JS.API.CONSUMER.CREATE.{S.DECISION_STREAM}.{S.fleet_consumer(['a', 'b'])}"
    assert create not in fleet["publish"]["allow"]  # made beforehand by the scheduler (prepare_agent_consumer)
    assert create in agent_permissions(["a", "b"], create_consumer=True)["publish"]["allow"]
    text = render_authorization(auth.credentials())
    assert text == auth.server_config.read_text()
    assert "busched.state.binding" not in json.dumps([c.permissions() for c in auth.credentials()
                                                       if c.role != "scheduler"])


async def test_the_server_refuses_anonymous_and_wrong_passwords(secured):
    srv, auth = secured
    with pytest.raises(BusError):
        await Bus.connect(NatsOptions(url=srv.url), wait=3)
    with pytest.raises(BusError) as refused:
        await Bus.connect(NatsOptions(url=srv.url, user="scheduler", password="guess"), wait=3)
    # the cause is named, not only a time-out that looks like a server down
    assert "authorization" in str(refused.value).lower(), refused.value


async def test_an_agent_credential_runs_its_node_and_nothing_else(secured):
    srv, auth = secured
    sbus = await Bus.connect(_opts(auth, "scheduler"))
    abus = await Bus.connect(_opts(auth, "agent", NODE))
    sched = Scheduler(sbus, None, SchedulerSettings(**FAST))
    agent = Agent(abus, fleet_nodes(1), heartbeat_interval=0.1)
    try:
        await sched.start()
        await agent.start()
        await apply_cluster(sbus, _cluster())

        async def placed() -> bool:
            await sched.run_once()
            return agent.running()[NODE] == {"p/j-0": 1}
        await wait_until(placed, timeout=10, what="the task running on the agent")
        await wait_until(lambda: sched.task_status("p/j-0") == "Running", what="its result reached the scheduler")
        assert any(n["name"] == NODE and n["state"] == "alive" for n in sched.view("nodes"))

        # another node's results, binding records and decisions are refused by the server: no ack
        phase = m.TaskPhaseChanged(namespace="p", name="j-0", node=OTHER, attempt=1, phase="Failed")
        assert not (await abus.publish(S.result_subject(OTHER, "p/j-0"), phase, timeout=1)).ok
        rec = m.BindingRecord(namespace="p", name="j-0", attempt=9, node=NODE, state="released")
        assert not (await abus.publish(S.binding_subject("p/j-0"), rec, timeout=1)).ok
        bind = m.BindDecision(node=NODE, attempt=9, task=_cluster().tasks[0])
        assert not (await abus.publish(S.decision_subject(NODE, "bind", "p/j-0"), bind, timeout=1)).ok
        assert not (await abus.publish(S.state_subject("task", "p/x"), b"{}", timeout=1)).ok
        # ... nor may it read another node's decisions
        js = abus.nc.jetstream(timeout=1)
        with pytest.raises(Exception):  # noqa: B017 - a permissions violation surfaces as a timeout
            await js.pull_subscribe(S.node_decisions(OTHER), durable=S.agent_consumer(OTHER),
                                    stream=S.DECISION_STREAM)
        assert sched.task_status("p/j-0") == "Running"
    finally:
        await agent.stop()
        await sched.stop()
        await abus.close()
        await sbus.close()


async def test_the_cli_credential_applies_and_asks_but_writes_no_records(secured):
    srv, auth = secured
    sbus = await Bus.connect(_opts(auth, "scheduler"))
    cbus = await Bus.connect(_opts(auth, "cli"))
    sched = Scheduler(sbus, None, SchedulerSettings(**FAST))
    try:
        await sched.start()
        n, errors = await apply_cluster(cbus, _cluster())
        assert (n, errors) == (3, [])
        await wait_until(lambda: any(t["name"] == "j-0" for t in sched.view("tasks")), what="the applied task")
        tasks = await fetch(cbus, "tasks", timeout=3)  # request/reply: the scheduler answers the cli's own inbox
        assert [t["name"] for t in tasks] == ["j-0"]
        # what `apply --prune` reads: the objects on the state stream, through an ephemeral consumer
        assert [t.name for t in await prune.on_bus(cbus, "task")] == ["j-0"]
        rec = m.BindingRecord(namespace="p", name="j-0", attempt=1, node=NODE, state="binding")
        assert not (await cbus.publish(S.binding_subject("p/j-0"), rec, timeout=1)).ok
        assert not (await cbus.publish(S.podgroup_subject("p/j"), b"{}", timeout=1)).ok
        assert not (await cbus.publish(S.result_subject(NODE, "p/j-0"), b"{}", timeout=1)).ok
        bind = m.BindDecision(node=NODE, attempt=1, task=_cluster().tasks[0])
        assert not (await cbus.publish(S.decision_subject(NODE, "bind", "p/j-0"), bind, timeout=1)).ok
        n, errors = await apply_cluster(cbus, _cluster(), delete=True)
        assert errors == []
    finally:
        await sched.stop()
        await cbus.close()
        await sbus.close()


async def test_a_fleet_runs_on_a_prepared_consumer_and_cannot_make_one_for_other_nodes(tmp_path):
    fleet = ["f-00", "f-01"]
    auth = AuthDir(tmp_path / "auth")
    srv = NatsServer(tmp_path / "nats", config_file=auth.server_config)
    auth.ensure(url=srv.url, agents={"f": fleet})
    srv.start()
    sbus = await Bus.connect(_opts(auth, "scheduler"))
    abus = await Bus.connect(_opts(auth, "agent", "f"))
    try:
        await sbus.ensure_streams()
        durable = S.fleet_consumer(fleet)
        cfg = api.ConsumerConfig(name=durable, durable_name=durable, ack_policy=api.AckPolicy.EXPLICIT,
                                 filter_subjects=[S.node_decisions(OTHER), S.node_decisions("f-01")])
        with pytest.raises(Exception):  # noqa: B017 - a permissions violation surfaces as a timeout
            await abus.nc.jetstream(timeout=1).add_consumer(S.DECISION_STREAM, config=cfg)
        assert await prepare_agent_consumer(sbus, fleet)
        feed = await abus.decision_feed(fleet)  # finds it: info only
        await feed.stop()
        info = await sbus.js.consumer_info(S.DECISION_STREAM, durable)
        assert sorted(info.config.filter_subjects) == sorted(S.node_decisions(n) for n in fleet)
    finally:
        await abus.close()
        await sbus.close()
        srv.stop()


async def test_add_agent_reloads_the_running_server(tmp_path):
    auth = AuthDir(tmp_path / "auth")
    srv = NatsServer(tmp_path / "nats", config_file=auth.server_config)
    auth.ensure(url=srv.url)
    srv.start()
    try:
        with pytest.raises(BusError):
            await Bus.connect(NatsOptions(url=srv.url, user="agent-extra", password="x"), wait=1)
        cred = auth.add_agent("extra", ["extra-00", "extra-01"])
        srv.reload()

        async def connects() -> bool:
            try:
                b = await Bus.connect(_opts(auth, "agent", "extra"), wait=1)
            except BusError:
                return False
            await b.close()
            return True
        await wait_until(connects, timeout=10, what="the new agent user")
        assert cred.inbox_prefix == "_INBOX_extra"
    finally:
        srv.stop()


def test_discovery_flags_and_env_win(tmp_path, monkeypatch):
    auth = AuthDir(tmp_path / "auth")
    auth.ensure(url="nats://127.0.0.1:4999", agents={"node": ["node-00", "node-01"]})
    for k in list(os.environ):
        if k.startswith("BUSCHED_NATS"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("BUSCHED_AUTH_DIR", str(auth.path))
    parse = build_parser().parse_args

    o = options_from_args(parse(["get", "tasks"]), "busched-get")
    cli = auth.get("cli")
    assert (o.url, o.user, o.password, o.inbox_prefix) == (cli.url, "cli", cli.password, "_INBOX_cli")
    o = options_from_args(parse(["run"]), "busched-scheduler")
    assert o.user == "scheduler"
    def agent(argv: list[str]) -> NatsOptions:  # as `busched agent` connects: with its nodes' names
        a = parse(argv)
        return connect_options(a, nodes_from_args(a))

    o = agent(["agent", "--nodes", "2"])
    assert (o.user, o.inbox_prefix) == ("agent-node", "_INBOX_node")
    o = agent(["agent", "--nodes", "3"])
    assert o.user is None  # no credential for exactly those nodes
    # explicit settings win
    o = options_from_args(parse(["get", "tasks", "--nats", "nats://127.0.0.1:5000", "--user", "u"]), "busched-get")
    assert (o.url, o.user, o.password) == ("nats://127.0.0.1:5000", "u", None)
    monkeypatch.setenv("BUSCHED_NATS_USER", "envuser")
    monkeypatch.setenv("BUSCHED_NATS_PASSWORD", "envpass")
    o = options_from_args(parse(["get", "tasks"]), "busched-get")
    assert (o.user, o.password, o.url) == ("envuser", "envpass", "nats://127.0.0.1:4222")
    monkeypatch.delenv("BUSCHED_NATS_USER")
    monkeypatch.delenv("BUSCHED_NATS_PASSWORD")
    # a server named elsewhere is not handed a local secret
    o = options_from_args(parse(["get", "tasks", "--nats", "nats://example.org:4222"]), "busched-get")
    assert o.user is None


# -- `busched up`, end to end --------------------------------------------------------------------------------------
UP = [sys.executable, "-m", "busched.cli.main", "up", "--nats-port", "0", "--nats-monitor-port", "-1",
      "--http", "127.0.0.1:0", "--period", "0.1", "--heartbeat", "0.2", "--duration", "0.5", "--nodes", "3"]


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BUSCHED_NATS", "BUSCHED_AUTH"))}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")
async def test_up_is_authenticated_and_get_finds_its_credentials(tmp_path):
    env = _clean_env()
    proc = await asyncio.create_subprocess_exec(*UP, "--exit-after", "8", cwd=tmp_path, env=env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                                                stdin=asyncio.subprocess.DEVNULL)
    out: list[str] = []
    try:
        async def until(needle: str) -> None:
            while needle not in (out[-1] if out else ""):
                line = await proc.stdout.readline()
                if not line:
                    raise AssertionError(f"exited before {needle!r}:\n" + "".join(out))
                out.append(line.decode())
        await asyncio.wait_for(until("applied the demo workload"), 20)
        assert any("authentication on" in line for line in out), out

        auth = AuthDir(tmp_path / ".busched" / "auth")
        secrets = [c.password for c in auth.credentials()]
        assert len(secrets) == 3
        cmdlines = []
        for pid in _descendants(proc.pid):
            try:
                cmdlines.append(Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"))
                environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
            except OSError:
                continue
            assert not any(s in environ for s in secrets)
        assert any("nats-server" in c for c in cmdlines), cmdlines
        assert not any(s in c for s in secrets for c in cmdlines)
        # anonymous is refused
        url = auth.get("cli").url
        with pytest.raises(BusError):
            await Bus.connect(NatsOptions(url=url), wait=3)

        # `busched get tasks -o json` from the same directory, no flags
        get = await asyncio.create_subprocess_exec(sys.executable, "-m", "busched.cli.main", "get", "tasks", "-o",
                                                   "json", cwd=tmp_path, env=env, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.PIPE)
        gout, gerr = await asyncio.wait_for(get.communicate(), 20)
        assert get.returncode == 0, gerr.decode()
        tasks = json.loads(gout)["tasks"]
        assert tasks and all(t["namespace"] == "demo" for t in tasks)
        rest, _ = await asyncio.wait_for(proc.communicate(), 30)
        out.append(rest.decode())
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    text = "".join(out)
    assert proc.returncode == 0, text
    assert "Succeeded" in text and text.rstrip().endswith("nats-server stopped"), text


async def test_up_insecure_warns(tmp_path):
    proc = await asyncio.create_subprocess_exec(*UP, "--insecure", "--exit-after", "3", "--no-demo", cwd=tmp_path,
                                                env=_clean_env(), stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL)
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    text = out.decode()
    assert proc.returncode == 0, text
    assert "WARNING: --insecure" in text
    assert not (tmp_path / ".busched" / "auth").exists()


def test_credential_files_round_trip(tmp_path):
    auth = AuthDir(tmp_path)
    auth.ensure(url="nats://127.0.0.1:1", agents={"gpu": ["gpu-00"]})
    again = AuthDir(tmp_path).ensure(url="nats://127.0.0.1:2")
    assert {c.user for c in again} == {"scheduler", "cli", "agent-gpu"}
    assert all(c.url == "nats://127.0.0.1:2" for c in again)
    assert Credential.load(tmp_path / "agent-gpu.json").nodes == ["gpu-00"]
