"""What the scheduler answers: `busched get`, `describe` and `explain` over request/reply, and the state gauges.

`view` lists nodes, queues, jobs or tasks as `busched get` shows them; `_serve_get` answers a
``GetRequest`` a page at a time, halving the page until the reply fits the bus's payload limit, and a
``LookupRequest`` (one object by name) with one item: its row (get), its row, spec and recent events
(describe, `busched.scheduler.events_log`) or why it is or is not placed (explain,
`busched.scheduler.explain`, computed on a private copy of the cache while no cycle runs).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import msgspec

from busched.api.objects import BUILTIN_DEFAULT_QUEUE
from busched.api.task import TaskStatus
from busched.bus import messages as m
from busched.bus.resources import resource_list
from busched.bus.wire import cut
from busched.scheduler import events_log, explain, references
from busched.scheduler.records import TERMINAL, Binding, NodeLive, Result, _field_error

_STILL = frozenset({"Pending", "Succeeded", "Failed"})  # statuses of a task that holds nothing on a node
QUEUE_COUNTS = ("pending", "running", "inqueue", "unknown", "completed")  # a queue's podgroups per phase
KIND_OF_SPEC = {"tasks": "task", "jobs": "job", "queues": "queue", "nodes": "node"}


class TaskTable(Protocol):
    """What the answers read of the binding table (`busched.scheduler.bindings.BindingTable`)."""

    bindings: dict[str, Binding]
    results: dict[str, Result]
    reasons: dict[str, str]
    backoff_until: dict[str, float]


class Queries:
    """The answers.  Reads the specs, the binding ``table``, the nodes' ``live``ness, the podgroup statuses
    (``pg_status``) and ``refused`` (why an object's last change was refused); ``effective_task``,
    ``task_status`` and ``snapshot`` are the effective objects'; ``gather`` copies what explaining a name
    needs (`busched.scheduler.explain.gather`); ``journal`` keeps the recent events (`events_log`);
    ``lock`` is the cycle's (an explanation runs while no cycle does)."""

    def __init__(self, *, specs: Mapping[str, Mapping[str, Any]], table: TaskTable, live: Mapping[str, NodeLive],
                 pg_status: Mapping[str, m.PodGroupStatus], refused: Mapping[tuple[str, str], str],
                 effective_task: Callable[[str, Any], Any], task_status: Callable[[str], str],
                 snapshot: Callable[[], Any], gather: Callable[[str], explain.Inputs], metrics: Any,
                 max_payload: Callable[[], int], lock: asyncio.Lock, in_thread: bool, journal: Any,
                 queue_status: Mapping[str, m.QueueStatus] | None = None) -> None:
        self.specs = specs
        self.table = table
        self.live = live
        self.pg_status = pg_status
        self.queue_status = queue_status if queue_status is not None else {}  # queue -> its last written status
        self.refused = refused
        self.effective_task = effective_task
        self.task_status = task_status
        self.snapshot = snapshot
        self.gather = gather
        self.metrics = metrics
        self.max_payload = max_payload
        self.lock = lock
        self.in_thread = in_thread
        self.journal = journal

    # == views ========================================================================================================
    def update_gauges(self) -> None:
        counts: dict[str, int] = {}
        for key in self.specs["task"]:
            name = self.task_status(key)
            counts[name] = counts.get(name, 0) + 1
        for s in TaskStatus:
            self.metrics.tasks.labels(s.name).set(counts.get(s.name, 0))
        ns: dict[str, int] = {"alive": 0, "lost": 0, "unknown": 0}
        for key in self.specs["node"]:
            state = self.live.get(key, NodeLive()).state
            ns[state] = ns.get(state, 0) + 1
        for k, v in ns.items():
            self.metrics.nodes.labels(k).set(v)
        phases: dict[str, int] = {}
        for key, spec in self.specs["job"].items():
            st = self.pg_status.get(key)
            p = st.phase if st is not None else spec.phase
            phases[p] = phases.get(p, 0) + 1
        for p in ("Pending", "Inqueue", "Running", "Unknown", "Completed"):
            self.metrics.jobs.labels(p).set(phases.get(p, 0))

    def view(self, kind: str) -> list[dict[str, Any]]:
        """What `busched get` shows."""
        if kind == "tasks":
            out = []
            table = self.table
            for key, spec in self.specs["task"].items():
                b = table.bindings.get(key)
                eff = self.effective_task(key, spec)
                node = b.node if b is not None and (b.live or b.state == "done") else eff.node
                r = table.results.get(key)
                if b is not None and b.live and r is not None and r.what in TERMINAL:
                    node = r.node
                status = self.task_status(key)
                out.append({"namespace": spec.namespace, "name": spec.name, "job": spec.job, "node": node,
                            "status": status, "attempt": b.attempt if b is not None else 0,
                            "reason": references.job_missing(spec, self.specs["job"]) or table.reasons.get(key, ""),
                            "requests": dict(spec.requests),
                            "backoff": key in table.backoff_until, "refused": self.refused.get(("task", key), ""),
                            "exitCode": r.exit_code if r is not None else None,
                            "exitReason": r.reason if r is not None and status in TERMINAL and r.what in TERMINAL
                            else ""})
            return out
        if kind == "nodes":
            snap = self.snapshot()
            infos = {n.name: n for n in snap.nodes}
            out = []
            for key, spec in self.specs["node"].items():
                lv = self.live.get(key, NodeLive())
                info = infos.get(key)
                used = resource_list(info.used) if info is not None else {}
                ntasks = sum(1 for b in self.table.bindings.values() if b.live and b.node == key)
                out.append({"name": key, "allocatable": dict(spec.allocatable), "used": used,
                            "state": lv.state, "ready": info is not None, "tasks": ntasks,
                            "unschedulable": spec.unschedulable,
                            "labels": dict(spec.labels), "refused": self.refused.get(("node", key), ""),
                            # the load its agent last measured (docs/agents.md, node.heartbeat); None: none
                            "usage": msgspec.to_builtins(lv.usage) if lv.usage is not None else None})
            return out
        if kind == "jobs":
            by_job: dict[str, dict[str, int]] = {}
            failed: dict[str, list[str]] = {}  # job -> its failed tasks
            for tkey, t in self.specs["task"].items():
                jkey = f"{t.namespace}/{t.job}"
                counts = by_job.setdefault(jkey, {})
                s = self.task_status(tkey)
                counts[s] = counts.get(s, 0) + 1
                if s == "Failed":
                    failed.setdefault(jkey, []).append(references.failure(
                        tkey, self.table.results.get(tkey), self.table.reasons.get(tkey, "")))
            out = []
            for key, spec in self.specs["job"].items():
                st = self.pg_status.get(key)
                counts = by_job.get(key, {})
                conditions = [msgspec.to_builtins(c) for c in st.conditions] if st is not None else []
                refs = references.job_conditions(spec, self.specs["queue"], failed.get(key, []), sum(counts.values()))
                phase = st.phase if st is not None else spec.phase
                finished = bool(counts) and all(s in TERMINAL for s in counts)
                # Volcano's vcjob: Aborting while its pods stop, then Aborted; a finished job stays as it ended
                if spec.suspend and not finished:
                    phase = "Aborting" if any(s not in _STILL for s in counts) else "Aborted"
                out.append({"namespace": spec.namespace, "name": spec.name, "queue": spec.queue,
                            "minMember": spec.min_member, "phase": phase, "suspended": spec.suspend,
                            "tasks": counts, "failed": len(failed.get(key, [])),
                            "reason": "; ".join(f"{c['reason']}: {c['message']}" for c in refs),
                            "conditions": conditions + refs,
                            "refused": self.refused.get(("job", key), "")})
            return out
        if kind == "queues":
            out = []
            unfinished = self._unfinished_jobs() if any(
                q.state == "Closed" for q in self.specs["queue"].values()) else set()
            for key, spec in self.specs["queue"].items():
                jobs = [j for j in self.specs["job"].values() if j.queue == key]
                state = spec.state
                if state == "Closed" and any(f"{j.namespace}/{j.name}" in unfinished for j in jobs):
                    state = "Closing"  # Volcano: closed, but jobs of it still to finish
                qs = self.queue_status.get(key)
                out.append({"name": key, "weight": spec.weight, "state": state, "jobs": len(jobs),
                            "origin": "built-in" if spec is BUILTIN_DEFAULT_QUEUE else "applied",
                            "capability": dict(spec.capability or {}),
                            "refused": self.refused.get(("queue", key), ""),
                            # the status the scheduler wrote after its last cycle (busched.scheduler.queue_statuses)
                            "allocated": dict(qs.allocated) if qs is not None else {},
                            **{f: getattr(qs, f) if qs is not None else 0 for f in QUEUE_COUNTS}})
            return out
        raise ValueError(f"unknown kind {kind!r} (nodes, queues, jobs, tasks)")

    def _unfinished_jobs(self) -> set[str]:
        """The jobs not finished: a podgroup not Completed with a task that has not ended (or no task yet)."""
        ended: dict[str, bool] = {}
        for tkey, t in self.specs["task"].items():
            jkey = f"{t.namespace}/{t.job}"
            ended[jkey] = ended.get(jkey, True) and self.task_status(tkey) in TERMINAL
        out = set()
        for key in self.specs["job"]:
            st = self.pg_status.get(key)
            if (st is None or st.phase != "Completed") and not ended.get(key, False):
                out.add(key)
        return out

    async def serve_get(self, data: bytes) -> bytes:
        try:
            req = m.decode(data)
        except m.DecodeError as e:
            return m.encode(m.GetReply(error=f"bad request: {_field_error(e)}"))
        if isinstance(req, m.LookupRequest):
            return await self.serve_lookup(req)
        if not isinstance(req, m.GetRequest):
            return m.encode(m.GetReply(error=f"expected a get request, got {type(req).__name__}"))
        try:
            items = self.view(req.kind)
        except ValueError as e:
            return m.encode(m.GetReply(kind=req.kind, error=str(e)))
        limit = max(1, min(req.limit, 5000))
        page = items[req.offset:req.offset + limit]
        if req.spec:  # the page's specs only (a get of every task asks page by page)
            page = self.with_specs(req.kind, page)
        nxt = req.offset + limit if req.offset + limit < len(items) else None
        reply = m.encode(m.GetReply(kind=req.kind, items=page, next=nxt))
        limit = self.max_payload() - 1024
        while len(reply) > limit and len(page) > 1:
            page = page[: len(page) // 2]
            reply = m.encode(m.GetReply(kind=req.kind, items=page, next=req.offset + len(page)))
        if len(reply) > limit:  # one object alone: said, rather than sent for the bus to refuse and the asker to wait
            return m.encode(m.GetReply(kind=req.kind, error=f"get {req.kind}: the object at {req.offset} alone is "
                                                            f"{len(reply)} bytes, more than the bus carries ({limit})"))
        return reply

    # == one object by name: get, describe, explain ====================================================================
    async def serve_lookup(self, req: m.LookupRequest) -> bytes:
        try:
            if req.op == "explain":
                async with self.lock:  # no cycle meanwhile: the copy is of a cache at rest
                    inp = self.gather(req.name)
                if not inp.tasks and req.name not in self.specs["job"]:
                    raise KeyError(f"no task or job {req.name!r}")
                run: Any = asyncio.to_thread if self.in_thread else _call
                item = await run(explain.explain, inp, req.name)
            elif req.op in ("get", "describe"):
                item = self.lookup(req.kind, req.name, describe=req.op == "describe")
                if req.spec and req.op == "get":
                    item = self.with_specs(req.kind, [item])[0]
            else:
                raise ValueError(f"unknown op {req.op!r} (get, describe, explain)")
        except KeyError as e:
            return m.encode(m.GetReply(kind=req.kind, error=str(e.args[0]) if e.args else "not found"))
        except ValueError as e:
            return m.encode(m.GetReply(kind=req.kind, error=str(e)))
        reply = m.encode(m.GetReply(kind=req.kind, items=[item]))
        limit = self.max_payload() - 1024
        if len(reply) > limit:  # (the bus would not carry it: the asker would wait for nothing until it gives up)
            return m.encode(m.GetReply(kind=req.kind, error=f"{req.op} {cut(req.name, 300)}: the answer, {len(reply)} "
                                                            f"bytes, is more than the bus carries ({limit})"))
        return reply

    def with_specs(self, kind: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The rows, each with its object's spec as applied under ``spec`` (what `busched get -o yaml` prints
        back as an object `busched apply` takes, with the row as its status)."""
        specs = self.specs[KIND_OF_SPEC[kind]]
        keyed = kind in ("tasks", "jobs")
        return [{**r, "spec": msgspec.to_builtins(specs[f"{r['namespace']}/{r['name']}" if keyed else r["name"]])}
                for r in rows]

    def lookup(self, kind: str, name: str, *, describe: bool = False) -> dict[str, Any]:
        """One object's `view` row; with ``describe`` also its spec and its recent events."""
        if kind not in KIND_OF_SPEC:
            raise ValueError(f"unknown kind {kind!r} (nodes, queues, jobs, tasks)")
        specs = self.specs[KIND_OF_SPEC[kind]]
        if name not in specs:
            raise KeyError(f"no {KIND_OF_SPEC[kind]} {name!r}")
        key = (lambda r: f"{r['namespace']}/{r['name']}") if kind in ("tasks", "jobs") else (lambda r: r["name"])
        row = next(r for r in self.view(kind) if key(r) == name)
        if not describe:
            return row
        out = dict(row)
        out["spec"] = msgspec.to_builtins(specs[name])
        if kind == "tasks":
            events = events_log.of_task(self.journal, name)
        elif kind == "jobs":
            ns, job = name.split("/", 1)
            events = events_log.recent(self.journal, lambda e: e["task"].split("/", 1)[0] == ns and getattr(
                self.specs["task"].get(e["task"]), "job", None) == job)
        elif kind == "nodes":
            events = events_log.recent(self.journal, lambda e: e["node"] == name)
        else:
            jobs = {k for k, j in self.specs["job"].items() if j.queue == name}
            events = events_log.recent(self.journal, lambda e: _job_of(self.specs, e["task"]) in jobs)
        out["events"] = events
        return out


def _job_of(specs: Mapping[str, Mapping[str, Any]], task: str) -> str:
    spec = specs["task"].get(task)
    return f"{spec.namespace}/{spec.job}" if spec is not None else ""


async def _call(fn: Any, *args: Any) -> Any:
    return fn(*args)
