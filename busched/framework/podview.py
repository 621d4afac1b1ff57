"""The session's pod view: the Kubernetes view of every node's pods (Volcano's ``ssn.NodeMap``).

Filters and scores that look at other pods (the predicates plugin's
InterPodAffinity, PodTopologySpread and NodePorts, nodeorder's affinity,
spread, balanced-allocation and image-locality scores) read one view per
session, `session_pods(ssn)`.  It starts from the snapshot; the predicates
plugin's event handlers keep it current as the session allocates and evicts, so
tasks placed earlier in the session count (without that plugin it stays as the
session opened, as in Volcano).  It lives in the framework so that the plugins
reading it need not import one another.

The view keeps per-node sums of pod requests and the pods' parsed affinity
terms, and is reassembled incrementally from the last session's
(busched.fastpath.memo) where the nodes are the same.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, overload

import numpy as np

from busched.api import k8s
from busched.api.k8s import DEFAULT_MEMORY, DEFAULT_MILLI_CPU, non_zero_requests, pod_requests
from busched.api.node import NodeInfo
from busched.api.resource import PODS
from busched.api.task import TaskInfo, TaskStatus
from busched.fastpath.memo import Pairs, node_value
from busched.framework import podcolumns
from busched.framework.podsums import sum_pods
from busched.framework.session import Session

T = TypeVar("T")

__all__ = ["SessionPods", "PodTerms", "pod_terms", "session_pods", "count_matching", "pod_requests",
           "non_zero_requests"]


# -- the Kubernetes view of each node's pods -------------------------------------------------------
@dataclass(frozen=True)
class PodTerms:
    """A pod's parsed inter-pod affinity terms (as an existing pod, not the one being scheduled)."""

    has_pod_affinity: bool  # any podAffinity or podAntiAffinity block (k8s PodsWithAffinity)
    required_affinity: list[k8s.AffinityTerm]
    required_anti: list[k8s.AffinityTerm]
    preferred_affinity: list[k8s.AffinityTerm]
    preferred_anti: list[k8s.AffinityTerm]


_NO_TERMS = PodTerms(False, [], [], [], [])


def pod_terms(task: TaskInfo, incoming: bool = False) -> PodTerms:
    aff, ns = task.affinity, task.namespace
    if not aff:
        return _NO_TERMS  # most pods: nothing to parse (shared: terms are only read)
    return PodTerms(bool(aff) and (aff.get("podAffinity") is not None or aff.get("podAntiAffinity") is not None),
                    k8s.pod_affinity_terms(aff, ns, "podAffinity", True, incoming),
                    k8s.pod_affinity_terms(aff, ns, "podAntiAffinity", True, incoming),
                    k8s.pod_affinity_terms(aff, ns, "podAffinity", False, incoming),
                    k8s.pod_affinity_terms(aff, ns, "podAntiAffinity", False, incoming))


