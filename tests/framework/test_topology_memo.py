"""The topology kept across sessions (`build_topology` with the cache's cross-cycle ``memo``) equals
one built afresh, session after session, as nodes are renamed, reordered, added and removed and
the hypernodes go from none to some and back."""

from __future__ import annotations

import random
from typing import Any

import pytest

from busched.api.node import NodeInfo
from busched.api.queue import HyperNode
from busched.api.resource import Resource
from busched.framework.hypernodes import Topology, build_topology


def _view(topo: Topology) -> Any:
    return (
        {n: (h.tier, h.tier_name, h.parent, list(h.children)) for n, h in topo.hypernodes.items()},
        topo.set_by_tier, topo.tiers, topo.tier_name_map, topo.ready,
        {h: [id(n) for n in ns] for h, ns in topo.real_nodes_list.items()},  # the session's own node objects
        topo.real_nodes_set, dict(topo.node_lowest), list(topo.node_lowest),
    )


def _specs(rng: random.Random, names: list[str]) -> list[HyperNode]:
    if rng.random() < 0.4:
        return []
    racks = [f"r{i}" for i in range(rng.randrange(1, 4))]
    pool = names + ["gone-node"]  # a member that is no session node
    out = [HyperNode(r, 1, "rack", rng.sample(pool, rng.randrange(0, min(4, len(pool)) + 1))) for r in racks]
    out.append(HyperNode("spine", 2, "spine", racks))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_kept_topology_equals_a_fresh_one(seed: int) -> None:
    rng = random.Random(seed)
    memo: dict[str, Any] = {}
    names = [f"n{i}" for i in range(rng.randrange(2, 8))]
    specs: list[HyperNode] = []
    for step in range(20):
        change = rng.randrange(5)
        if change == 0:
            rng.shuffle(names)
        elif change == 1:
            names[rng.randrange(len(names))] = f"m{seed}-{step}"  # renamed
        elif change == 2:
            names.append(f"a{seed}-{step}")
        elif change == 3 and len(names) > 1:
            names.pop(rng.randrange(len(names)))
        if step == 0 or rng.random() < 0.5:
            specs = _specs(rng, names)  # none, some, other members
        nodes = [NodeInfo.new(n, Resource(2000, 4 << 30)) for n in names]
        kept = build_topology(specs, nodes, memo)
        assert _view(kept) == _view(build_topology(specs, nodes)), (step, names, specs)


def test_hypernodes_appearing_over_the_same_names() -> None:
    """The same names: no hypernodes (the shared lowest map), then some, then none again."""
    memo: dict[str, Any] = {}
    names = ["n1", "n2", "n3"]
    rack = [HyperNode("r0", 1, "rack", ["n2"])]
    for specs in ([], rack, [], rack, []):
        nodes = [NodeInfo.new(n, Resource(2000, 4 << 30)) for n in names]
        assert _view(build_topology(specs, nodes, memo)) == _view(build_topology(specs, nodes))
