"""GPU sharing by memory and by number (Volcano's ``GpuShare`` device, api/devices/nvidia/gpushare).

A node offers shared GPUs when its capacity names both ``volcano.sh/gpu-memory`` (the memory of all its
cards together) and ``volcano.sh/gpu-number`` (how many cards): each card gets an equal share of the memory
(integer division), and the cards listed in the node annotation ``volcano.sh/gpu-unhealthy-ids``
(``"1,3"``) are left out.  A task asks for ``volcano.sh/gpu-memory`` (one card with that much memory
free: sharing) or ``volcano.sh/gpu-number`` (that many cards no task holds: whole cards).  The cards a
task was given are in its annotation ``volcano.sh/gpu-index`` (``"0"`` or ``"0,1"``), which the
scheduler writes with its bind (beside ``volcano.sh/predicate-time``) and an agent reports back.

The bookkeeping is a card -> {task: memory} map, as Volcano's PodMap: a card is idle while no task is in
it; its used memory is the sum of its tasks' requests, a finished task counting none; a card over-
subscribed (a task that named its own index) has no memory free rather than a negative amount.  Where
Volcano walks a Go map (the idle cards a number request takes) we take the cards in index order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from busched.api.node import NodeInfo
from busched.api.task import TaskInfo, completed_status
from busched.plugins.deviceshare.base import DeviceError, whole

__all__ = ["DEVICE_NAME", "GPU_MEMORY", "GPU_NUMBER", "GPU_INDEX", "PREDICATE_TIME", "UNHEALTHY_GPU_IDS",
           "GpuCard", "GpuShareDevices", "gpu_memory_of", "gpu_number_of", "gpu_index_of"]

DEVICE_NAME = "GpuShare"
GPU_MEMORY = "volcano.sh/gpu-memory"
GPU_NUMBER = "volcano.sh/gpu-number"
PREDICATE_TIME = "volcano.sh/predicate-time"
GPU_INDEX = "volcano.sh/gpu-index"
UNHEALTHY_GPU_IDS = "volcano.sh/gpu-unhealthy-ids"


def gpu_memory_of(task: TaskInfo) -> int:
    return whole(task.resreq.get(GPU_MEMORY))


def gpu_number_of(task: TaskInfo) -> int:
    return whole(task.resreq.get(GPU_NUMBER))


def gpu_index_of(task: TaskInfo) -> list[int]:
    """The cards named by the task's ``volcano.sh/gpu-index``; none when absent or malformed (Volcano's GetGPUIndex)."""
    value = task.annotations.get(GPU_INDEX)
    if value is None:
        return []
    try:
        return [int(part) for part in value.split(",")]
    except ValueError:
        return []


@dataclass
class GpuCard:
    id: int
    memory: int  # this card's memory
    tasks: dict[str, int] = field(default_factory=dict)  # task uid -> the memory it holds here (0: finished)

    def used_memory(self) -> int:
        return sum(self.tasks.values())

    def idle_memory(self) -> int:
        return max(0, self.memory - self.used_memory())

    def idle(self) -> bool:
        return not self.tasks


class GpuShareDevices:
    """One node's shared GPUs.  ``sharing`` / ``number``: deviceshare.GPUSharingEnable / GPUNumberEnable."""

    name = DEVICE_NAME

    def __init__(self, node: str, cards: dict[int, GpuCard], *, sharing: bool, number: bool) -> None:
        self.node = node
        self.cards = cards
        self.sharing = sharing
        self.number = number

    @classmethod
    def from_node(cls, node: NodeInfo, *, sharing: bool, number: bool) -> GpuShareDevices | None:
        """The node's cards, or None when its capacity does not name both resources (or names no card)."""
        present = node.capacity.scalars
        if GPU_MEMORY not in present or GPU_NUMBER not in present:
            return None
        count = whole(node.capacity.get(GPU_NUMBER))
        if count == 0:
            return None
        per_card = whole(node.capacity.get(GPU_MEMORY)) // count
        cards = {i: GpuCard(i, per_card) for i in range(count)}
        for sid in node.annotations.get(UNHEALTHY_GPU_IDS, "").split(","):
            if sid.strip().lstrip("-").isdigit():
                cards.pop(int(sid), None)
        return cls(node.name, cards, sharing=sharing, number=number)

    # -- what a task asks for -------------------------------------------------------------------------
    def has_request(self, task: TaskInfo) -> bool:
        return (self.sharing and gpu_memory_of(task) > 0) or (self.number and gpu_number_of(task) > 0)

    def cards_by_memory(self, task: TaskInfo) -> list[int]:
        """The cards with enough memory free for the task, in index order (predicateGPUbyMemory)."""
        want = gpu_memory_of(task)
        return sorted(i for i, c in self.cards.items() if c.idle_memory() >= want)

    def cards_by_number(self, task: TaskInfo) -> list[int]:
        """The first idle cards the task's number asks for, or none when there are too few."""
        want = gpu_number_of(task)
        idle = sorted(i for i, c in self.cards.items() if c.idle())
        return idle[:want] if len(idle) >= want else []

    # -- the session's operations ----------------------------------------------------------------------
    def add_task(self, task: TaskInfo) -> None:
        """Account a task already placed here, on the cards its ``volcano.sh/gpu-index`` names."""
        if gpu_memory_of(task) <= 0 and gpu_number_of(task) <= 0:
            return
        self._hold(task, gpu_index_of(task))

    def filter(self, task: TaskInfo) -> str | None:
        """Why the task cannot have its cards here (Volcano's message), or None when it can."""
        if self.sharing and gpu_memory_of(task) > 0 and not self.cards_by_memory(task):
            return f"GpuShare no enough gpu memory on node {self.node}"
        if self.number and gpu_number_of(task) > 0 and not self.cards_by_number(task):
            return f"GpuNumber no enough gpu number on node {self.node}"
        return None

    def score(self, task: TaskInfo, policy: str) -> float:
        return 0.0  # Volcano's GpuShare scores nothing

    def allocate(self, task: TaskInfo, now_ns: int) -> dict[str, str]:
        """Give the task its cards: the first card with the memory (sharing), else the first idle cards
        (number).  Returns the annotations its bind carries; raises `DeviceError` when none fit."""
        if gpu_memory_of(task) > 0:
            ids = self.cards_by_memory(task)[:1]
        elif gpu_number_of(task) > 0:
            ids = self.cards_by_number(task)
        else:
            return {}
        if not ids:
            raise DeviceError(f"the node {self.node} can't place the task {task.key}")
        self._hold(task, ids)
        return {PREDICATE_TIME: str(now_ns), GPU_INDEX: ",".join(str(i) for i in ids)}

    def release(self, task: TaskInfo) -> list[str]:
        """Free the task's cards; the annotation keys its bind no longer carries."""
        for card in self.cards.values():
            card.tasks.pop(task.uid, None)
        return [PREDICATE_TIME, GPU_INDEX]

    def _hold(self, task: TaskInfo, ids: list[int]) -> None:
        memory = 0 if completed_status(task.status) else gpu_memory_of(task)
        for i in ids:
            card = self.cards.get(i)
            if card is not None:
                card.tasks[task.uid] = memory

