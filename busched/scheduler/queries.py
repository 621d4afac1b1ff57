"""What the scheduler answers: `busched get` over request/reply, and the state gauges.

`view` lists nodes, queues, jobs or tasks as `busched get` shows them; `_serve_get` answers a
``GetRequest`` a page at a time, halving the page until the reply fits the bus's payload limit.
"""

from __future__ import annotations

from typing import Any

import msgspec

from busched.api.task import TaskStatus
from busched.bus import messages as m
from busched.bus.resources import resource_list
from busched.scheduler.records import TERMINAL, NodeLive, _field_error


class Queries:
    # == views ========================================================================================================
    def _update_gauges(self) -> None:
        counts: dict[str, int] = {}
        for key in self.specs["task"]:
            s = self.task_status(key)
            counts[s] = counts.get(s, 0) + 1
        for s in TaskStatus:
            self.metrics.tasks.labels(s.name).set(counts.get(s.name, 0))
        ns: dict[str, int] = {"alive": 0, "lost": 0, "unknown": 0}
        for key in self.specs["node"]:
            st = self.live.get(key, NodeLive()).state
            ns[st] = ns.get(st, 0) + 1
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
            for key, spec in self.specs["task"].items():
                b = self.bindings.get(key)
                eff = self.effective_task(key, spec)
                node = b.node if b is not None and (b.live or b.state == "done") else eff.node
                r = self.results.get(key)
                if b is not None and b.live and r is not None and r.what in TERMINAL:
                    node = r.node
                out.append({"namespace": spec.namespace, "name": spec.name, "job": spec.job, "node": node,
                            "status": self.task_status(key), "attempt": b.attempt if b is not None else 0,
                            "reason": self.reasons.get(key, ""), "requests": dict(spec.requests),
                            "backoff": key in self.backoff_until, "refused": self.refused.get(("task", key), "")})
            return out
        if kind == "nodes":
            snap = self.snapshot()
            infos = {n.name: n for n in snap.nodes}
            out = []
            for key, spec in self.specs["node"].items():
                lv = self.live.get(key, NodeLive())
                info = infos.get(key)
                used = resource_list(info.used) if info is not None else {}
                ntasks = sum(1 for b in self.bindings.values() if b.live and b.node == key)
                out.append({"name": key, "allocatable": dict(spec.allocatable), "used": used,
                            "state": lv.state, "ready": info is not None, "tasks": ntasks,
                            "labels": dict(spec.labels), "refused": self.refused.get(("node", key), "")})
            return out
        if kind == "jobs":
            by_job: dict[str, dict[str, int]] = {}
            for tkey, t in self.specs["task"].items():
                counts = by_job.setdefault(f"{t.namespace}/{t.job}", {})
                s = self.task_status(tkey)
                counts[s] = counts.get(s, 0) + 1
            out = []
            for key, spec in self.specs["job"].items():
                st = self.pg_status.get(key)
                counts = by_job.get(key, {})
                out.append({"namespace": spec.namespace, "name": spec.name, "queue": spec.queue,
                            "minMember": spec.min_member, "phase": st.phase if st is not None else spec.phase,
                            "tasks": counts,
                            "conditions": [msgspec.to_builtins(c) for c in st.conditions] if st is not None else [],
                            "refused": self.refused.get(("job", key), "")})
            return out
        if kind == "queues":
            out = []
            for key, spec in self.specs["queue"].items():
                jobs = [j for j in self.specs["job"].values() if j.queue == key]
                out.append({"name": key, "weight": spec.weight, "state": spec.state, "jobs": len(jobs),
                            "capability": dict(spec.capability or {}),
                            "refused": self.refused.get(("queue", key), "")})
            return out
        raise ValueError(f"unknown kind {kind!r} (nodes, queues, jobs, tasks)")

    async def _serve_get(self, data: bytes) -> bytes:
        try:
            req = m.decode(data)
        except m.DecodeError as e:
            return m.encode(m.GetReply(error=f"bad request: {_field_error(e)}"))
        if not isinstance(req, m.GetRequest):
            return m.encode(m.GetReply(error=f"expected a get request, got {type(req).__name__}"))
        try:
            items = self.view(req.kind)
        except ValueError as e:
            return m.encode(m.GetReply(kind=req.kind, error=str(e)))
        limit = max(1, min(req.limit, 5000))
        page = items[req.offset:req.offset + limit]
        nxt = req.offset + limit if req.offset + limit < len(items) else None
        reply = m.encode(m.GetReply(kind=req.kind, items=page, next=nxt))
        while len(reply) > self.bus.max_payload - 1024 and len(page) > 1:
            page = page[: len(page) // 2]
            reply = m.encode(m.GetReply(kind=req.kind, items=page, next=req.offset + len(page)))
        return reply
