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
Go switches to pdqsort over that inconsistent comparator, may differ: there the comparator's intent,
as a sort key).  Sockets for whole cores
are ordered by their free cores, then socket id.
"""

from __future__ import annotations

import itertools

from busched.api.numa import CpuInfo, NumaTopology
from busched.api.task import TaskInfo
from busched.plugins.numaaware.policy import TopologyHint, bits_of, mask_of

__all__ = ["Topology", "guaranteed_cpus", "topology_hints", "take_by_topology", "allocate", "reserved_cpus",
           "NotEnoughCpus"]


class NotEnoughCpus(Exception):  # noqa: N818 - the cpu manager's own word
    """The free cpus cannot satisfy the request."""


class Topology:
    """k8s' CPUTopology: the cpus, how many physical cores (unique socket/core pairs) and sockets,
    and the cpus of each NUMA node, socket and core id, worked out once."""

    def __init__(self, cpus: dict[int, CpuInfo]) -> None:
        self.cpus = cpus
        self.by_numa: dict[int, set[int]] = {}
        self.by_socket: dict[int, set[int]] = {}
        self.by_core: dict[int, set[int]] = {}
        for i, c in cpus.items():
            self.by_numa.setdefault(c.numa, set()).add(i)
            self.by_socket.setdefault(c.socket, set()).add(i)
            self.by_core.setdefault(c.core, set()).add(i)
        self.num_cpus = len(cpus)
        self.num_cores = len({(c.socket, c.core) for c in cpus.values()})
        self.num_sockets = len(self.by_socket)

    def cpus_per_core(self) -> int:
        return self.num_cpus // self.num_cores if self.num_cores else 0

    def cpus_per_socket(self) -> int:
        return self.num_cpus // self.num_sockets if self.num_sockets else 0


def _in_numa(topo: Topology, numa_ids: list[int]) -> set[int]:
    out: set[int] = set()
    for n in numa_ids:
        out |= topo.by_numa.get(n, set())
    return out


def guaranteed_cpus(task: TaskInfo) -> int:
    """Whole cpus requested; 0 for a fractional request (not aligned)."""
    milli = int(task.resreq.cpu)
    return milli // 1000 if milli % 1000 == 0 else 0


def topology_hints(free: frozenset[int] | set[int], topo: Topology, request: int) -> list[TopologyHint]:
    """Every set of NUMA nodes whose free cpus hold ``request``; preferred: the smallest sets that could
    hold it on an empty node (Volcano's generateCPUTopologyHints)."""
    numa_nodes = sorted(topo.by_numa)
    total = {n: len(topo.by_numa[n]) for n in numa_nodes}
    free_in = dict.fromkeys(numa_nodes, 0)
    for c in free:
        info = topo.cpus.get(c)
        if info is not None:
            free_in[info.numa] += 1
    min_size = len(numa_nodes)
    hints: list[TopologyHint] = []
    for size in range(1, len(numa_nodes) + 1):
        for combo in itertools.combinations(numa_nodes, size):
            if sum(total[n] for n in combo) >= request and size < min_size:
                min_size = size
            if sum(free_in[n] for n in combo) >= request:
                hints.append(TopologyHint(mask_of(*combo), False))
    return [TopologyHint(h.affinity, (h.affinity or 0).bit_count() == min_size) for h in hints]


class _Accumulator:
    """The cpus still free (``details``, by id), what was taken, how many are still needed."""

    def __init__(self, topo: Topology, available: frozenset[int] | set[int], needed: int) -> None:
        self.topo = topo
        self.details = {i: c for i, c in topo.cpus.items() if i in available}
        self.needed = needed
        self.result: set[int] = set()

    def take(self, cpus: set[int]) -> None:
        self.result |= cpus
        for c in cpus:
            self.details.pop(c, None)
        self.needed -= len(cpus)

    def needs(self, n: int) -> bool:
        return self.needed >= n

    def satisfied(self) -> bool:
        return self.needed < 1

    def failed(self) -> bool:
        return self.needed > len(self.details)

    def in_sockets(self, socket: int) -> set[int]:
        return {i for i in self.topo.by_socket.get(socket, ()) if i in self.details}

    def in_cores(self, core: int) -> set[int]:
        return {i for i in self.topo.by_core.get(core, ()) if i in self.details}

    def free_sockets(self) -> list[int]:
        return sorted({c.socket for c in self.details.values()} & set(self.details))

    def free_cores(self) -> list[int]:
        cores_of: dict[int, set[int]] = {}
        for c in self.details.values():
            cores_of.setdefault(c.socket, set()).add(c.core)
        for s in cores_of:
            cores_of[s] &= set(self.details)
        sockets = sorted(cores_of, key=lambda s: (len(cores_of[s]), s))
        return [core for s in sockets for core in sorted(cores_of[s])]

    def free_cpus(self) -> list[int]:
        topo = self.topo
        free_on_socket: dict[int, int] = {}
        free_on_core: dict[int, int] = {}
        for c in self.details.values():
            free_on_socket[c.socket] = free_on_socket.get(c.socket, 0) + 1
            free_on_core[c.core] = free_on_core.get(c.core, 0) + 1
        keys = {}
        for core in sorted(free_on_core):
            socket = topo.cpus[min(topo.by_core[core])].socket
            keys[core] = (len(topo.by_socket[socket] & self.result), free_on_socket.get(socket, 0),
                          free_on_core[core], socket, core)
        cores = list(keys)
        if len(cores) <= 12:
            def less(i: int, j: int) -> bool:
                a, b = keys[i], keys[j]
                return a[0] > b[0] or a[1] < b[1] or a[2] < b[2] or a[3] < b[3] or a[4] < b[4]

            for i in range(1, len(cores)):  # Go's insertion sort, as sort.Slice sorts up to 12 items
                j = i
                while j > 0 and less(cores[j], cores[j - 1]):
                    cores[j], cores[j - 1] = cores[j - 1], cores[j]
                    j -= 1
        else:  # the comparator's intent, as a key
            cores.sort(key=lambda k: (-keys[k][0],) + keys[k][1:])
        return [cpu for core in cores for cpu in sorted(self.in_cores(core))]


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
            acc.take(acc.in_sockets(s))
            if acc.satisfied():
                return acc.result
            if not acc.needs(per_socket):
                break
    if acc.needs(per_core):
        for core in acc.free_cores():
            acc.take(acc.in_cores(core))
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
            aligned = set(free) & _in_numa(topo, bits_of(best.affinity))
            result |= take_by_topology(topo, aligned, min(request, len(aligned)))
        result |= take_by_topology(topo, set(free) - result, request - len(result))
    except NotEnoughCpus:
        return set()
    return result
