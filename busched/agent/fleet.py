"""Simulated fleets: N identical nodes named <prefix>-<i>."""

from __future__ import annotations

from busched.api.objects import NodeSpec, ResourceList

__all__ = ["fleet_nodes", "parse_labels"]


def parse_labels(text: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        k, sep, v = part.partition("=")
        if not sep or not k.strip():
            raise ValueError(f"--labels: expected k=v, got {part!r}")
        out[k.strip()] = v.strip()
    return out


def fleet_nodes(count: int, *, cpu: str = "8", memory: str = "16Gi", gpu: str | int | None = None,
                pods: int = 110, labels: dict[str, str] | None = None, prefix: str = "node",
                start: int = 0) -> list[NodeSpec]:
    nodes = []
    width = max(2, len(str(start + count - 1)))
    for i in range(start, start + count):
        name = f"{prefix}-{i:0{width}d}"
        alloc: ResourceList = {"cpu": str(cpu), "memory": str(memory), "pods": pods}
        if gpu not in (None, "", 0, "0"):
            alloc["nvidia.com/gpu"] = str(gpu)
        lab = {"kubernetes.io/hostname": name, **(labels or {})}
        nodes.append(NodeSpec(name=name, allocatable=alloc, labels=lab))
    return nodes
