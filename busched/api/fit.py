"""Predicate outcomes: status codes, per-node fit errors, as Volcano's unschedule_info."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

__all__ = ["Code", "Status", "FitError", "FitErrors", "NODE_RESOURCE_FIT_FAILED"]

NODE_RESOURCE_FIT_FAILED = "NodeResourceFitFailed"


class Code(enum.IntEnum):
    Success = 0
    Error = 1
    Unschedulable = 2
    UnschedulableAndUnresolvable = 3
    Wait = 4
    Skip = 5
    Pending = 6


@dataclass(frozen=True)
class Status:
    code: Code
    reason: str = ""
    plugin: str = ""


@dataclass
class FitError(Exception):
    """Why one task does not fit one node: the statuses of the failing predicates."""

    task: str
    node: str
    statuses: list[Status] = field(default_factory=list)

    def __str__(self) -> str:
        reasons = ", ".join(s.reason for s in self.statuses if s.reason)
        return f"task {self.task} on node {self.node}: {reasons}"

    @property
    def code(self) -> Code:
        return self.statuses[0].code if self.statuses else Code.Success

    def has(self, *codes: Code) -> bool:
        return any(s.code in codes for s in self.statuses)

    def reasons(self) -> list[str]:
        return [s.reason for s in self.statuses]


def kept(e: FitError) -> FitError:
    """``e``, kept past the except clause that caught it, without its traceback (nor its causes'): the
    traceback's frames hold the session and what the search had in hand, and with ``e`` kept in those
    same objects they form reference cycles that keep a finished session for the collector."""
    seen: BaseException | None = e
    for _ in range(8):  # (a chain is short; the bound only guards against one that loops)
        if seen is None:
            break
        seen.__traceback__ = None
        seen = seen.__cause__ or seen.__context__
    return e


def unschedulable(task: str, node: str, reason: str, plugin: str = "",
                  code: Code = Code.Unschedulable) -> FitError:
    return FitError(task, node, [Status(code, reason, plugin)])


@dataclass
class FitErrors:
    """Fit errors of one task over many nodes, plus a task-level message."""

    nodes: dict[str, FitError] = field(default_factory=dict)
    err: str = ""

    def set_node_error(self, node: str, e: FitError | Exception) -> None:
        if not isinstance(e, FitError):
            e = FitError("", node, [Status(Code.Error, str(e))])
        self.nodes[node] = kept(e)

    def set_error(self, msg: str) -> None:
        self.err = msg

    def unresolvable_nodes(self) -> set[str]:
        return {n for n, e in self.nodes.items() if e.has(Code.UnschedulableAndUnresolvable)}

    def __str__(self) -> str:
        if self.err:
            return self.err
        hist: dict[str, int] = {}
        for e in self.nodes.values():
            for r in e.reasons():
                hist[r] = hist.get(r, 0) + 1
        parts = sorted(f"{v} {k}" for k, v in hist.items())
        return f"0/{len(self.nodes)} nodes are unavailable: " + ", ".join(parts) + "."