class SessionPods:
    """Volcano's ``ssn.NodeMap``: the pods the Kubernetes plugins see on each node.

    As of the session's open (every task on every node, whatever its status); changed only by
    the predicates plugin's event handlers. The lists of nodes holding pods with (anti-)affinity
    are fixed at open, as Volcano's snapshot lists are.

    Nothing is copied at open: a node's pods are its task map as of the open (a node that
    changes puts a new map in place, `NodeInfo.add_task`, so the one read here stays as it was),
    copied for this view on the view's first change there (`_Pods`).  Which node a pod is on is
    asked of the pod only for pods the view has moved; a pod it has not is where it was at open,
    on the node its ``node_name`` names (sessions move a placed task's node only after the view
    has removed it).  What every node's pods say (affinity, images) is kept from one session to
    the next while the nodes do not change (busched.fastpath.memo).
    """

    def __init__(self, ssn: Session) -> None:
        self._ssn = ssn  # the view lives in ssn.shared: it dies with the session
        self.nodes: dict[str, NodeInfo] = ssn.nodes
        self.node_list = list(ssn.node_list)
        nodes = list(ssn.node_list)
        self.pods = _Pods(ssn.incremental("pods.open", nodes, _open_pods, _open_pods_update))
        self._moved: dict[str, str | None] = {}  # pod -> node (None: gone) for the pods the view moved
        self._terminating: set[str] | None = None
        self._terms: dict[str, PodTerms] = {}
        self._sums: dict[str, tuple[int, int, int, int, dict[str, int]]] = {}
        # a pod without an affinity block has no terms (pod_terms): most pods are not even parsed
        self.affinity_nodes, self.anti_affinity_nodes = ssn.incremental(
            "pods.affinity", nodes, _affinity_nodes, _affinity_update)[:2]
        self.images = ssn.incremental("pods.images", nodes, _image_states, _images_update)
        # Told of every pod added or removed (``pod_added(node, task)``, ``pod_removed(node, task)``):
        # the vectorised filters and scores keep their per-node sums with it (busched.fastpath.podview).
        self.listeners: list[Any] = []

    def release(self) -> None:
        """The session is released (`Session.release`): the listeners (which hold this view) let go of it."""
        self.listeners = []

    @property
    def terminating(self) -> set[str]:
        """Pods Releasing at open (pods being deleted: topology spread skips them)."""
        if self._terminating is None:
            self._terminating = {uid for ps in self.pods.opened.values() for uid, t in ps.items()
                                 if t.status == TaskStatus.Releasing}
        return self._terminating

    def terms(self, task: TaskInfo) -> PodTerms:
        t = self._terms.get(task.uid)
        if t is None:
            t = self._terms[task.uid] = pod_terms(task)
        return t

    def on(self, node: str) -> dict[str, TaskInfo]:
        return self.pods.get(node, {})

    def add(self, task: TaskInfo) -> None:
        """``task`` is on its node now (the predicates plugin's allocate handler: every task allocate
        places comes here).  `add_plain` written out for a pod the view does not hold yet: the node's
        map found with one lookup (a node the view changed is one it opened), its copy made in place,
        the pod's part read as `pod_requests` reads it for a pod of cpu, memory and at most a pod
        count; anything else is `add_plain`'s (tests/framework/test_podview_add.py compares the two)."""
        node = task.node_name
        pods = self.pods
        own = pods._own.get(node)
        uid = task.uid
        moved = self._moved
        if own is None:
            held = pods.opened.get(node)
            if held is None or uid in held or uid in moved:
                self.add_plain(task)
                return
            own = pods._own[node] = dict(held)  # (`_Pods.own`)
        elif uid in own or uid in moved:
            self.add_plain(task)
            return
        own[uid] = task
        moved[uid] = node
        s = self._sums.get(node)
        listeners = self.listeners
        if s is None and not listeners:
            return
        r = task.resreq
        rs = r.scalars
        sc: dict[str, int]
        if rs and (len(rs) != 1 or PODS not in rs):
            c, m, sc = pod_requests(task)
        else:  # `pod_requests` of a pod without scalars but its count
            c, m, sc = int(r.cpu), int(r.memory), {}
        part = (c, m, c or DEFAULT_MILLI_CPU, m or DEFAULT_MEMORY, sc)
        if s is not None:
            scalars = s[4]
            if sc:
                scalars = dict(scalars)
                for k, v in sc.items():
                    scalars[k] = scalars.get(k, 0) + v
            self._sums[node] = (s[0] + c, s[1] + m, s[2] + part[2], s[3] + part[3], scalars)
        for ls in listeners:
            ls.pod_added(node, task, part)

    def add_plain(self, task: TaskInfo) -> None:
        """`add`'s reference: any pod, whether the view holds it already or not."""
        node = task.node_name
        pods = self.pods
        if node not in pods.opened:  # (``node not in self.pods``)
            return
        uid = task.uid
        own = pods._own.get(node)
        if uid in self._moved or uid in (own if own is not None else pods.opened[node]):
            self.remove(task)  # a pod the view holds already (here, or where it moved to): off first
            own = None
        if own is None:
            own = pods.own(node)
        own[uid] = task
        self._moved[uid] = node
        s = self._sums.get(node)
        listeners = self.listeners
        if s is None and not listeners:
            return
        # the pod's part, as `pod_requests` and `non_zero_requests` give it, read once for the sums
        # and the listeners (every task allocate places comes here)
        c, m, sc = pod_requests(task)
        part = (c, m, c or DEFAULT_MILLI_CPU, m or DEFAULT_MEMORY, sc)
        if s is not None:
            # the node's sums grow by this pod's requests (integers: the same as summing afresh)
            scalars = s[4]
            if sc:
                scalars = dict(scalars)
                for k, v in sc.items():
                    scalars[k] = scalars.get(k, 0) + v
            self._sums[node] = (s[0] + c, s[1] + m, s[2] + part[2], s[3] + part[3], scalars)
        for ls in listeners:
            ls.pod_added(node, task, part)

    def remove(self, task: TaskInfo) -> None:
        uid = task.uid
        if uid in self._moved:
            node = self._moved[uid]
        else:
            node = task.node_name
            if uid not in self.pods.get(node, ()):
                node = None
        if node is None:
            return
        self._moved[uid] = None
        gone = self.pods.own(node).pop(uid, None)
        if gone is not None:
            self._changed(node)
            for ls in self.listeners:
                ls.pod_removed(node, gone)

    def _changed(self, node: str) -> None:
        self._sums.pop(node, None)

    def requested(self, node: str) -> tuple[int, int, int, int, dict[str, int]]:
        """(cpu, memory, non-zero cpu, non-zero memory, scalars) summed over the node's pods (for a
        node whose pods the view has not changed, kept on the node from session to session)."""
        s = self._sums.get(node)
        if s is None:
            if self.pods.changed(node):
                s = sum_pods(self.pods[node])
            else:
                pods = self.pods.opened[node]
                s = node_value(self.nodes[node], "pods.requested", lambda _: sum_pods(pods))
            self._sums[node] = s
        return s

    def pod_columns(self) -> tuple[np.ndarray, ...]:
        """Per node (in node-list order): pods, cpu, memory, non-zero cpu, non-zero memory, and a map of
        scalar columns; what the pod view arrays start from (busched.fastpath.podview) instead of
        adding every pod.  The columns as the nodes were lent are kept from session to session
        (busched.fastpath.memo; rows redone for the nodes that changed), then the rows of the
        nodes this view has changed are put in.  The arrays returned are the caller's."""
        base = self._ssn.incremental("pods.columns", self.node_list, podcolumns.columns, podcolumns.columns_update)
        cols = [c.copy() for c in base[:5]]
        scalars = {k: v.copy() for k, v in base[5].items()}
        at = {n.name: i for i, n in enumerate(self.node_list)} if self.pods.changed_nodes() else {}
        for name in self.pods.changed_nodes():
            i = at.get(name)
            if i is not None:
                podcolumns.put_row(cols, scalars, i, len(self.node_list), len(self.on(name)), self.requested(name))
        return (*cols, scalars)


