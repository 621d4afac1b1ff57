"""`busched apply --prune -l SELECTOR`: mirror an inventory, as ``kubectl apply --prune -l`` does.

After the files are applied, every object on the state stream whose labels match the selector and that
no file of the apply contains is deleted, so that the files are the whole of what the selector
covers.  Only the kinds that carry labels can be pruned (nodes, jobs, tasks), and of those only the
kinds the files have at least one object of: a jobs file never deletes nodes an agent published, and
queues, priority classes, hypernodes and quotas are never pruned.  What the stream holds is read as
`busched.bus.apply.missing_on_bus` reads it: the last message of each subject, an upsert is there.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import nats.js.errors

from busched.api import k8s, selectors
from busched.api.objects import ClusterSpec
from busched.bus import edit
from busched.bus import messages as m
from busched.bus.client import Bus

__all__ = ["PRUNABLE_KINDS", "covered_kinds", "on_bus", "to_prune"]

PRUNABLE_KINDS = (("node", "nodes"), ("job", "jobs"), ("task", "tasks"))  # (kind, ClusterSpec attribute)


def covered_kinds(clusters: Iterable[ClusterSpec]) -> list[tuple[str, str]]:
    """The prunable kinds the files have at least one object of."""
    clusters = list(clusters)
    return [(kind, attr) for kind, attr in PRUNABLE_KINDS if any(getattr(c, attr) for c in clusters)]


async def on_bus(bus: Bus, kind: str, timeout: float = 10.0) -> list[Any]:
    """The specs of the ``kind`` objects on the state stream (whose last message is an upsert we can read)."""
    try:
        return await edit.read_kind(bus, kind, timeout=timeout)  # an undecodable message: not ours to delete
    except nats.js.errors.NotFoundError:
        return []  # no state stream yet: nothing on the bus


async def to_prune(bus: Bus, clusters: list[ClusterSpec], selector: tuple[k8s.Requirement, ...]) -> ClusterSpec:
    """The objects on the bus that the selector matches and no file has, of the kinds the files cover."""
    prune: dict[str, list[Any]] = {}
    for kind, attr in covered_kinds(clusters):
        keep = {m.spec_key(s) for c in clusters for s in getattr(c, attr)}
        specs = await on_bus(bus, kind)
        prune[attr] = sorted(
            (s for s in specs if m.spec_key(s) not in keep and selectors.matches(selector, s.labels)), key=m.spec_key)
    return ClusterSpec(**prune)
