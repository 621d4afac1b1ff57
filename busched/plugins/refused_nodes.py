"""busched-agent-feedback: keeps a task off the nodes whose agent refused it (or never took it) recently.

Volcano has no such plugin: its binder retries a pod that failed to bind on another node through
the pod's conditions.  Here the scheduler knows which nodes refused which task (a rejected bind, a
bind not taken within the lease) and for how long each refusal holds; it hands that to the session
as an input of the snapshot (``ClusterSnapshot.refused``, read through ``Session.refused``), and
this ordinary predicate plugin reads it.  A session without refusals registers no predicate, so the
plugin costs nothing in the predicate loop of a cycle that has none.
"""

from __future__ import annotations

from busched.api.fit import Code
from busched.api.node import NodeInfo
from busched.api.task import TaskInfo
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

        ssn.add_fn(points.PREDICATE, name, predicate)
