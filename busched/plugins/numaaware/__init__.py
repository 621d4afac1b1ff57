"""numa-aware: place Guaranteed tasks where the node's topology manager will admit their cpus.

Volcano's numaaware plugin.  A node reports its cpu topology as Volcano's Numatopology
(``NodeInfo.numa``, busched.api.numa): the kubelet's cpu manager and topology manager policies,
the free cpus (``numares.cpu.allocatable``), where each cpu sits (``cpuDetail``), the reserved
cpus and the tasks it has given cpus (``podAllocations``).  A task asks for a topology policy
with the annotation ``volcano.sh/numa-topology-policy``.

- predicate (Guaranteed tasks only; others pass): a task asking a policy other than none needs
  a node with a topology, the static cpu manager policy, the same topology manager policy and
  free cpus (else an Error status naming which); a task asking none is aligned only on such a node
  whose topology policy is not none (elsewhere it passes untouched).  On that node the cpu
  manager's hints are merged by the node's policy (policy.py); a refusal is
  UnschedulableAndUnresolvable "container <task> cannot be assigned by numa", an admission picks
  the task's cpus (cpumanager.allocate) and remembers them for the node.
- batch node order (tasks asking a policy other than none, once the predicate picked cpus): a node
  scores fewer NUMA nodes spanned higher, ``(100 - 100 * n // max n) * weight`` (every node 100
  when none spans any).
- allocate / deallocate in the session: the picked cpus leave / rejoin the node's free cpus, so
  the next task on that node sees them taken.
- session close: the tasks placed in the session, with their cpus, are kept across sessions
  (Volcano's UnassignedNumaPods, here in the plugin's cross-cycle state) and their cpus stay
  taken on their node until the node reports every one of them in ``podAllocations``; an entry
  whose task is gone, finished or on another node is dropped (Volcano keeps it).  The bind itself names no cpus: the
  node's cpu manager picks them, with the same policy (docs/agents.md, NUMA topology).

Argument (Volcano's name): ``weight`` (integer, default 1), multiplies the score.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from busched.api import numa as numa_api
from busched.api.fit import Code
from busched.api.node import NodeInfo
from busched.api.qos import GUARANTEED
from busched.api.task import TaskInfo, TaskStatus
from busched.framework import points
from busched.framework.arguments import Arguments
from busched.framework.decision import fit_error
from busched.framework.plugin_state import state_of
from busched.framework.session import EventHandler, Session
from busched.plugins.numaaware import cpumanager, policy

__all__ = ["NumaAwarePlugin", "NAME", "WEIGHT_KEY", "filter_node", "normalize_reverse", "numa_span"]

NAME = "numa-aware"
WEIGHT_KEY = "weight"
MAX_NODE_SCORE = 100
CPU = "cpu"
_FINISHED = frozenset({TaskStatus.Succeeded, TaskStatus.Failed})


def _asks_alignment(task: TaskInfo) -> bool:
    return numa_api.task_policy(task.annotations) not in ("", "none")


def filter_node(task: TaskInfo, node: NodeInfo, free: dict[str, dict[str, frozenset[int]]]) -> tuple[bool, str]:
    """Whether the task is aligned on this node, and if not, why it cannot be placed there ("" when it
    can, unaligned) (Volcano's filterNodeByPolicy)."""
    topo = node.numa
    if _asks_alignment(task):
        if topo is None:
            return False, "numa info is empty"
        if topo.cpu_manager_policy != "static":
            return False, "cpu manager policy isn't static"
        asked = numa_api.task_policy(task.annotations)
        if asked != topo.topology_policy:
            return False, f"task topology policy[{asked}] is different with node[{topo.topology_policy}]"
        if node.name not in free:
            return False, "no topo information"
        if not free[node.name].get(CPU):
            return False, "cpu allocatable map is empty"
        return True, ""
    if topo is None or topo.cpu_manager_policy != "static" or topo.topology_policy in ("none", ""):
        return False, ""
    return True, ""


def numa_span(cpus: set[int] | frozenset[int], topo: numa_api.NumaTopology | None) -> int:
    """How many NUMA nodes the cpus sit on."""
    if topo is None:
        return 0
    return len({topo.cpus[c].numa for c in cpus if c in topo.cpus})


def normalize_reverse(counts: list[int]) -> list[int]:
    """Volcano's NormalizeScore(100, reverse): the most gets 0, none gets 100."""
    top = max(counts, default=0)
    if top == 0:
        return [MAX_NODE_SCORE] * len(counts)
    return [MAX_NODE_SCORE - MAX_NODE_SCORE * c // top for c in counts]


@dataclass
class _Pending:
    """A task placed with cpus the node has not reported yet (Volcano's UnassignedNumaPods entry)."""

    node: str
    cpus: frozenset[int]
    namespace: str
    name: str


@dataclass
class _SessionState:
    free: dict[str, dict[str, frozenset[int]]] = field(default_factory=dict)  # node -> resource -> free cpus
    assigned: dict[str, dict[str, frozenset[int]]] = field(default_factory=dict)  # task uid -> node -> cpus
    bound: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # task uid -> node, namespace, name
    layouts: dict[str, tuple[cpumanager.Topology, frozenset[int]]] = field(default_factory=dict)  # + reserved

    def layout(self, node: NodeInfo, topo: numa_api.NumaTopology) -> tuple[cpumanager.Topology, frozenset[int]]:
        """The node's cpu layout and reserved cpus, worked out once a session."""
        hit = self.layouts.get(node.name)
        if hit is None:
            layout = cpumanager.Topology(topo.cpus)
            hit = self.layouts[node.name] = (layout, frozenset(cpumanager.reserved_cpus(topo, layout)))
        return hit


class NumaAwarePlugin:
    name = NAME
    reads_arguments = (WEIGHT_KEY,)  # every argument it reads (busched.framework.arguments)
    reads_clock = True  # its cpus taken stay taken from one cycle to the next (see the module docstring)

    def __init__(self, arguments: Arguments) -> None:
        self.weight = arguments.get_int(WEIGHT_KEY, 1)
        self._state = _SessionState()

    def on_session_open(self, ssn: Session) -> None:
        st = self._state = _SessionState()
        pending: dict[str, _Pending] = state_of(ssn, self.name).setdefault("pending", {})
        _settle(pending, ssn)
        for node in ssn.nodes.values():
            if node.numa is not None:
                st.free[node.name] = dict(node.numa.free)
        for p in pending.values():
            sets = st.free.get(p.node)
            if sets is not None and CPU in sets:
                sets[CPU] = sets[CPU] - p.cpus

        def on_allocate(task: TaskInfo) -> None:
            cpus = st.assigned.get(task.uid, {}).get(task.node_name)
            if cpus is None:
                return
            sets = st.free.get(task.node_name)
            if sets is not None and CPU in sets:
                sets[CPU] = sets[CPU] - cpus
            st.bound[task.uid] = (task.node_name, task.namespace, task.name)

        def on_deallocate(task: TaskInfo) -> None:
            cpus = st.assigned.get(task.uid, {}).get(task.node_name)
            if cpus is None:
                return
            sets = st.free.get(task.node_name)
            if sets is not None and CPU in sets:
                sets[CPU] = sets[CPU] | cpus
            st.bound.pop(task.uid, None)

        ssn.add_event_handler(EventHandler(allocate=on_allocate, deallocate=on_deallocate))
        ssn.add_fn(points.PREDICATE, self.name, lambda task, node: self._predicate(st, task, node))
        weight = self.weight

        def batch_node_order(task: TaskInfo, nodes: list[NodeInfo]) -> dict[str, float]:
            by_node = st.assigned.get(task.uid)
            if by_node is None or not _asks_alignment(task):
                return {}
            counts = [numa_span(by_node.get(n.name, frozenset()), n.numa) for n in nodes]
            return {n.name: float(s * weight) for n, s in zip(nodes, normalize_reverse(counts), strict=True)}

        ssn.add_fn(points.BATCH_NODE_ORDER, self.name, batch_node_order)

    def _predicate(self, st: _SessionState, task: TaskInfo, node: NodeInfo) -> None:
        if task.qos != GUARANTEED:
            return
        fit, why = filter_node(task, node, st.free)
        if not fit:
            if why:
                raise fit_error(task, node, why, self.name, Code.Error)
            return
        topo = node.numa
        assert topo is not None
        free = st.free[node.name].get(CPU, frozenset())
        layout, reserved = st.layout(node, topo)
        available = free - reserved
        request = cpumanager.guaranteed_cpus(task)
        hints: dict[str, list[policy.TopologyHint] | None] | None = None
        if request > 0 and CPU in st.free[node.name]:
            hints = {CPU: cpumanager.topology_hints(available, layout, request)}
        best, admit = policy.predicate(topo.topology_policy, topo.numa_nodes(), [hints])
        if not admit:
            raise fit_error(task, node, f"container {task.name} cannot be assigned by numa", self.name,
                            Code.UnschedulableAndUnresolvable)
        cpus = cpumanager.allocate(request, best, available, layout)
        st.assigned.setdefault(task.uid, {})[node.name] = frozenset(cpus)

    def on_session_close(self, ssn: Session) -> None:
        st = self._state
        pending: dict[str, _Pending] = state_of(ssn, self.name).setdefault("pending", {})
        for uid, (node_name, namespace, name) in st.bound.items():
            cpus = st.assigned.get(uid, {}).get(node_name)
            if cpus is not None:
                pending[uid] = _Pending(node_name, cpus, namespace, name)
        self._state = _SessionState()


def _settle(pending: dict[str, _Pending], ssn: Session) -> None:
    """Forget the placements their node now reports (all of a node's at once, as Volcano clears them
    only when every one is reported), and those whose task is gone, finished or on another node
    (Volcano keeps these until the node reports the others; a task still waiting keeps its entry)."""
    if not pending:
        return
    tasks = {uid: t for job in ssn.jobs.values() for uid, t in job.tasks.items() if uid in pending}
    for uid, p in list(pending.items()):
        t = tasks.get(uid)
        if (t is None or p.node not in ssn.nodes or t.status in _FINISHED
                or (t.node_name and t.node_name != p.node)):
            del pending[uid]
    by_node: dict[str, list[str]] = {}
    for uid, p in pending.items():
        by_node.setdefault(p.node, []).append(uid)
    for node_name, uids in by_node.items():
        topo = ssn.nodes[node_name].numa
        if topo is not None and all(topo.assigned(u, pending[u].namespace, pending[u].name) for u in uids):
            for u in uids:
                del pending[u]
