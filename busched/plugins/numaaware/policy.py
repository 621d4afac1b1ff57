"""The topology manager's policies: merge the hint providers' NUMA hints and admit or refuse.

Volcano's numaaware/policy (itself the kubelet topology manager's merge).  A hint is a NUMA
affinity (a bit mask of NUMA node ids, as an int; None: no preference) and whether it is
preferred.  A provider answers, per resource, a list of hints, None for "no preference", or an
empty list for "cannot be placed"; a provider with no answer at all has no preference.

`merge` tries every combination of one hint per resource, ANDs the affinities (a None is every
NUMA node), drops empty results and keeps the best: preferred over not preferred, then narrower
(fewer nodes; on a tie the smaller mask, k8s' ``IsNarrowerThan``).  The policies:

- none: admits, no affinity;
- best-effort: the best merged hint, always admitted;
- restricted: the best merged hint, admitted only if preferred;
- single-numa-node: as restricted over the preferred single-node (or no-preference) hints only.

An unknown policy name is none (Volcano's ``GetPolicy`` default).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["TopologyHint", "ProviderHints", "mask_of", "bits_of", "narrower", "filter_providers_hints", "merge",
           "predicate", "POLICIES"]


@dataclass(frozen=True)
class TopologyHint:
    affinity: int | None  # a bit per NUMA node id; None: no preference
    preferred: bool


# one provider's answer: resource -> hints (None: no preference); None or {}: no preference at all
ProviderHints = Mapping[str, list[TopologyHint] | None] | None


def mask_of(*numa_ids: int) -> int:
    m = 0
    for i in numa_ids:
        m |= 1 << i
    return m


def bits_of(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def narrower(a: int, b: int) -> bool:
    """Fewer NUMA nodes; with as many, the lower mask (more lower-numbered nodes)."""
    ca, cb = a.bit_count(), b.bit_count()
    return a < b if ca == cb else ca < cb


def filter_providers_hints(providers_hints: Sequence[ProviderHints]) -> list[list[TopologyHint]]:
    """One list of hints per resource of every provider (Volcano's filterProvidersHints)."""
    out: list[list[TopologyHint]] = []
    for hints in providers_hints:
        if not hints:
            out.append([TopologyHint(None, True)])
            continue
        for resource_hints in hints.values():
            if resource_hints is None:
                out.append([TopologyHint(None, True)])
            elif not resource_hints:
                out.append([TopologyHint(None, False)])
            else:
                out.append(list(resource_hints))
    return out


def merge(numa_nodes: Sequence[int], filtered: Sequence[Sequence[TopologyHint]]) -> TopologyHint:
    """The best hint over every combination of one hint per resource (Volcano's mergeFilteredHints)."""
    every = mask_of(*numa_nodes)
    best = TopologyHint(every, False)
    for permutation in itertools.product(*filtered):
        merged_mask = every
        preferred = True
        for hint in permutation:
            merged_mask &= every if hint.affinity is None else hint.affinity
            preferred = preferred and hint.preferred
        if merged_mask == 0:
            continue
        if preferred and not best.preferred:
            best = TopologyHint(merged_mask, True)
            continue
        if not preferred and best.preferred:
            continue
        assert best.affinity is not None
        if narrower(merged_mask, best.affinity):
            best = TopologyHint(merged_mask, preferred)
    return best


def _none(numa_nodes: Sequence[int], providers_hints: Sequence[ProviderHints]) -> tuple[TopologyHint, bool]:
    return TopologyHint(None, False), True


def _best_effort(numa_nodes: Sequence[int], providers_hints: Sequence[ProviderHints]) -> tuple[TopologyHint, bool]:
    return merge(numa_nodes, filter_providers_hints(providers_hints)), True


def _restricted(numa_nodes: Sequence[int], providers_hints: Sequence[ProviderHints]) -> tuple[TopologyHint, bool]:
    best = merge(numa_nodes, filter_providers_hints(providers_hints))
    return best, best.preferred


def _single_numa_node(numa_nodes: Sequence[int],
                      providers_hints: Sequence[ProviderHints]) -> tuple[TopologyHint, bool]:
    single = [[h for h in hints if h.preferred and (h.affinity is None or h.affinity.bit_count() == 1)]
              for hints in filter_providers_hints(providers_hints)]
    best = merge(numa_nodes, single)
    return best, best.preferred


PolicyFn = Callable[[Sequence[int], Sequence[ProviderHints]], tuple[TopologyHint, bool]]
POLICIES: dict[str, PolicyFn] = {"none": _none, "best-effort": _best_effort, "restricted": _restricted,
                                 "single-numa-node": _single_numa_node}


def predicate(policy: str, numa_nodes: Sequence[int],
              providers_hints: Sequence[ProviderHints]) -> tuple[TopologyHint, bool]:
    """The node's topology manager ``policy`` over the hints: the best hint, and whether it admits."""
    return POLICIES.get(policy, _none)(numa_nodes, providers_hints)
