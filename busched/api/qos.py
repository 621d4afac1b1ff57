"""A task's Kubernetes QoS class (Guaranteed, Burstable, BestEffort) from its requests and limits.

busched tasks are one container each, so this is Kubernetes' ``GetPodQOS`` for one container: only
cpu and memory count, a zero quantity counts as absent, and a request left out where a limit is set
is the limit (Kubernetes defaults it so at admission).  numa-aware reads it: Volcano aligns the cpus
of Guaranteed pods only.
"""

from __future__ import annotations

from busched.api.resource import Resource

__all__ = ["GUARANTEED", "BURSTABLE", "BEST_EFFORT", "pod_qos"]

GUARANTEED, BURSTABLE, BEST_EFFORT = "Guaranteed", "Burstable", "BestEffort"


def pod_qos(requests: Resource, limits: Resource | None) -> str:
    req = (requests.cpu, requests.memory)
    lim = (limits.cpu, limits.memory) if limits is not None else (0.0, 0.0)
    if not any(req) and not any(lim):
        return BEST_EFFORT
    if all(lim) and all(r == 0 or r == m for r, m in zip(req, lim, strict=True)):
        return GUARANTEED
    return BURSTABLE
