"""How the shared snapshot lends nodes: each ready node assembled once per version, the last
lending patched where the cache or a session changed a node.

Nodes follow the protocol of busched.fastpath.lending (lend, patch, take back); what is theirs
alone is the listener list every lent node shares, whose first listener (`_NodeWrites`) hears
which nodes a session changed, so a patch looks at those without asking every node.  A mixin of
`SharedMemo`, which holds the maps and decides when to lend afresh and when to patch: the
methods stay methods (no extra call per node).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from busched.api import assemble, build
from busched.api.node import NodeInfo
from busched.api.queue import PriorityClass
from busched.api.task import TaskInfo, completed_status

__all__ = ["NodeLending"]


class _NodeWrites:
    """The first listener of the list every lent node shares: the names of the nodes a session changed
    (every accounting change, the first of which flags a node written, tells the listeners), so the
    next lending looks at those again without asking every node whether it was written."""

    __slots__ = ("names",)

    def __init__(self) -> None:
        self.names: dict[str, None] = {}

    def node_changed(self, n: NodeInfo) -> None:
        self.names[n.name] = None


class NodeLending:
    """The node methods of `SharedMemo` (busched.fastpath.lending), which sets the state they keep."""

    # the memo's state these read and keep (SharedMemo.__init__ says what each is)
    _nodes: dict[str, tuple[Any, int, int, NodeInfo]]
    _node_templates: dict[str, tuple[Any, NodeInfo]]
    _lent_nodes: list[NodeInfo]
    _node_writes: _NodeWrites
    _listeners: list[Any]
    _node_at: dict[str, int]
    plain: bool
    assembled_nodes: int
    _task: Callable[[str, Any, dict[str, PriorityClass]], TaskInfo]  # (busched.fastpath.templates)

    def remember_node(self, name: str, spec: Any, node: NodeInfo) -> None:
        """A node the cache converted to validate it: its next assembly starts from it (a restart's
        5,000 nodes are then converted once, not twice)."""
        self._node_templates[name] = (spec, node)

    def _new_node(self, name: str, spec: Any, index: int) -> NodeInfo:
        """The node without its tasks: the validation's conversion when it is of this spec, else converted."""
        m = self._node_templates.pop(name, None)
        if m is not None and m[0] is spec:
            node = m[1]
            node.index = index  # (all that `build.node_info` takes beside the spec)
            return node
        return build.node_info(spec, index)

    def _node(self, name: str, spec: Any, index: int, cache: Any, classes: dict[str, PriorityClass]) -> NodeInfo:
        m = self._nodes.get(name)
        version = cache.node_version.get(name, 0)
        if m is None or m[0] is not spec or m[1] != version or m[2] != index or m[3].written:
            task_specs = cache.objects["task"]
            node = self._new_node(name, spec, index)
            if m is not None and m[0] is spec:  # never changed in place: shared (the total keeps)
                node.allocatable, node.capacity = m[3].allocatable, m[3].capacity
            keys = cache.node_tasks.get(name, ())
            if len(keys) > 1:
                keys = sorted(keys, key=cache.task_seq.__getitem__)
            pairs: list[tuple[TaskInfo, TaskInfo]] = []
            for tkey in keys:
                t = self._task(tkey, task_specs[tkey], classes)
                # a finished task no longer holds its node (Volcano's cache skips terminated tasks)
                # (the node's copy shares even the requests with the template: a task's requests are
                # replaced, never changed in place; a cold snapshot makes one such copy per placed task)
                if not completed_status(t.status):
                    pairs.append((t, t.copy()))
            assemble.add_copies(node, pairs)  # (node.add_task for each, in one loop)
            node.written = False
            node.listeners = self._listeners
            if m is not None and m[3].listeners is self._listeners:
                m[3].listeners = []  # (the object replaced: no longer heard)
            self._nodes[name] = (spec, version, index, node)
            self.assembled_nodes += 1
            return node
        node = m[3]
        if node.listeners is not self._listeners:
            node.listeners = self._listeners
        return node

    def _fresh_listeners(self) -> dict[str, None]:
        """Empty the nodes' shared listener list (the last session's node arrays) and return the names of
        the nodes the last session changed."""
        writes = self._node_writes
        names, writes.names = writes.names, {}
        self._listeners[:] = [writes]
        return names

    def _lend_nodes(self, cache: Any, classes: dict[str, PriorityClass]) -> list[NodeInfo]:
        out: list[NodeInfo] = []
        self._fresh_listeners()
        for name, spec in cache.objects["node"].items():
            if spec.ready:
                out.append(self._node(name, spec, len(out), cache, classes))
        self._lent_nodes = out
        self._node_at = {n.name: i for i, n in enumerate(out)}
        return list(out)

    def _patch_nodes(self, cache: Any, classes: dict[str, PriorityClass], changed: dict[str, None]
                     ) -> list[NodeInfo]:
        """The last lending with the changed and written nodes looked at again (no node came, went,
        or changed readiness): what it costs is what changed, the written nodes being those the
        shared listener list heard of (`_NodeWrites`).  ``plain``: the reference."""
        out = self._lent_nodes
        again = dict(changed)
        heard = self._fresh_listeners()
        if self.plain:  # the reference: ask every node
            heard = {n.name: None for n in out if n.written}
        again.update(heard)
        specs = cache.objects["node"]
        at = self._node_at
        for name in again:
            i = at.get(name)
            if i is not None:
                out[i] = self._node(name, specs[name], i, cache, classes)
        return list(out)
