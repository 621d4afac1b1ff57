"""Change one object on the state stream without losing a concurrent change (the lifecycle commands).

`busched queue close`, `job suspend`, `node cordon` ... each change one field of an object that others
may be changing at the same time (another operator, an agent registering its node).  `change_object`
reads the object's last message and its subject sequence, lets the caller compute the new spec (or a
delete) from it, and publishes on condition that the subject is still at that sequence
(``Nats-Expected-Last-Subject-Sequence``, docs/bus.md "The stream decides order"); when someone wrote
in between, it reads again and recomputes, a bounded number of times.  The new spec is checked with
the same code the scheduler uses (`busched.api.build.validate`) before anything is published.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from busched.api import build
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.client import Bus
from busched.bus.errors import BusError

log = logging.getLogger("busched.bus")

__all__ = ["Refused", "Changed", "DELETE", "change_object", "read_object", "read_kind", "register_nodes",
           "OPERATOR_FIELDS"]

ATTEMPTS = 5


class Refused(ValueError):  # noqa: N818 - the word the commands print: "refused"
    """The change does not apply (the object is missing, or in a state that forbids it); nothing was written."""


class _Delete:
    def __repr__(self) -> str:
        return "DELETE"


DELETE: Any = _Delete()  # what a change function returns to delete the object


@dataclass
class Changed:
    """What `change_object` wrote: the new spec (None for a delete), its stream sequence, the spec before."""

    spec: Any
    seq: int
    before: Any


async def read_object(bus: Bus, kind: str, key: str) -> tuple[Any, int]:
    """The object's spec as its subject's last message says (None when absent or deleted) and that
    message's sequence (0 when the subject is empty)."""
    last = await bus.last_state(S.state_subject(kind, key))
    if last is None:
        return None, 0
    seq, data = last
    try:
        msg = m.decode(data)
    except msgspec.DecodeError:
        return None, seq  # unreadable: as absent (an upsert replaces it)
    if type(msg) is m.UPSERTS[kind]:
        return getattr(msg, m.SPEC_FIELD[kind]), seq
    return None, seq


async def read_kind(bus: Bus, kind: str, under: str = "", *, timeout: float = 10.0) -> list[Any]:
    """Every live object of ``kind`` on the stream (``under``: a namespace, for namespaced kinds)."""
    subject = f"{S.STATE_PREFIX}.{kind}.{S.token(under) + '.' if under else ''}>"
    out = []
    for _, _, data in await bus.last_per_subject(subject, timeout):
        try:
            msg = m.decode(data)
        except msgspec.DecodeError:
            continue
        if type(msg) is m.UPSERTS[kind]:
            out.append(getattr(msg, m.SPEC_FIELD[kind]))
    return out


async def change_object(bus: Bus, kind: str, key: str, change: Callable[[Any], Any], *,
                        attempts: int = ATTEMPTS, version: int = 0) -> Changed:
    """Publish ``change(current spec or None)`` for the object ``key`` of ``kind``, conditionally.

    ``change`` returns the new spec, `DELETE`, or raises `Refused`; it may be called again with a newer
    spec when the condition is lost.  Raises `Refused` (the change's own, or after ``attempts`` lost
    conditions) and `busched.api.build.SpecError` for a new spec the scheduler would refuse."""
    subject = S.state_subject(kind, key)
    for _ in range(max(1, attempts)):
        current, seq = await read_object(bus, kind, key)
        new = change(current)
        if new is DELETE:
            if current is None:
                raise Refused(f"no {kind} {key!r}")
            msg = m.delete(kind, current, version)
        else:
            if m.spec_key(new) != key:
                raise Refused(f"{kind} {key!r}: a change may not rename it to {m.spec_key(new)!r}")
            build.validate(kind, new)
            msg = m.upsert(kind, new, version)
        ack = await bus.publish(subject, msg, expected=seq)
        if ack.ok:
            return Changed(None if new is DELETE else new, ack.seq, current)
        if not ack.conflict:
            raise Refused(f"{subject}: {ack.error}")
    raise Refused(f"{kind} {key!r} kept changing under us ({attempts} attempts); try again")


# the fields of a node that its operator owns (`busched node cordon`), which an agent's registration keeps as
# the stream has them: Kubernetes' kubelet likewise never resets spec.unschedulable
OPERATOR_FIELDS = ("unschedulable",)


async def register_nodes(bus: Bus, specs: list[Any], *, version: int = 0, concurrency: int = 64) -> list[str]:
    """Publish an agent's nodes, each keeping the operator-owned fields (`OPERATOR_FIELDS`) of the node
    already on the stream, conditionally (a cordon written meanwhile is read again, not overwritten).
    Reads by direct get on each node's own subject (what an agent may read), all in flight together,
    then publishes them in one pipelined batch; only the nodes whose condition was lost go round again.
    A node whose spec cannot be read (a stream without direct gets) is published as given, as before
    this existed.  The errors, one per node that could not be registered."""
    gate = asyncio.Semaphore(concurrency)

    async def read(spec: Any) -> tuple[Any, int | None]:
        subject = S.state_subject("node", spec.name)
        try:
            async with gate:
                last = await bus.last_state(subject, direct=True)
        except BusError as e:
            log.warning("node %s: cannot read its spec back (%s); registered as given", spec.name, e)
            return spec, None
        if last is None:
            return spec, 0
        try:
            msg = m.decode(last[1])
        except msgspec.DecodeError:
            return spec, last[0]
        if type(msg) is not m.NodeUpsert:
            return spec, last[0]
        return msgspec.structs.replace(spec, **{f: getattr(msg.node, f) for f in OPERATOR_FIELDS}), last[0]

    errors: list[str] = []
    pending = list(specs)
    for _ in range(ATTEMPTS):
        got = await asyncio.gather(*(read(s) for s in pending))
        acks = await bus.publish_all(
            (S.state_subject("node", new.name), m.NodeUpsert(version=version, node=new), None, seq)
            for new, seq in got)
        retry = []
        for spec, ack in zip(pending, acks):
            if ack.conflict:
                retry.append(spec)
            elif not ack.ok:
                errors.append(f"{spec.name}: {ack.error}")
        if not retry:
            return errors
        pending = retry
    return errors + [f"{s.name}: its subject kept changing ({ATTEMPTS} attempts)" for s in pending]
