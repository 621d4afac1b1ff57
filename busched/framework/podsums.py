"""A node's pod sums for the pod view (busched.framework.podview): requests, their non-zero
forms as Kubernetes scores them, and extended resources.  Apart from the view because the sum is
the hot loop of a first session (every pod of the cluster, 140,000 after a restart): `sum_pods`
writes `pod_requests` and `non_zero_requests` out, `sum_pods_plain` is its reference."""

from __future__ import annotations

from busched.api.k8s import DEFAULT_MEMORY, DEFAULT_MILLI_CPU, non_zero_requests, pod_requests
from busched.api.resource import PODS
from busched.api.task import TaskInfo

__all__ = ["sum_pods", "sum_pods_plain"]


def sum_pods(pods: dict[str, TaskInfo]) -> tuple[int, int, int, int, dict[str, int]]:
    """`sum_pods_plain` with `pod_requests` and `non_zero_requests` written out (a first session
    sums every pod of the cluster here: 140,000 of them after a restart); the same whole numbers
    (tests/framework/test_podview_sums.py compares the two)."""
    cpu = mem = nz_cpu = nz_mem = 0
    scalars: dict[str, int] = {}
    for t in pods.values():
        r = t.resreq
        c, m = int(r.cpu), int(r.memory)
        cpu += c
        mem += m
        nz_cpu += c or DEFAULT_MILLI_CPU
        nz_mem += m or DEFAULT_MEMORY
        sc = r.scalars
        if sc and not (len(sc) == 1 and PODS in sc):
            for k, v in sc.items():
                if k != PODS and v > 0:
                    scalars[k] = scalars.get(k, 0) + -(-int(v) // 1000)
    return cpu, mem, nz_cpu, nz_mem, scalars


def sum_pods_plain(pods: dict[str, TaskInfo]) -> tuple[int, int, int, int, dict[str, int]]:
    """The reference: each pod's `pod_requests` and `non_zero_requests`, added."""
    cpu = mem = nz_cpu = nz_mem = 0
    scalars: dict[str, int] = {}
    for t in pods.values():
        c, m, sc = pod_requests(t)
        nc, nm = non_zero_requests(t)
        cpu, mem, nz_cpu, nz_mem = cpu + c, mem + m, nz_cpu + nc, nz_mem + nm
        for k, v in sc.items():
            scalars[k] = scalars.get(k, 0) + v
    return cpu, mem, nz_cpu, nz_mem, scalars
