"""A node's cpu topology as its agent reports it: Volcano's Numatopology (nodeinfo.volcano.sh/v1alpha1).

The wire shape is `busched.api.objects.NumaTopologySpec` (a node spec's ``numaTopology``, Volcano's
field names); `from_spec` turns it into the plain, immutable `NumaTopology` a `NodeInfo` carries
(Volcano's ``NumatopoInfo``).  Cpu sets are frozensets of cpu ids, read from and written as Linux
cpuset lists (``"0-3,8,10-11"``, as ``k8s.io/utils/cpuset`` does).

The task side is one annotation, ``volcano.sh/numa-topology-policy`` (Volcano's ``NumaPolicyKey``;
its job controller copies a vcjob task's ``topologyPolicy`` there), one of `TOPOLOGY_POLICIES`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from busched.api import limits
from busched.api.quantity import QuantityError, milli_value

if TYPE_CHECKING:
    from busched.api import objects as o

__all__ = ["NumaTopology", "CpuInfo", "PodAllocation", "NumaError", "from_spec", "parse_cpuset", "format_cpuset",
           "NUMA_POLICY_KEY", "TOPOLOGY_POLICIES", "CPU_MANAGER_POLICY", "TOPOLOGY_MANAGER_POLICY", "task_policy"]

NUMA_POLICY_KEY = "volcano.sh/numa-topology-policy"
TOPOLOGY_POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
CPU_MANAGER_POLICY = "CPUManagerPolicy"
TOPOLOGY_MANAGER_POLICY = "TopologyManagerPolicy"


class NumaError(ValueError):
    """A topology that cannot be used; the message names the field."""


@dataclass(frozen=True)
class CpuInfo:
    numa: int
    socket: int
    core: int


@dataclass(frozen=True)
class PodAllocation:
    """A task the node's cpu manager has given its cpus (matched by uid, or by namespace and name)."""

    uid: str = ""
    name: str = ""
    namespace: str = ""


@dataclass(frozen=True)
class NumaTopology:
    """Volcano's NumatopoInfo.  ``free``: each resource's allocatable cpus (numares' allocatable);
    ``capacity``: its capacity; ``reserved_cpu``: resReserved's cpu in millicores (0: none)."""

    policies: dict[str, str] = field(default_factory=dict)
    free: dict[str, frozenset[int]] = field(default_factory=dict)
    capacity: dict[str, int] = field(default_factory=dict)
    cpus: dict[int, CpuInfo] = field(default_factory=dict)
    reserved_cpu: int = 0
    pod_allocations: tuple[PodAllocation, ...] = ()

    @property
    def cpu_manager_policy(self) -> str:
        return self.policies.get(CPU_MANAGER_POLICY, "")

    @property
    def topology_policy(self) -> str:
        return self.policies.get(TOPOLOGY_MANAGER_POLICY, "")

    def numa_nodes(self) -> list[int]:
        return sorted({c.numa for c in self.cpus.values()})

    def assigned(self, uid: str, namespace: str, name: str) -> bool:
        """Whether the node reports this task's cpus as given (Volcano's CheckNumaPodAssigned)."""
        return any((a.uid and a.uid == uid) or (a.name == name and a.namespace == namespace)
                   for a in self.pod_allocations)


def task_policy(annotations: dict[str, str]) -> str:
    """The task's topology policy (``""``: none asked)."""
    return annotations.get(NUMA_POLICY_KEY, "")


def parse_cpuset(text: str, where: str = "cpuset") -> frozenset[int]:
    """A Linux cpuset list (``"0-3,8"``; ``""`` is empty) as cpu ids, each below `limits.MAX_CPUS`."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            if text.strip():
                raise NumaError(f"{where}: empty item in {text!r}")
            continue
        lo_s, sep, hi_s = part.partition("-")
        try:
            lo = int(lo_s)
            hi = int(hi_s) if sep else lo
        except ValueError:
            raise NumaError(f"{where}: not a cpuset list: {text!r}") from None
        if lo < 0 or hi < lo or hi >= limits.MAX_CPUS:
            raise NumaError(f"{where}: bad range {part!r} (cpu ids 0..{limits.MAX_CPUS - 1}, low to high)")
        out.update(range(lo, hi + 1))
    return frozenset(out)


def format_cpuset(cpus: frozenset[int] | set[int]) -> str:
    """Cpu ids as a Linux cpuset list, ranges merged (``{0, 1, 2, 5}`` -> ``"0-2,5"``)."""
    parts: list[str] = []
    ids = sorted(cpus)
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


def from_spec(s: o.NumaTopologySpec, where: str) -> NumaTopology:
    """The spec's topology; a NumaError names the field that cannot be read."""
    free: dict[str, frozenset[int]] = {}
    capacity: dict[str, int] = {}
    for name, res in s.numares.items():
        free[name] = parse_cpuset(res.allocatable, f"{where}: numaTopology.numares.{name}.allocatable")
        capacity[name] = res.capacity
    cpus: dict[int, CpuInfo] = {}
    for key, c in s.cpu_detail.items():
        cpu = int(key)
        if cpu >= limits.MAX_CPUS:
            raise NumaError(f"{where}: numaTopology.cpuDetail: cpu id {cpu} above {limits.MAX_CPUS - 1}")
        cpus[cpu] = CpuInfo(c.numa, c.socket, c.core)
    if len({c.numa for c in cpus.values()}) > limits.MAX_NUMA_NODES:
        raise NumaError(f"{where}: numaTopology.cpuDetail: more than {limits.MAX_NUMA_NODES} NUMA nodes")
    reserved = 0
    if "cpu" in s.res_reserved:
        try:
            reserved = milli_value(s.res_reserved["cpu"])
        except QuantityError as e:
            raise NumaError(f"{where}: numaTopology.resReserved.cpu: {e}") from None
        if not 0 <= reserved <= limits.MAX_MILLI_CPU:
            raise NumaError(f"{where}: numaTopology.resReserved.cpu: out of range")
    allocations = tuple(PodAllocation(a.uid, a.name, a.namespace) for a in s.pod_allocations)
    policies: dict[str, str] = {str(k): v for k, v in s.policies.items()}
    return NumaTopology(policies, free, capacity, cpus, int(reserved), allocations)