class _Pods(Mapping[str, dict[str, TaskInfo]]):
    """node -> its pods: the task maps as of the open, each copied on the view's first change to it."""

    def __init__(self, opened: dict[str, dict[str, TaskInfo]]) -> None:
        self.opened = opened  # shared with other sessions: never changed
        self._own: dict[str, dict[str, TaskInfo]] = {}

    def changed(self, node: str) -> bool:
        return node in self._own

    def changed_nodes(self) -> list[str]:
        return list(self._own)

    def own(self, node: str) -> dict[str, TaskInfo]:
        d = self._own.get(node)
        if d is None:
            d = self._own[node] = dict(self.opened[node])
        return d

    def __getitem__(self, node: str) -> dict[str, TaskInfo]:
        d = self._own.get(node)
        return d if d is not None else self.opened[node]

    @overload
    def get(self, node: str) -> dict[str, TaskInfo] | None: ...
    @overload
    def get(self, node: str, default: T) -> dict[str, TaskInfo] | T: ...

    def get(self, node: str, default: Any = None) -> Any:
        d = self._own.get(node)
        if d is not None:
            return d
        return self.opened.get(node, default)

    def __contains__(self, node: object) -> bool:
        return node in self.opened

    def __iter__(self) -> Any:
        return iter(self.opened)

    def __len__(self) -> int:
        return len(self.opened)

    def items(self) -> Any:
        own = self._own
        return [(k, own.get(k, v)) for k, v in self.opened.items()]

    def values(self) -> Any:
        own = self._own
        return [own.get(k, v) for k, v in self.opened.items()]


