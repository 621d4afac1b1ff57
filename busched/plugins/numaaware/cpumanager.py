"""The cpu manager hint provider: which NUMA nodes can hold a task's cpus, and which cpus it gets.

Volcano's numaaware/provider/cpumanager (the kubelet static cpu manager's hints and its
topology-aware best fit, ``takeByTopology``).  Only a whole number of cpus is aligned
(``guaranteed_cpus``); the node's reserved cpus (``resReserved.cpu``, rounded up) are taken out of
the free ones first, chosen by the same best fit over all cpus.

`take_by_topology` keeps Volcano's choices, quirks included, so a bind lands where Volcano's
would: whole "sockets" are the socket ids that are also free cpu ids, whole "cores" the core ids
that are also free cpu ids (Volcano intersects ids of different kinds), and the single cpus are
ordered by Volcano's comparator (socket affinity with what was taken, then fewer free cpus on the
socket, then on the core, then socket id, core id, each an "or" rather than a tie-break), sorted
as Go's ``sort.Slice`` sorts up to 12 items (an insertion sort; its answer for more cores, where
Go switches to pdqsort over that inconsistent comparator, may differ).  Sockets for whole cores
are ordered by their free cores, then socket id.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from busched.api.numa import CpuInfo, NumaTopology
from busched.api.task import TaskInfo
from busched.plugins.numaaware.policy import TopologyHint, bits_of, mask_of

__all__ = ["Topology", "guaranteed_cpus", "topology_hints", "take_by_topology", "allocate", "reserved_cpus",
           "NotEnoughCpus"]


class NotEnoughCpus(Exception):  # noqa: N818 - the cpu manager's own word
    """The free cpus cannot satisfy the request."""


@dataclass(frozen=True)
class Topology:
    """k8s' CPUTopology: the cpus, how many physical cores (unique socket/core pairs) and sockets."""

    cpus: dict[int, CpuInfo]

    @property
    def num_cpus(self) -> int:
        return len(self.cpus)

    @property
    def num_cores(self) -> int:
        return len({(c.socket, c.core) for c in self.cpus.values()})

    @property
    def num_sockets(self) -> int:
        return len({c.socket for c in self.cpus.values()})

    def cpus_per_core(self) -> int:
        return self.num_cpus // self.num_cores if self.num_cores else 0

    def cpus_per_socket(self) -> int:
        return self.num_cpus // self.num_sockets if self.num_sockets else 0


def _in_numa(cpus: dict[int, CpuInfo], numa_ids: set[int] | list[int]) -> set[int]:
    return {i for i, c in cpus.items() if c.numa in numa_ids}


def _in_sockets(cpus: dict[int, CpuInfo], sockets: set[int]) -> set[int]:
    return {i for i, c in cpus.items() if c.socket in sockets}


def _in_cores(cpus: dict[int, CpuInfo], cores: set[int]) -> set[int]:
    return {i for i, c in cpus.items() if c.core in cores}


def guaranteed_cpus(task: TaskInfo) -> int:
    """Whole cpus requested; 0 for a fractional request (not aligned)."""
    milli = int(task.resreq.cpu)
    return milli // 1000 if milli % 1000 == 0 else 0


def topology_hints(free: frozenset[int] | set[int], topo: Topology, request: int) -> list[TopologyHint]:
    """Every set of NUMA nodes whose free cpus hold ``request``; preferred: the smallest sets that could
    hold it on an empty node (Volcano's generateCPUTopologyHints)."""
    numa_nodes = sorted({c.numa for c in topo.cpus.values()})
    min_size = len(numa_nodes)
    hints: list[TopologyHint] = []
    for size in range(1, len(numa_nodes) + 1):
        for combo in itertools.combinations(numa_nodes, size):
            in_mask = _in_numa(topo.cpus, list(combo))
            if len(in_mask) >= request and size < min_size:
                min_size = size
            matching = sum(1 for c in free if c in topo.cpus and topo.cpus[c].numa in combo)
            if matching >= request:
                hints.append(TopologyHint(mask_of(*combo), False))
    return [TopologyHint(h.affinity, (h.affinity or 0).bit_count() == min_size) for h in hints]


