"""The pod view's columns as the nodes were lent: per node (in node-list order) its pod count, cpu,
memory, non-zero cpu and memory, and one column per scalar, summed from each node's tasks.

Apart from the view (busched.framework.podview, `SessionPods.pod_columns`) because they are kept from
session to session by the memo (busched.fastpath.memo: ``columns`` builds them, ``columns_update`` redoes
the rows of the nodes that changed) and know nothing of a session; the pod view arrays
(busched.fastpath.podview) start from them instead of adding every pod.
tests/fastpath/test_node_side_shortcuts.py checks ``columns`` against a pod-by-pod reference."""

from __future__ import annotations

import itertools
import operator
from typing import Any

import numpy as np

from busched.api.node import NodeInfo
from busched.fastpath.memo import Pairs, node_value
from busched.framework.podsums import sum_pods

__all__ = ["lent_sums", "columns", "columns_update", "put_row"]

_TASKS = operator.attrgetter("tasks")


def lent_sums(n: NodeInfo) -> tuple[int, int, int, int, dict[str, int]]:
    """A node's pod sums as lent (its task map as of the open), kept on the node."""
    sums: tuple[int, int, int, int, dict[str, int]] = node_value(n, "pods.requested", lambda _: sum_pods(n.tasks))
    return sums


def columns(nodes: list[NodeInfo]) -> tuple[Any, ...]:
    k = len(nodes)
    tasks = list(map(_TASKS, nodes))
    cols = [np.fromiter(map(len, tasks), dtype=np.int64, count=k)]
    cols += [np.zeros(k, dtype=np.int64) for _ in range(4)]
    scalars: dict[str, np.ndarray] = {}
    # a node without pods sums to zeros (`sum_pods` of no pods): only the nodes holding pods are summed
    for i in itertools.compress(range(k), tasks):  # (in C)
        c, m, nz_c, nz_m, named = lent_sums(nodes[i])
        cols[1][i], cols[2][i], cols[3][i], cols[4][i] = c, m, nz_c, nz_m
        for name, v in named.items():
            col = scalars.get(name)
            if col is None:
                col = scalars[name] = np.zeros(k, dtype=np.int64)
            col[i] += v
    return (*cols, scalars)


def columns_update(last: tuple[Any, ...], pairs: Pairs) -> tuple[Any, ...] | None:
    cols = [c.copy() for c in last[:5]]
    scalars = {name: v.copy() for name, v in last[5].items()}
    k = len(cols[0])
    for i, old, new in pairs:
        if old is None or old.name != new.name:
            return None
        for col in scalars.values():
            col[i] = 0
        put_row(cols, scalars, i, k, len(new.tasks), lent_sums(new))
    return (*cols, scalars)


def put_row(cols: list[np.ndarray], scalars: dict[str, np.ndarray], i: int, k: int, count: int,
             s: tuple[int, int, int, int, dict[str, int]]) -> None:
    cols[0][i] = count
    for j in range(4):
        cols[j + 1][i] = s[j]
    for col in scalars.values():
        col[i] = 0
    for name, v in s[4].items():
        named = scalars.get(name)
        if named is None:
            named = scalars[name] = np.zeros(k, dtype=np.int64)
        named[i] = v
