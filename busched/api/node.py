"""Nodes with Volcano's accounting.

idle + used = allocatable; a Releasing task is still in ``used`` and also in
``releasing``; a Pipelined task only in ``pipelined``.  ``future_idle`` =
idle + releasing - pipelined is what a pipelined task may count on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from busched.api.numa import NumaTopology
from busched.api.resource import Resource
from busched.api.task import TaskInfo, TaskStatus

__all__ = ["NodeInfo", "NodeUsage", "NodeAccountingError"]

# (an enum member read from its class costs a metaclass lookup: read once here for the hot paths)
_BINDING, _RELEASING, _PIPELINED = TaskStatus.Binding, TaskStatus.Releasing, TaskStatus.Pipelined


class NodeAccountingError(RuntimeError):
    """A task could not be added to (or moved on) a node."""


@dataclass(frozen=True)
class NodeUsage:
    """Measured load (Volcano's NodeUsage): when (epoch seconds), and cpu and memory percent per period."""

    time: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)
    memory: dict[str, float] = field(default_factory=dict)


@dataclass(eq=False)
class NodeInfo:
    name: str
    allocatable: Resource
    capacity: Resource
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, Any]] = field(default_factory=list)
    unschedulable: bool = False
    images: dict[str, int] = field(default_factory=dict)  # image name -> size in bytes
    ready: bool = True
    usage: NodeUsage | None = None  # measured load, when the node reports it
    numa: NumaTopology | None = None  # cpu topology (Volcano's Numatopology), when the node reports it
    idle: Resource = field(default_factory=Resource)
    used: Resource = field(default_factory=Resource)
    releasing: Resource = field(default_factory=Resource)
    pipelined: Resource = field(default_factory=Resource)
    tasks: dict[str, TaskInfo] = field(default_factory=dict)
    index: int = 0  # position in the node list (scan order, array row)
    # Observers told of every accounting change (the session's node arrays).  Nodes may share one
    # list (busched.fastpath.lending lends all its nodes one, emptied at once): a listener is told
    # which node changed, and registers once per distinct list.
    listeners: list[Any] = field(default_factory=list, repr=False)
    # set by every accounting change: a node lent to a session (busched.fastpath.lending) that comes
    # back written is assembled afresh
    written: bool = field(default=False, repr=False)
    # values derived from the node and its tasks, kept while they do not change (busched.fastpath.memo)
    derived: dict[Any, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def new(cls, name: str, allocatable: Resource, capacity: Resource | None = None, **kw: Any) -> NodeInfo:
        n = cls(name=name, allocatable=allocatable, capacity=capacity or allocatable.clone(), **kw)
        n.idle = allocatable.clone()
        return n

    def future_idle(self) -> Resource:
        return self.idle.clone().add(self.releasing).sub(self.pipelined)

    def add_task(self, task: TaskInfo, copy: TaskInfo | None = None) -> None:
        """Account a task on this node; the node keeps its own copy (Volcano's AddTask): ``task.copy()``,
        or ``copy`` when the caller made one (a copy of ``task`` no one else holds).  The copy shares
        the task's requests: a task's requests are replaced, never changed in place (the lent nodes'
        copies share them too, busched.fastpath.lending_nodes), and every task allocate places comes
        here, where a clone of the two made two objects no one writes."""
        name = self.name
        if task.node_name and task.node_name != name:
            raise NodeAccountingError(f"task {task.key} already on different node {task.node_name}")
        tasks = self.tasks
        if task.uid in tasks:
            raise NodeAccountingError(f"task {task.key} already on node {name}")
        ti = task.copy() if copy is None else copy
        s, req = ti.status, ti.resreq
        if s == _BINDING and not req.less_equal(self.idle):
            raise NodeAccountingError(
                f"node {name} resources are not enough to put task {ti.key}: idle {self.idle}, req {req}")
        # (after every check: a node first written is one whose listeners hear of it, see `listeners`)
        if not self.written:
            self._first_write()
            tasks = self.tasks
        if s == _RELEASING:
            self.idle.sub(req)
            self.releasing.add(req)
            self.used.add(req)
        elif s == _PIPELINED:
            self.pipelined.add(req)
        else:
            # idle.sub(req) and used.add(req) written out (the same arithmetic in the same order)
            idle, used = self.idle, self.used
            idle.cpu -= req.cpu
            idle.memory -= req.memory
            used.cpu += req.cpu
            used.memory += req.memory
            rs = req.scalars
            if rs:
                have = idle.scalars
                if have:
                    for n, v in rs.items():
                        have[n] = have.get(n, 0.0) - v
                have = used.scalars
                for n, v in rs.items():
                    have[n] = have.get(n, 0.0) + v
        task.node_name = name
        ti.node_name = name
        tasks[ti.uid] = ti
        for ls in self.listeners:
            ls.node_changed(self)

    def remove_task(self, task: TaskInfo) -> None:
        if task.uid not in self.tasks:
            return
        if not self.written:
            self._first_write()
        ti = self.tasks.pop(task.uid)
        s = ti.status
        if s == _RELEASING:
            self.releasing.sub(ti.resreq)
            self.idle.add(ti.resreq)
            self.used.sub(ti.resreq)
        elif s == _PIPELINED:
            self.pipelined.sub(ti.resreq)
        else:
            self.idle.add(ti.resreq)
            self.used.sub(ti.resreq)
        for ls in self.listeners:
            ls.node_changed(self)

    def _first_write(self) -> None:
        """The task map as it was stays unchanged (a session's pod view reads it as of its open);
        the node changes from here on a copy, and says it was written."""
        self.written = True
        self.tasks = dict(self.tasks)
        if self.derived:
            self.derived = {}

    def update_task(self, task: TaskInfo) -> None:
        self.remove_task(task)
        self.add_task(task)

    def clone(self) -> NodeInfo:
        n = NodeInfo.new(self.name, self.allocatable.clone(), self.capacity.clone(), labels=dict(self.labels),
                         annotations=dict(self.annotations), taints=list(self.taints),
                         unschedulable=self.unschedulable, images=dict(self.images), ready=self.ready,
                         usage=self.usage, numa=self.numa, index=self.index)
        for t in self.tasks.values():
            n.add_task(t)
        return n

    def __repr__(self) -> str:
        return (f"Node({self.name} idle={self.idle} used={self.used} releasing={self.releasing} "
                f"pipelined={self.pipelined})")