def _open_pods(nodes: list[NodeInfo]) -> dict[str, dict[str, TaskInfo]]:
    return {n.name: n.tasks for n in nodes}


def _open_pods_update(last: dict[str, dict[str, TaskInfo]], pairs: Pairs) -> Any:
    out = dict(last)
    for _, old, new in pairs:
        if old is None or old.name != new.name:
            return None
        out[new.name] = new.tasks
    return out


def _affinity_nodes(nodes: list[NodeInfo]) -> tuple[list[str], list[str], list[tuple[bool, bool]]]:
    """The nodes holding a pod with required pod affinity / anti-affinity terms (each node's answer
    kept on the node while its pods do not change), and every node's answer.  A node without pods
    answers (False, False) (`_node_affinity`): only the nodes holding pods are asked."""
    affinity, anti = [], []
    answers = [_NO_AFFINITY] * len(nodes)
    for i in itertools.compress(range(len(nodes)), map(_tasks, nodes)):  # (in C)
        n = nodes[i]
        has, has_anti = answers[i] = node_value(n, "pods.affinity", _node_affinity)
        if has:
            affinity.append(n.name)
        if has_anti:
            anti.append(n.name)
    return affinity, anti, answers


def _affinity_update(last: Any, pairs: Pairs) -> Any:
    """The same lists while no node that changed changed its answer."""
    answers = last[2]
    for i, old, new in pairs:
        if old is None or node_value(new, "pods.affinity", _node_affinity) != answers[i]:
            return None
    return last


def _images_update(last: Any, pairs: Pairs) -> Any:
    """The same states while no node that changed changed its images."""
    for _, old, new in pairs:
        if old is None or old.name != new.name or old.images != new.images:
            return None
    return last


def _node_affinity(n: NodeInfo) -> tuple[bool, bool]:
    terms = [pod_terms(t) for t in n.tasks.values() if t.affinity]
    return any(t.has_pod_affinity for t in terms), any(t.required_anti for t in terms)


def _image_states(nodes: list[NodeInfo]) -> dict[str, dict[str, tuple[int, int]]]:
    """node -> image -> (size, number of nodes holding it), for the nodes holding images (readers
    take a node left out as holding none).

    Volcano's cache counts an image's nodes when each node arrives, so a node sees the count
    as of its own arrival (list order); a node without images adds to no count.
    """
    seen: dict[str, int] = {}
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for n in sorted(filter(_images, nodes), key=_index):  # (filtered in C)
        for image in n.images:
            seen[image] = seen.get(image, 0) + 1
        out[n.name] = {image: (int(size), seen[image]) for image, size in n.images.items()}
    return out


_tasks = operator.attrgetter("tasks")
_images = operator.attrgetter("images")
_index = operator.attrgetter("index")
_NO_AFFINITY = (False, False)


def session_pods(ssn: Session) -> SessionPods:
    """The session's pod view, created on first use (plugins ask for it when the session opens)."""
    v = ssn.shared.get("pods")
    if v is None:
        v = ssn.shared["pods"] = SessionPods(ssn)
    return v


def count_matching(view: SessionPods, node: str, selector: k8s.Selector, namespace: str) -> int:
    """countPodsMatchSelector: pods of the namespace matching the selector; terminating pods and an
    empty (select-all) selector count nothing."""
    if selector == ():
        return 0
    return sum(1 for uid, p in view.on(node).items()
               if uid not in view.terminating and p.namespace == namespace and k8s.selector_matches(selector, p.labels))