class _Accumulator:
    def __init__(self, topo: Topology, available: frozenset[int] | set[int], needed: int) -> None:
        self.topo = topo
        self.details = {i: c for i, c in topo.cpus.items() if i in available}
        self.needed = needed
        self.result: set[int] = set()

    def take(self, cpus: set[int]) -> None:
        self.result |= cpus
        self.details = {i: c for i, c in self.details.items() if i not in self.result}
        self.needed -= len(cpus)

    def needs(self, n: int) -> bool:
        return self.needed >= n

    def satisfied(self) -> bool:
        return self.needed < 1

    def failed(self) -> bool:
        return self.needed > len(self.details)

    def free_sockets(self) -> list[int]:
        return sorted({c.socket for c in self.details.values()} & set(self.details))

    def free_cores(self) -> list[int]:
        def cores_of(s: int) -> set[int]:
            return {c.core for c in self.details.values() if c.socket == s} & set(self.details)
        sockets = sorted({c.socket for c in self.details.values()}, key=lambda s: (len(cores_of(s)), s))
        return [core for s in sockets for core in sorted(cores_of(s))]

    def free_cpus(self) -> list[int]:
        all_cpus = self.topo.cpus
        keys = {}
        for core in sorted({c.core for c in self.details.values()}):
            socket = all_cpus[min(_in_cores(all_cpus, {core}))].socket
            keys[core] = (len(_in_sockets(all_cpus, {socket}) & self.result),
                          len(_in_sockets(self.details, {socket})), len(_in_cores(self.details, {core})), socket, core)

        def less(i: int, j: int) -> bool:
            a, b = keys[i], keys[j]
            return a[0] > b[0] or a[1] < b[1] or a[2] < b[2] or a[3] < b[3] or a[4] < b[4]

        cores = list(keys)
        for i in range(1, len(cores)):  # Go's insertion sort, as sort.Slice does it for up to 12 items
            j = i
            while j > 0 and less(cores[j], cores[j - 1]):
                cores[j], cores[j - 1] = cores[j - 1], cores[j]
                j -= 1
        return [cpu for core in cores for cpu in sorted(_in_cores(self.details, {core}))]


def take_by_topology(topo: Topology, available: frozenset[int] | set[int], n: int) -> set[int]:
    """``n`` of the ``available`` cpus, whole sockets first, then whole cores, then single cpus."""
    acc = _Accumulator(topo, available, n)
    if acc.satisfied():
        return acc.result
    if acc.failed():
        raise NotEnoughCpus("not enough cpus available to satisfy request")
    per_socket, per_core = topo.cpus_per_socket(), topo.cpus_per_core()
    if acc.needs(per_socket):
        for s in acc.free_sockets():
            acc.take(_in_sockets(acc.details, {s}))
            if acc.satisfied():
                return acc.result
            if not acc.needs(per_socket):
                break
    if acc.needs(per_core):
        for core in acc.free_cores():
            acc.take(_in_cores(acc.details, {core}))
            if acc.satisfied():
                return acc.result
            if not acc.needs(per_core):
                break
    for cpu in acc.free_cpus():
        if acc.needs(1):
            acc.take({cpu})
        if acc.satisfied():
            return acc.result
    raise NotEnoughCpus("failed to allocate cpus")


def reserved_cpus(numa: NumaTopology, topo: Topology) -> set[int]:
    """The cpus the node keeps for itself: resReserved's cpu rounded up, chosen by the best fit."""
    if numa.reserved_cpu <= 0:
        return set()
    try:
        return take_by_topology(topo, set(topo.cpus), -(-numa.reserved_cpu // 1000))
    except NotEnoughCpus:
        return set()


def allocate(request: int, best: TopologyHint, free: frozenset[int] | set[int], topo: Topology) -> set[int]:
    """The cpus for ``request``: as many as fit in the best hint's NUMA nodes, the rest anywhere;
    empty when they cannot all be found (Volcano's cpuMng.Allocate)."""
    result: set[int] = set()
    try:
        if best.affinity is not None:
            aligned = set(free) & _in_numa(topo.cpus, bits_of(best.affinity))
            result |= take_by_topology(topo, aligned, min(request, len(aligned)))
        result |= take_by_topology(topo, set(free) - result, request - len(result))
    except NotEnoughCpus:
        return set()
    return result
