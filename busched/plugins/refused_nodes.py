"""busched-agent-feedback: keeps a task off the nodes whose agent refused it (or never took it) recently.

Volcano has no such plugin: its binder retries a pod that failed to bind on another node through
the pod's conditions.  Here the scheduler knows which nodes refused which task (a rejected bind, a
bind not taken within the lease) and for how long each refusal holds; it hands that to the session
as an input of the snapshot (``ClusterSnapshot.refused``, read through ``Session.refused``), and
this ordinary predicate plugin reads it.  A session without refusals registers no predicate, so the
plugin costs nothing in the predicate loop of a cycle that has none.  Its predicate has a batch twin
(`busched.fastpath.predicates.refused_mask`): a predicate plugin without one would send every task of
the session, not only the refused ones, to the node-by-node search.  The twin is not row-local per
template (its answer is the task's own, not its template's), so a session with refusals chooses task by
task, from masks.
"""

from __future__ import annotations

from busched.api.fit import Code
from busched.api.node import NodeInfo
from busched.api.task import TaskInfo
from busched.fastpath.predicates import refused_mask
from busched.framework import points
from busched.framework.arguments import Arguments
from busched.framework.session import Session, fit_error

NAME = "busched-agent-feedback"


class RefusedNodesPlugin:
    name = NAME
    reads_arguments = ()  # every argument it reads (busched.framework.arguments)
    reads_clock = False  # (its input is the snapshot's; the scheduler's clock decides what it holds)

    def __init__(self, arguments: Arguments) -> None:
        self.arguments = arguments  # (none are read)

    def on_session_open(self, ssn: Session) -> None:
        refused: dict[str, frozenset[str]] = ssn.refused
        if not refused:
            return
        name = self.name

        def predicate(task: TaskInfo, node: NodeInfo) -> None:
            nodes = refused.get(task.key)
            if nodes and node.name in nodes:
                raise fit_error(task, node, f"node {node.name} refused this task recently", name,
                                Code.UnschedulableAndUnresolvable)

        ssn.add_fn(points.PREDICATE, name, predicate,
                   twin=lambda task, arrays, rows: refused_mask(refused.get(task.key), arrays, rows))
