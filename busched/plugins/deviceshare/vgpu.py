"""Virtual GPUs (Volcano's ``hamivgpu`` device, api/devices/nvidia/vgpu, HAMi's hami-core sharing).

A node offers vGPUs when it carries the register annotation ``volcano.sh/node-vgpu-register`` (see
`busched.plugins.deviceshare.vgpu_codec`) and its allocatable names non-zero ``volcano.sh/vgpu-number``,
``volcano.sh/vgpu-cores`` and ``volcano.sh/vgpu-memory``.  A task asks with ``volcano.sh/vgpu-number``
(how many cards; 1 when only memory is given), ``volcano.sh/vgpu-memory`` (MiB on each card; none given:
the whole card) and ``volcano.sh/vgpu-cores`` (percent of each card's compute; 100: the card alone).  Its
annotations may restrict the cards: ``nvidia.com/use-gputype`` / ``nvidia.com/nouse-gputype`` (type
substrings, comma separated), ``volcano.sh/vgpu-use-gpuuuid`` / ``volcano.sh/vgpu-nouse-gpuuuid`` (exact
UUIDs), ``volcano.sh/vgpu-mode`` (the node's sharing mode must be this) and
``volcano.sh/vgpu-podgroup-policy: spread`` (no two tasks of its podgroup on one card).

Cards are tried in the order of ``deviceshare.SchedulePolicy``: ``binpack`` the most used memory first,
``spread`` the fewest tasks first, anything else the highest index first; each card taken adds
``100 * used memory / memory`` (binpack) or 100 when no task uses it (spread) to the node's score, counted
after the task is (as Volcano counts it: so a spread score is always 0, the policy acting only through
the order).  A task's assignment goes out with its bind as ``volcano.sh/vgpu-ids-new`` (and the other
annotations of `VgpuDevices.allocate`).

Volcano's MIG mode needs the geometries of its device ConfigMap; busched reads no ConfigMap, so a card
registered as ``mig`` falls back to hami-core, as Volcano does when the config names no geometry for it.
Where Volcano walks a Go map to find the card a UUID names, we take the exact UUID first, then the first
card (by index) whose UUID the name contains.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from busched.api.node import NodeInfo
from busched.api.task import TaskInfo
from busched.plugins.deviceshare import vgpu_codec as codec
from busched.plugins.deviceshare.base import DeviceError, whole

__all__ = ["DEVICE_NAME", "VgpuCard", "VgpuDevices", "VgpuRequest", "request_of", "gpu_score",
           "VGPU_NUMBER", "VGPU_MEMORY", "VGPU_CORES", "VGPU_REGISTER", "ASSIGNED_IDS", "BIND_PHASE"]

DEVICE_NAME = "hamivgpu"
VGPU_NUMBER = "volcano.sh/vgpu-number"
VGPU_MEMORY = "volcano.sh/vgpu-memory"
VGPU_CORES = "volcano.sh/vgpu-cores"
VGPU_REGISTER = "volcano.sh/node-vgpu-register"
GPU_IN_USE = "nvidia.com/use-gputype"
GPU_NO_USE = "nvidia.com/nouse-gputype"
USE_UUID = "volcano.sh/vgpu-use-gpuuuid"
NO_USE_UUID = "volcano.sh/vgpu-nouse-gpuuuid"
GPU_MODE = "volcano.sh/vgpu-mode"
PODGROUP_POLICY = "volcano.sh/vgpu-podgroup-policy"
ASSIGNED_NODE = "volcano.sh/vgpu-node"
ASSIGNED_TIME = "volcano.sh/vgpu-time"
ASSIGNED_IDS = "volcano.sh/vgpu-ids-new"
IDS_TO_ALLOCATE = "volcano.sh/devices-to-allocate"
BIND_TIME = "volcano.sh/bind-time"
BIND_PHASE = "volcano.sh/bind-phase"
NVIDIA = "NVIDIA"
BINPACK, SPREAD = "binpack", "spread"
_ASSIGNMENT_KEYS = [ASSIGNED_NODE, ASSIGNED_IDS, IDS_TO_ALLOCATE, ASSIGNED_TIME, BIND_TIME, BIND_PHASE]


@dataclass(frozen=True)
class VgpuRequest:
    """What one container asks (Volcano's ContainerDeviceRequest); ``mem_percent`` 101: none given."""

    nums: int
    mem: int
    mem_percent: int
    cores: int


def request_of(task: TaskInfo) -> VgpuRequest | None:
    """The task's request (busched tasks are one container), None when it asks for no vGPU."""
    given = task.resreq.scalars
    if VGPU_NUMBER not in given and VGPU_MEMORY not in given:
        return None
    nums = whole(given[VGPU_NUMBER]) if VGPU_NUMBER in given else 1
    mem = whole(given.get(VGPU_MEMORY, 0.0))
    # Volcano's default device config names no memory-percentage resource: a task without memory takes it all
    percent = 100 if mem == 0 else 101
    return VgpuRequest(nums, mem, percent, whole(given.get(VGPU_CORES, 0.0)))


@dataclass
class CardUse:
    """What one task holds on one card."""

    num: int = 0
    mem: int = 0
    cores: int = 0
    group: str = ""


@dataclass
class VgpuCard:
    index: int
    uuid: str
    number: int  # how many tasks may share it
    memory: int
    type: str
    health: bool = True
    used_num: int = 0
    used_mem: int = 0
    used_cores: int = 0
    tasks: dict[str, CardUse] = field(default_factory=dict)

    def hold(self, uid: str, mem: int, cores: int, group: str) -> None:
        use = self.tasks.setdefault(uid, CardUse(group=group))
        use.num += 1
        use.mem += mem
        use.cores += cores
        self.used_num += 1
        self.used_mem += mem
        self.used_cores += cores

    def free(self, uid: str) -> None:
        use = self.tasks.pop(uid, None)
        if use is not None:
            self.used_num -= use.num
            self.used_mem -= use.mem
            self.used_cores -= use.cores


def gpu_score(policy: str, used_num: int, used_mem: int, memory: int) -> float:
    """One card's score under ``policy`` (Volcano's GPUScore), from its use."""
    if policy == BINPACK:
        return 100 * used_mem / memory if memory else 0.0
    if policy == SPREAD:
        return 100.0 if used_num == 0 else 0.0
    return 0.0


def type_allowed(annotations: dict[str, str], card_type: str) -> bool:
    """``nvidia.com/use-gputype`` (one must be in the type) wins over ``nvidia.com/nouse-gputype`` (none may)."""
    upper = card_type.upper()
    if GPU_IN_USE in annotations:
        return any(v.upper() in upper for v in annotations[GPU_IN_USE].split(","))
    if GPU_NO_USE in annotations:
        return not any(v.upper() in upper for v in annotations[GPU_NO_USE].split(","))
    return True


def _uuid_list(value: str) -> list[str]:
    return [u.strip() for u in value.split(",") if u.strip()]


@dataclass
class Placement:
    """The cards a fit chose: (card index, memory, cores) per card, and the score they add."""

    cards: list[tuple[int, int, int]]
    score: float


class VgpuDevices:
    name = DEVICE_NAME

    def __init__(self, node: str, cards: dict[int, VgpuCard], mode: str = codec.HAMI_CORE) -> None:
        self.node = node
        self.cards = cards
        self.mode = mode
        self.policy = ""  # deviceshare.SchedulePolicy, set by the plugin

    @classmethod
    def from_node(cls, node: NodeInfo) -> VgpuDevices | None:
        text = node.annotations.get(VGPU_REGISTER)
        if text is None:
            return None
        for name in (VGPU_NUMBER, VGPU_CORES, VGPU_MEMORY):
            if whole(node.allocatable.get(name)) == 0:
                return None
        entries = codec.decode_register(text)
        if not entries:
            return None
        # MIG needs the device ConfigMap's geometries, which busched does not read: hami-core, as Volcano falls back
        cards = {e.index: VgpuCard(e.index, e.uuid, e.number, e.memory, e.type, e.health) for e in entries}
        return cls(node.name, cards, codec.HAMI_CORE)

    def card_named(self, uuid: str) -> VgpuCard | None:
        for card in self.cards.values():
            if card.uuid == uuid:
                return card
        for i in sorted(self.cards):
            if self.cards[i].uuid in uuid:
                return self.cards[i]
        return None

    # -- the session's operations ----------------------------------------------------------------------
    def has_request(self, task: TaskInfo) -> bool:
        return request_of(task) is not None

    def add_task(self, task: TaskInfo) -> None:
        """Account a task already here from its ``volcano.sh/vgpu-ids-new`` (a card counts it once)."""
        group = task.job
        for devs in codec.decode_pod_devices(task.annotations.get(ASSIGNED_IDS, "")):
            for d in devs:
                card = self.card_named(d.uuid)
                if card is not None and task.uid not in card.tasks:
                    card.hold(task.uid, d.used_mem, d.used_cores, group)

    def filter(self, task: TaskInfo, capped: frozenset[int] = frozenset()) -> str | None:
        fit = self.fit(task, capped)
        return f"hami-vgpuDeviceSharing error: {fit}" if isinstance(fit, str) else None

    def score(self, task: TaskInfo, policy: str, capped: frozenset[int] = frozenset()) -> float:
        fit = self.fit(task, capped, policy)
        return 0.0 if isinstance(fit, str) else fit.score

    def allocate(self, task: TaskInfo, now_ns: int, capped: frozenset[int] = frozenset()) -> dict[str, str]:
        fit = self.fit(task, capped)
        if isinstance(fit, str):
            raise DeviceError(fit)
        devs = []
        for index, mem, cores in fit.cards:
            card = self.cards[index]
            card.hold(task.uid, mem, cores, task.job)
            devs.append(codec.ContainerDevice(card.uuid, NVIDIA, mem, cores))
        ids = codec.encode_pod_devices([devs])
        seconds = str(now_ns // 1_000_000_000)
        return {ASSIGNED_NODE: self.node, ASSIGNED_TIME: seconds, ASSIGNED_IDS: ids, IDS_TO_ALLOCATE: ids,
                BIND_PHASE: "allocating", BIND_TIME: seconds}

    def release(self, task: TaskInfo) -> list[str]:
        for card in self.cards.values():
            card.free(task.uid)
        # once its device plugin reported the bind done the annotations are the agent's
        return [] if task.annotations.get(BIND_PHASE) == "success" else list(_ASSIGNMENT_KEYS)

    # -- the fit (Volcano's checkNodeGPUSharingPredicateAndScore) ------------------------------------------
    def order(self, policy: str) -> list[int]:
        """The card indices in the order ``policy`` tries them."""
        cards = self.cards
        if policy == BINPACK:
            return sorted(cards, key=lambda i: (-cards[i].used_mem, i))
        if policy == SPREAD:
            return sorted(cards, key=lambda i: (cards[i].used_num, i))
        return sorted(cards, reverse=True)

    def fit(self, task: TaskInfo, capped: frozenset[int] = frozenset(), policy: str | None = None) -> Placement | str:
        """The cards the task would get here, or why it gets none; nothing is changed.  ``capped``: cards
        the task may not share (the exclusive rules')."""
        policy = self.policy if policy is None else policy
        req = request_of(task)
        if req is None:
            return Placement([], 0.0)
        wanted_mode = task.annotations.get(GPU_MODE)
        if wanted_mode is not None and wanted_mode != self.mode:
            return f"pod required sharing mode {wanted_mode} is not the same as the node mode {self.mode}"
        if req.nums > len(self.cards):
            return f"no enough gpu cards on node {self.node}"
        allow = _uuid_list(task.annotations.get(USE_UUID, ""))
        deny = _uuid_list(task.annotations.get(NO_USE_UUID, ""))
        group = task.job if task.annotations.get(PODGROUP_POLICY) == SPREAD else ""
        chosen: list[tuple[int, int, int]] = []
        score = 0.0
        nums, uuid_matched = req.nums, False
        for i in self.order(policy):
            card = self.cards[i]
            if (allow and card.uuid not in allow) or card.uuid in deny or ((allow or deny) and not card.uuid):
                continue
            uuid_matched = True
            used_num, used_mem, used_cores = card.used_num, card.used_mem, card.used_cores
            if i in capped or card.number <= used_num:
                continue
            if group and any(u.group == group and (u.mem > 0 or u.cores > 0) for u in card.tasks.values()):
                continue
            mem = card.memory * req.mem_percent // 100 if req.mem_percent != 101 else req.mem
            if card.memory - used_mem < mem or used_cores + req.cores > 100:
                continue
            if (req.cores == 100 and used_num > 0) or (used_cores == 100 and req.cores == 0):
                continue
            if NVIDIA not in card.type or not type_allowed(task.annotations, card.type):
                continue
            if nums > 0:
                nums -= 1
                chosen.append((i, mem, req.cores))
                # counted with this task on the card, as Volcano scores after its TryAddPod
                score += gpu_score(policy, used_num + 1, used_mem + mem, card.memory)
            if nums == 0:
                break
        if nums > 0:
            if (allow or deny) and not uuid_matched:
                return (f"no GPU matches UUID constraints {USE_UUID}={task.annotations.get(USE_UUID, '')!r}, "
                        f"{NO_USE_UUID}={task.annotations.get(NO_USE_UUID, '')!r} on node {self.node}")
            return "not enough gpu fitted on this node"
        return Placement(chosen, score)
