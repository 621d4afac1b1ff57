"""A live busched cluster of separate processes, for fault injection.

* `Cluster` owns one nats-server (loopback, a free port, JetStream in ``tmp_path``; it can be stopped and
  started again on the same port and store) or, with ``servers=3``, a NATS cluster of three
  (`busched.bus.server_cluster.NatsCluster`: every process gets all three URLs and makes its streams with
  ``replicas`` copies; ``cluster.nats.kill(i)`` / ``restart(i)``), any number of scheduler processes
  (``busched run``) and agent processes (``busched agent``), and applies workloads with
  ``busched apply -f FILE``.  Every process writes stdout+stderr to a file under ``tmp_path``; `Cluster.tails`
  prints the last lines of each (the conftest prints them when a test fails).  `Cluster.close` ends every
  process it started.
* `Observer` is an in-process NATS connection that watches the agents' heartbeats (the agents' own view:
  what each node holds and counts as used), samples continuously for "two attempts of one task at once",
  reads the state stream (specs, binding records, results), asks the scheduler for its view (``get tasks``)
  and scrapes a scheduler's ``/metrics``.
* `check_invariants` waits (bounded) until the cluster is quiet, then asserts the invariants (README.md).

Every wait is a poll with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from busched.api.objects import ClusterSpec, JobSpec, QueueSpec, TaskSpec
from busched.api.resource import Resource
from busched.bus import Bus, StreamSettings
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.server import NatsServer, free_port
from busched.bus.server_cluster import NatsCluster

__all__ = ["Cluster", "Proc", "Observer", "check_invariants", "settle", "wait_for", "workload", "Violation",
           "DURATION"]

DURATION = "busched.io/duration"
BUSCHED = [str(Path(sys.executable).parent / "busched")] if (Path(sys.executable).parent / "busched").exists() \
    else [sys.executable, "-m", "busched.cli.main"]


async def wait_for(cond: Any, timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll ``cond`` (sync or async) until truthy; AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            v = cond()
            if asyncio.iscoroutine(v):
                v = await v
        except Exception as e:  # noqa: BLE001 - e.g. no scheduler answering yet: poll again
            v, last = None, e
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}" + (f" (last error: {last})"
                                                                                     if last else ""))
        await asyncio.sleep(interval)


# -- processes ------------------------------------------------------------------------------------------------------
class Proc:
    """One child process; output to ``log_path``."""

    def __init__(self, name: str, cmd: list[str], log_path: Path) -> None:
        self.name = name
        self.cmd = cmd
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115
        self._log.write(f"=== {' '.join(cmd)}\n".encode())
        self._log.flush()
        self.popen = subprocess.Popen(cmd, stdout=self._log, stderr=self._log, stdin=subprocess.DEVNULL,
                                      env={**os.environ, "PYTHONUNBUFFERED": "1"})

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            self.popen.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL: no clean shutdown."""
        self.signal(signal.SIGKILL)
        self.popen.wait(10)

    def terminate(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``."""
        self.signal(signal.SIGCONT)  # a stopped process cannot handle SIGTERM
        self.signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def close(self) -> None:
        if self.alive():
            self.terminate(5)
        self._log.close()

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])


class Scheduler(Proc):
    def __init__(self, name: str, url: str, log_path: Path, *, period: float, heartbeat_timeout: float,
                 bind_lease: float, backoff: float, extra: list[str]) -> None:
        self.http_port = free_port()
        super().__init__(name, BUSCHED + ["run", "--nats", url, "--period", str(period), "--heartbeat-timeout",
                                          str(heartbeat_timeout), "--bind-lease", str(bind_lease), "--backoff",
                                          str(backoff), "--http", f"127.0.0.1:{self.http_port}",
                                          "--log-level", "info", *extra], log_path)

    def _get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=2) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, ""
        except OSError:
            return 0, ""

    def ready(self) -> bool:
        assert self.alive(), f"scheduler {self.name} exited:\n{self.tail()}"
        return self._get("/readyz")[0] == 200

    async def wait_ready(self, timeout: float = 30.0) -> None:
        await wait_for(lambda: asyncio.to_thread(self.ready), timeout, f"scheduler {self.name} /readyz")

    def metrics(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        """Prometheus text -> {(name, labels): value}."""
        status, text = self._get("/metrics")
        assert status == 200, f"scheduler {self.name}: /metrics answered {status}"
        out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            mm = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)", line)
            if not mm:
                continue
            labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', mm.group(3) or ""))
            out[(mm.group(1), labels)] = float(mm.group(4))
        return out

    def metric_sum(self, name: str, **labels: str) -> float:
        want = set(labels.items())
        return sum(v for (n, ls), v in self.metrics().items() if n == name and want <= set(ls))


class AgentProc(Proc):
    def __init__(self, name: str, url: str, log_path: Path, *, prefix: str, nodes: int, cpu: str, memory: str,
                 heartbeat: float, start: int, extra: list[str]) -> None:
        self.prefix, self.count, self.start = prefix, nodes, start
        width = max(2, len(str(start + nodes - 1)))
        self.node_names = [f"{prefix}-{i:0{width}d}" for i in range(start, start + nodes)]
        super().__init__(name, BUSCHED + ["agent", "--nats", url, "--nodes", str(nodes), "--cpu", cpu, "--memory",
                                          memory, "--prefix", prefix, "--start", str(start), "--heartbeat",
                                          str(heartbeat), "--log-level", "info", *extra], log_path)
        self.args = dict(prefix=prefix, nodes=nodes, cpu=cpu, memory=memory, heartbeat=heartbeat, start=start,
                         extra=extra)


class Cluster:
    """nats-server + scheduler and agent processes + an observer; everything is ended by `close`."""

    def __init__(self, tmp_path: Path, *, servers: int = 1, replicas: int = 1) -> None:
        self.dir = Path(tmp_path)
        self.nats: NatsServer | NatsCluster
        if servers == 1:
            self.nats = NatsServer(self.dir / "nats", host="127.0.0.1", port=0, log_file=str(self.dir / "nats.log"))
        else:
            self.nats = NatsCluster(self.dir / "nats", size=servers)
        self.replicas = replicas  # of every stream, made by whichever process comes first (the observer)
        self.procs: list[Proc] = []
        self.schedulers: list[Scheduler] = []
        self.agents: list[AgentProc] = []
        self.observer: Observer | None = None
        self._n = 0
        self.applied: dict[str, TaskSpec] = {}  # every task applied and not deleted, ns/name -> spec

    @property
    def url(self) -> str:
        return self.nats.url

    def _log(self, name: str) -> Path:
        self._n += 1
        return self.dir / f"{self._n:02d}-{name}.log"

    # -- the bus ------------------------------------------------------------------------------------------------
    async def start(self) -> Observer:
        self.nats.start(timeout=15)
        self.observer = Observer(self)
        await self.observer.start()
        return self.observer

    def stop_nats(self) -> None:
        """Stop the server (SIGTERM; every server of a NATS cluster); the ports and the JetStream stores stay for
        `start_nats`."""
        self.nats.stop()

    def start_nats(self) -> None:
        self.nats.start(timeout=15)

    def _with_replicas(self, extra: list[str] | None) -> list[str]:
        """``extra`` with ``--replicas N`` unless it has one already (a restarted agent's arguments do)."""
        extra = list(extra or [])
        return extra if self.replicas == 1 or "--replicas" in extra else extra + ["--replicas", str(self.replicas)]

    # -- processes ------------------------------------------------------------------------------------------------
    def scheduler(self, name: str = "sched", *, period: float = 0.2, heartbeat_timeout: float = 2.0,
                  bind_lease: float = 3.0, backoff: float = 0.2, extra: list[str] | None = None) -> Scheduler:
        s = Scheduler(name, self.url, self._log(name), period=period, heartbeat_timeout=heartbeat_timeout,
                      bind_lease=bind_lease, backoff=backoff, extra=self._with_replicas(extra))
        self.procs.append(s)
        self.schedulers.append(s)
        return s

    def agent(self, prefix: str, nodes: int = 2, *, cpu: str = "4", memory: str = "8Gi", heartbeat: float = 0.2,
              start: int = 0, extra: list[str] | None = None, name: str | None = None) -> AgentProc:
        a = AgentProc(name or f"agent-{prefix}", self.url, self._log(name or f"agent-{prefix}"), prefix=prefix,
                      nodes=nodes, cpu=cpu, memory=memory, heartbeat=heartbeat, start=start,
                      extra=self._with_replicas(extra))
        self.procs.append(a)
        self.agents.append(a)
        return a

    def restart_agent(self, old: AgentProc) -> AgentProc:
        """A new process for the same nodes (a new boot)."""
        return self.agent(name=old.name + "-r", **old.args)

    async def wait_nodes(self, names: list[str], timeout: float = 20.0) -> None:
        """Until every node heartbeats and the scheduler lists it alive."""
        obs = self.observer
        assert obs is not None
        await wait_for(lambda: all(obs.fresh(n) for n in names), timeout, f"heartbeats of {names}")

        async def alive() -> bool:
            nodes = {n["name"]: n for n in await obs.get("nodes")}
            return all(nodes.get(n, {}).get("state") == "alive" for n in names)
        await wait_for(alive, timeout, f"the scheduler to see {names} alive")

    async def apply(self, cluster: ClusterSpec, *, name: str = "work") -> None:
        """``busched apply -f FILE`` in its own process."""
        path = self.dir / f"{name}-{time.monotonic_ns()}.yaml"
        path.write_bytes(msgspec.yaml.encode(cluster))
        log = self._log(f"apply-{name}")
        proc = await asyncio.create_subprocess_exec(*BUSCHED, "apply", "-f", str(path), "--nats", self.url,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        log.write_bytes(out)
        assert proc.returncode == 0, f"busched apply failed ({proc.returncode}): {out.decode(errors='replace')}"
        for t in cluster.tasks:
            self.applied[f"{t.namespace}/{t.name}"] = t

    def tails(self, lines: int = 40) -> str:
        parts = []
        for p in self.procs:
            parts.append(f"----- {p.name} (pid {p.pid}, {'alive' if p.alive() else f'exit {p.popen.returncode}'})"
                         f" {p.log_path}\n{p.tail(lines)}")
        return "\n".join(parts)

    async def close(self) -> None:
        if self.observer is not None:
            await self.observer.close()
        for p in reversed(self.procs):
            try:
                p.close()
            except Exception:  # noqa: BLE001 - end the rest anyway
                pass
        self.nats.stop()


def workload(ns: str, jobs: int, *, tasks_per_job: int = 1, cpu: str = "500m", memory: str = "256Mi",
             duration: float | None = 600.0, durations: list[float | None] | None = None,
             queue: bool = True, node_selector: dict[str, str] | None = None, prefix: str = "j") -> ClusterSpec:
    """``jobs`` gangs of ``tasks_per_job`` (minMember = tasks_per_job); ``durations[i]`` for job i if given."""
    js, ts = [], []
    for i in range(jobs):
        jn = f"{prefix}{i:03d}"
        d = durations[i % len(durations)] if durations else duration
        js.append(JobSpec(name=jn, namespace=ns, min_member=tasks_per_job))
        for k in range(tasks_per_job):
            ts.append(TaskSpec(name=f"{jn}-{k}", namespace=ns, job=jn, requests={"cpu": cpu, "memory": memory},
                               annotations={DURATION: str(d)} if d is not None else {},
                               node_selector=dict(node_selector or {})))
    return ClusterSpec(queues=[QueueSpec(name="default")] if queue else [], jobs=js, tasks=ts)


# -- the observer ---------------------------------------------------------------------------------------------------
@dataclass
class Violation:
    at: float  # unix seconds
    task: str
    holders: list[tuple[str, int, str]]  # (node, attempt, boot)

    def __str__(self) -> str:
        return f"{time.strftime('%H:%M:%S', time.localtime(self.at))}.{int(self.at * 1000) % 1000:03d} " \
               f"{self.task} held by {self.holders}"


@dataclass
class NodeView:
    node: str
    boot: str
    holding: dict[str, int]
    used: dict[str, Any]
    interval: float
    at: float  # monotonic time received


@dataclass
class Observer:
    cluster: Cluster
    bus: Bus | None = None
    nodes: dict[str, NodeView] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    seen_attempts: dict[str, set[tuple[str, int]]] = field(default_factory=lambda: defaultdict(set))
    bind_decisions: dict[str, set[tuple[str, int]]] = field(default_factory=lambda: defaultdict(set))
    heartbeats: int = 0

    async def start(self) -> None:
        self.bus = await Bus.connect(self.cluster.url, name="faults-observer")
        await self.bus.ensure_streams(StreamSettings(replicas=self.cluster.replicas), history=False)
        await self.bus.subscribe(f"{S.HEARTBEAT_PREFIX}.*", self._on_heartbeat)
        # every bind decision as it is published (core delivery of the stream's subjects)
        await self.bus.subscribe(f"{S.DECISION_PREFIX}.*.bind.>", self._on_bind)

    async def close(self) -> None:
        if self.bus is not None:
            await self.bus.close()

    def fresh_window(self, v: NodeView) -> float:
        return max(1.0, 4 * v.interval)

    def fresh(self, node: str) -> bool:
        v = self.nodes.get(node)
        return v is not None and time.monotonic() - v.at <= self.fresh_window(v)

    def _on_bind(self, subject: str, data: bytes) -> None:
        try:
            d = m.decode(data)
        except Exception:  # noqa: BLE001 - forged or foreign payloads are not ours to judge here
            return
        if isinstance(d, m.BindDecision):
            self.bind_decisions[f"{d.task.namespace}/{d.task.name}"].add((d.node, d.attempt))

    def _on_heartbeat(self, subject: str, data: bytes) -> None:
        try:
            hb = m.decode(data)
        except Exception:  # noqa: BLE001
            return
        if not isinstance(hb, m.NodeHeartbeat):
            return
        self.heartbeats += 1
        now = time.monotonic()
        self.nodes[hb.node] = NodeView(hb.node, hb.boot, dict(hb.holding), dict(hb.used), hb.interval, now)
        for task, attempt in hb.holding.items():
            self.seen_attempts[task].add((hb.node, attempt))
        # (c) two holders of one task at this moment, among the nodes whose heartbeat is fresh
        holders: dict[str, list[tuple[str, int, str]]] = defaultdict(list)
        for v in self.nodes.values():
            if now - v.at <= self.fresh_window(v):
                for task, attempt in v.holding.items():
                    holders[task].append((v.node, attempt, v.boot))
        for task in hb.holding:
            if len(holders[task]) > 1:
                self.violations.append(Violation(time.time(), task, sorted(holders[task])))

    def held(self) -> dict[str, tuple[str, int]]:
        """task -> (node, attempt) from the fresh heartbeats (the agents' own view)."""
        out: dict[str, tuple[str, int]] = {}
        for v in self.nodes.values():
            if self.fresh(v.node):
                for task, attempt in v.holding.items():
                    out[task] = (v.node, attempt)
        return out

    def attempts(self, task: str) -> set[int]:
        return {a for _, a in self.seen_attempts.get(task, set())}

    # -- the scheduler's view -----------------------------------------------------------------------------------
    async def get(self, kind: str, timeout: float = 5.0) -> list[dict[str, Any]]:
        from busched.cli.get import fetch

        assert self.bus is not None
        return await fetch(self.bus, kind, timeout=timeout)

    async def tasks(self) -> dict[str, dict[str, Any]]:
        return {f"{t['namespace']}/{t['name']}": t for t in await self.get("tasks")}

    # -- the state stream ----------------------------------------------------------------------------------------
    async def state(self, subject: str = f"{S.STATE_PREFIX}.>") -> dict[str, bytes]:
        """The last message of every state subject."""
        assert self.bus is not None
        return dict(await self.bus.read_state(subject, timeout=15))

    async def history(self, subject: str = f"{S.STATE_PREFIX}.>") -> list[tuple[str, bytes]]:
        """Every message the state stream still has on ``subject`` (up to 16 per subject), in order."""
        assert self.bus is not None
        from nats.js import api

        last = await self.bus.stream_last_seq(S.STATE_STREAM)
        out: list[tuple[str, bytes]] = []
        if last == 0:
            return out
        done = asyncio.Event()

        async def cb(msg: Any) -> None:
            out.append((msg.subject, bytes(msg.data)))
            md = msg.metadata
            if md.sequence.stream >= last or md.num_pending == 0:
                done.set()

        sub = await self.bus.js.subscribe(subject, stream=S.STATE_STREAM, cb=cb, ordered_consumer=True,
                                          config=api.ConsumerConfig(deliver_policy=api.DeliverPolicy.ALL))
        try:
            await asyncio.wait_for(done.wait(), 15)
        except asyncio.TimeoutError:
            pass  # fewer messages match the filter than the stream holds: what came is all there is
        finally:
            await sub.unsubscribe()
        return out

    async def binding_history(self) -> dict[str, list[m.BindingRecord]]:
        out: dict[str, list[m.BindingRecord]] = defaultdict(list)
        for _subj, data in await self.history(f"{S.STATE_PREFIX}.binding.>"):
            try:
                rec = m.decode(data)
            except Exception:  # noqa: BLE001
                continue
            if isinstance(rec, m.BindingRecord):
                out[f"{rec.namespace}/{rec.name}"].append(rec)
        return out

    async def publish_raw(self, subject: str, data: bytes, msg_id: str | None = None) -> None:
        assert self.bus is not None
        ack = await self.bus.publish(subject, data, msg_id=msg_id)
        assert ack.ok, f"publishing on {subject}: {ack.error}"


# -- invariants -----------------------------------------------------------------------------------------------------
async def node_allocatable(obs: Observer) -> dict[str, Resource]:
    out = {}
    for _subj, data in (await obs.state(f"{S.STATE_PREFIX}.node.>")).items():
        try:
            msg = m.decode(data)
        except Exception:  # noqa: BLE001
            continue
        if isinstance(msg, m.NodeUpsert):
            out[msg.node.name] = Resource.from_list(msg.node.allocatable)
    return out


def _problems(view: dict[str, dict[str, Any]], held: dict[str, tuple[str, int]], expected: dict[str, TaskSpec],
              *, all_placed: bool) -> list[str]:
    """(a) and (d): the scheduler's view against the agents' own view, for every task applied."""
    out = []
    for key in sorted(expected):
        t = view.get(key)
        h = held.get(key)
        if t is None:
            out.append(f"{key}: lost (not in the scheduler's view)")
            continue
        st, node, attempt = t["status"], t.get("node", ""), t.get("attempt", 0)
        if st in ("Running", "Bound"):
            if h is None:
                out.append(f"{key}: {st} on {node} (attempt {attempt}) in the scheduler's view, held by no agent")
            elif h != (node, attempt):
                out.append(f"{key}: {st} on {node} attempt {attempt} for the scheduler, held on {h[0]} "
                           f"attempt {h[1]} by the agents")
        elif st == "Succeeded":
            if h is not None:
                out.append(f"{key}: Succeeded for the scheduler, still held on {h[0]} attempt {h[1]}")
        elif st in ("Pending", "Binding"):
            if h is not None:
                out.append(f"{key}: {st} for the scheduler, held on {h[0]} attempt {h[1]} by an agent")
            elif st == "Pending" and attempt > 0 and not t.get("reason"):
                out.append(f"{key}: Pending after attempt {attempt} without a reason")
            elif all_placed:
                out.append(f"{key}: still {st} ({t.get('reason', '')!r}) although there is room")
        else:
            out.append(f"{key}: {st} ({t.get('reason', '')!r}) on {node!r} attempt {attempt}")
    for key, (node, attempt) in sorted(held.items()):
        if key not in expected:
            t = view.get(key)
            out.append(f"{key}: held on {node} attempt {attempt} by an agent but "
                       f"{'unknown to' if t is None else t['status'] + ' for'} the scheduler (never applied "
                       f"or deleted)")
    return out


async def overcommit(obs: Observer) -> list[str]:
    """(b) from the heartbeats: used and the held tasks' requests within each node's allocatable."""
    alloc = await node_allocatable(obs)
    specs: dict[str, TaskSpec] = dict(obs.cluster.applied)
    out = []
    for name, v in obs.nodes.items():
        if not obs.fresh(name) or name not in alloc:
            continue
        a = alloc[name]
        used = Resource.from_list(v.used)
        if not used.less_equal(a):
            out.append(f"node {name}: agent counts used {v.used} > allocatable {a}")
        total = Resource()
        for task in v.holding:
            if task in specs:
                total.add(Resource.from_list(specs[task].requests))
        if not total.less_equal(a):
            out.append(f"node {name}: holds {sorted(v.holding)} requesting {total} > allocatable {a}")
    return out


async def settle(obs: Observer, *, timeout: float = 25.0, quiet: float = 1.0, all_placed: bool = True,
                 expected: dict[str, TaskSpec] | None = None) -> dict[str, dict[str, Any]]:
    """Wait until the cluster is quiet: the scheduler's view is consistent with the agents' and has not
    changed for ``quiet`` seconds (bounded by ``timeout``).  Returns the last view (checked or not)."""
    expected = obs.cluster.applied if expected is None else expected
    deadline = time.monotonic() + timeout
    last_sig: Any = None
    since = time.monotonic()
    view: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        try:
            view = await obs.tasks()
        except Exception:  # noqa: BLE001 - no scheduler answers right now
            await asyncio.sleep(0.2)
            continue
        held = obs.held()
        sig = (tuple(sorted((k, t["status"], t.get("node"), t.get("attempt")) for k, t in view.items())),
               tuple(sorted(held.items())))
        busy = any(t["status"] in ("Binding", "Releasing", "Bound") for t in view.values())
        if sig != last_sig or busy or _problems(view, held, expected, all_placed=all_placed):
            if sig != last_sig:
                last_sig, since = sig, time.monotonic()
            if busy or _problems(view, held, expected, all_placed=all_placed):
                since = time.monotonic()
        elif time.monotonic() - since >= quiet:
            return view
        await asyncio.sleep(0.2)
    return view


async def check_invariants(obs: Observer, *, all_placed: bool = True, timeout: float = 25.0,
                           expected: dict[str, TaskSpec] | None = None) -> dict[str, dict[str, Any]]:
    """Settle, then assert (a) no task lost and the two views agree, (b) no node over-committed, (c) never two
    holders of one task (across the whole test), (d) every task placed when there is room."""
    expected = obs.cluster.applied if expected is None else expected
    view = await settle(obs, timeout=timeout, all_placed=all_placed, expected=expected)
    problems = _problems(view, obs.held(), expected, all_placed=all_placed)
    problems += await overcommit(obs)
    problems += [f"two holders at once: {v}" for v in obs.violations[:20]]
    assert not problems, "invariants violated after settling:\n  " + "\n  ".join(problems)
    return view


def dump(view: dict[str, dict[str, Any]]) -> str:
    return json.dumps({k: [v["status"], v.get("node"), v.get("attempt"), v.get("reason")] for k, v in view.items()},
                      indent=1)
