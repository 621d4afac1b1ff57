"""A `Resource` back to a Kubernetes-style resource list, for what goes on the wire or to the user."""

from __future__ import annotations

from busched.api.objects import ResourceList
from busched.api.resource import Resource

__all__ = ["resource_list"]


def _milli(v: float) -> str:
    n = int(round(v))
    return str(n // 1000) if n % 1000 == 0 else f"{n}m"


def resource_list(r: Resource, *, skip_zero: bool = False) -> ResourceList:
    """cpu in cores or millicores (``"2"``, ``"500m"``), memory in bytes, pods a count, other scalars like cpu."""
    d = r.to_dict()
    out: ResourceList = {"cpu": _milli(d.pop("cpu", 0.0)), "memory": str(int(d.pop("memory", 0.0)))}
    for k, v in d.items():
        out[k] = int(v) if k == "pods" else _milli(v)
    if skip_zero:
        out = {k: v for k, v in out.items() if v not in ("0", 0)}
    return out
