"""What a session starts from: the cluster's jobs, nodes and queues for one session.

Either private copies (``Cache.snapshot(memo=False)``) or objects lent for the session's
length (busched.fastpath.lending): a session may change them, through the task index of jobs
and nodes (which flags them written), and closing the session returns the lease.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from busched.api.job import JobInfo
from busched.api.node import NodeInfo
from busched.api.queue import HyperNode, PriorityClass, QueueInfo

__all__ = ["ClusterSnapshot", "Shard"]


@dataclass
class Shard:
    """The part of the cluster this scheduler owns (Volcano's node sharding)."""

    mode: str = ""  # "" (none) | hard | soft
    name: str = ""
    nodes: frozenset[str] = frozenset()


@dataclass
class ClusterSnapshot:
    nodes: list[NodeInfo] = field(default_factory=list)  # scan order
    jobs: dict[str, JobInfo] = field(default_factory=dict)
    queues: dict[str, QueueInfo] = field(default_factory=dict)
    priority_classes: dict[str, PriorityClass] = field(default_factory=dict)
    hypernodes: dict[str, HyperNode] = field(default_factory=dict)
    resource_quotas: list[dict[str, Any]] = field(default_factory=list)
    others: dict[str, Any] = field(default_factory=dict)  # cluster objects some plugins read (pdbs...)
    shard: Shard = field(default_factory=Shard)
    # set when the jobs and nodes are lent (busched.fastpath.lending): closing the session returns them
    lease: Any = None
    # the jobs for which `busched.api.job.unsettled` holds, in job order (None: the session finds them)
    unsettled: list[JobInfo] | None = None
    # task key -> the nodes that refused it recently (their agent rejected the bind or never took it): the
    # scheduler's feedback, read by the busched-agent-feedback predicate (busched.plugins.refused_nodes)
    refused: dict[str, frozenset[str]] = field(default_factory=dict)

    def release(self) -> None:
        """Give the lent objects back without a session (a reader that only looked: it must not have
        changed them); otherwise the next snapshot assembles everything again."""
        if self.lease is not None:
            self.lease.closed = True
